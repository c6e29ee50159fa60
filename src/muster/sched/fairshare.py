"""Fair-share, as pure math: decayed usage per association, Slurm's Fair Tree factor, and
the table of factors a pass reads (``Snapshot.fairshare``).

Nothing here reads a clock, the store or the association database: callers pass times,
usage and the tree (``children``) in. The controller (``ctld.accounting``) keeps the usage
of its associations with ``Usage``, ranks them with ``fair_tree`` and gives the pass
``factor_table``'s result; ``sched.priority`` looks a job up with ``fairshare_of``.

Usage
-----
A running job charges every association on its path to root (its user association, its
account, the accounts above, root) with its TRES multiplied by seconds: per TRES
(``cpu``, ``mem``, ``node``, ``gres/gpu``) and as ``billing``, the TRES weighted by the
partition's ``TRESBillingWeights`` (muster's default weights make GPUs dominant, see
``muster.ctld.tres``) times the QOS ``UsageFactor``. Usage decays exponentially with
``PriorityDecayHalfLife`` (default 7 days; 0 turns decay off): a charge made ``h`` seconds
ago counts half. ``Usage.charge`` integrates the decay exactly over the charged interval,
so the result does not depend on how often usage is brought up to date.
``PriorityUsageResetPeriod`` (DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY; NONE by default)
clears it at each period's start, local time: ``Usage.reset`` (the controller decides when,
see ``ctld.reset_period``).

Fair Tree
---------
muster ranks users with Fair Tree, the algorithm Slurm uses by default since 19.05 (not the
"classic" 2^(-usage/shares) formula). For every association::

    LevelFS = S / U     S = shares / sum of the shares of it and its siblings
                        U = usage  / sum of the usage  of it and its siblings
                        (U = 0 gives an infinite LevelFS; no shares gives 0)

Then the tree is walked from root, each level's children in decreasing LevelFS; accounts
tied on LevelFS have their children merged and walked together. Users get ranks in the
order they are met, from N (the number of user associations) down; a user tied with the
one met before shares its rank. A user association's fair-share factor is ``rank / N``:
1.0 for the most under-served user, smaller for those who used more than their share.
Two accounts with equal shares: the one with less usage has all its users ranked above
the other's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Node", "Standing", "Usage", "factor_table", "fair_tree", "fairshare_of"]


class Usage:
    """Decayed TRES-seconds per association key, valid at ``as_of``."""

    def __init__(self, half_life: float | None, as_of: float) -> None:
        self.half_life = half_life if half_life and half_life > 0 else None
        self.as_of = as_of
        self.values: dict[str, dict[str, float]] = {}
        self.since: float | None = None  # nothing before this counts (a reset period)

    def reset(self, since: float) -> None:
        """Forget all usage; from now on only what ran after ``since`` is charged."""
        self.values.clear()
        self.since = since

    def decay_to(self, now: float) -> None:
        if now <= self.as_of:
            return
        if self.half_life is not None:
            factor = 2.0 ** (-(now - self.as_of) / self.half_life)
            for per_tres in self.values.values():
                for name in per_tres:
                    per_tres[name] *= factor
        self.as_of = now

    def weight(self, a: float, b: float) -> float:
        """Decayed seconds in [a, b] as seen at ``as_of`` (b <= as_of)."""
        if b <= a:
            return 0.0
        if self.half_life is None:
            return b - a
        h = self.half_life
        return float(h / math.log(2) * (2.0 ** (-(self.as_of - b) / h) - 2.0 ** (-(self.as_of - a) / h)))

    def charge(self, keys: Iterable[str], rates: dict[str, float], a: float, b: float) -> None:
        """Add ``rates`` (per second) over [a, b] to each key; call ``decay_to`` first."""
        if self.since is not None:
            a = max(a, self.since)
        b = min(b, self.as_of)
        seconds = self.weight(a, b)
        if seconds <= 0:
            return
        for key in keys:
            per_tres = self.values.setdefault(key, {})
            for name, rate in rates.items():
                per_tres[name] = per_tres.get(name, 0.0) + rate * seconds

    def get(self, key: str, name: str = "billing") -> float:
        return self.values.get(key, {}).get(name, 0.0)


@dataclass(frozen=True, slots=True)
class Node:
    """One association as Fair Tree sees it."""

    key: str
    is_user: bool
    shares: int


@dataclass(slots=True)
class Standing:
    """An association's fair-share figures (what sshare prints)."""

    norm_shares: float
    raw_usage: float
    effective_usage: float
    level_fs: float
    factor: float | None  # user associations only


def fair_tree(
    root: str,
    children: Callable[[str], list[Node]],
    usage: Callable[[str], float],
) -> dict[str, Standing]:
    """Fair Tree over the tree below ``root`` (a key); ``children(key)`` lists an account's
    associations, ``usage(key)`` their decayed billing usage."""
    out: dict[str, Standing] = {}
    kids: dict[str, list[Node]] = {}

    def level(key: str) -> list[Node]:
        nodes = children(key)
        kids[key] = nodes
        total_shares = sum(max(0, n.shares) for n in nodes)
        total_usage = sum(usage(n.key) for n in nodes)
        for n in nodes:
            s = max(0, n.shares) / total_shares if total_shares else 0.0
            u_raw = usage(n.key)
            u = u_raw / total_usage if total_usage > 0 else 0.0
            if s == 0:
                lfs = 0.0
            elif u == 0:
                lfs = math.inf
            else:
                lfs = s / u
            out[n.key] = Standing(s, u_raw, u, lfs, None)
            if not n.is_user:
                level(n.key)
        return nodes

    level(root)
    users_total = sum(1 for s_key, nodes in kids.items() for n in nodes if n.is_user)
    ranked: list[str] = []
    ties: list[bool] = []

    def walk(nodes: list[Node]) -> None:
        order = sorted(nodes, key=lambda n: (-out[n.key].level_fs, not n.is_user, n.key))
        i = 0
        while i < len(order):
            j = i
            lfs = out[order[i].key].level_fs
            while j + 1 < len(order) and _same(out[order[j + 1].key].level_fs, lfs):
                j += 1
            group = order[i : j + 1]
            first = True
            for n in group:
                if n.is_user:
                    ranked.append(n.key)
                    ties.append(not first)
                    first = False
            merged = [c for n in group if not n.is_user for c in kids.get(n.key, [])]
            if merged:
                walk(merged)
            i = j + 1

    walk(kids.get(root, []))
    rank = users_total
    for i, key in enumerate(ranked):
        if not (ties[i] and i > 0):
            rank = users_total - i
        standing = out[key]
        standing.factor = 0.0 if standing.norm_shares == 0 else (rank / users_total if users_total else 0.0)
    return out


def _same(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def factor_table(standing: Mapping[str, Standing]) -> dict[str, float]:
    """The factors ``fairshare_of`` looks a job up in: every user association's under its
    key (``account|user``: what a job's factor is), and for jobs whose association is
    not known the user's (when all its associations agree) or the account's average."""
    by_user: dict[str, list[tuple[str, float]]] = {}
    out: dict[str, float] = {}
    for key, s in standing.items():
        account, _, user = key.partition("|")
        if user and s.factor is not None:
            by_user.setdefault(user, []).append((account, s.factor))
            out[key] = s.factor
    shared: dict[str, list[float]] = {}
    for user, items in by_user.items():
        factors = {f for _, f in items}
        if len(factors) == 1:
            out[user] = items[0][1]
        else:
            for account, f in items:
                shared.setdefault(account, []).append(f)
    for account, fs in shared.items():
        # An account named like a user with several associations would be found under
        # that user's name first (``fairshare_of`` looks up the user, then the account):
        # leave it out.
        if account not in out and not (account in by_user and len(by_user[account]) > 1):
            out[account] = sum(fs) / len(fs)
    return out


def fairshare_of(table: Mapping[str, float], user: str, account: str | None, default: float) -> float:
    """A job's fair-share factor: its association's (``account|user``), else its user's,
    else its account's, else ``default``."""
    if account is not None:
        fs = table.get(f"{account}|{user}")
        if fs is not None:
            return fs
    fs = table.get(user)
    if fs is None and account is not None:
        fs = table.get(account)
    return default if fs is None else fs
