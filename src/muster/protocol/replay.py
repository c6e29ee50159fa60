"""Replay protection that survives restarts: a nonce cache plus a persisted floor.

A signed message carries its signing time ``ts`` and a random nonce. A receiver accepts it
only when all of these hold:

1. ``ts`` is within ``window`` seconds of the receiver's clock (a stale capture is useless);
2. ``ts >= floor``, where ``floor`` was read from the receiver's state directory when it
   started (the *replay floor*);
3. the nonce is not in the in-memory cache of nonces accepted since the receiver started.

Before it accepts a message whose ``ts`` reaches the persisted ``limit``, the receiver
writes a new limit ``ts + step`` to its state file (atomically, fsync'ed) and only then
accepts. Hence **every message an incarnation accepted has ``ts < limit``**, and the limit
on disk is never behind. The next incarnation reads that limit as its floor (rule 2), so
it refuses every message the previous ones could have accepted, whatever the clocks did;
within one incarnation rule 3 refuses a second delivery. Together: a captured message is
accepted at most once, ever, by this receiver (other receivers refuse it because messages
are bound to their receiver, see ``signing``).

The cost is one small write every ``step`` seconds at most, and a gap of at most ``step``
seconds after a restart during which honest senders' messages, signed before the floor,
are refused with a ``StaleMessage`` that names the floor: the senders re-sign at the floor
(``httpd.SignedClient`` does so once) and are accepted.

The floor at start is never below the receiver's own clock at start: messages signed
before it are refused, also when the state file is missing, unreadable, or could not be
written lately (a full or read-only disk: then messages are still accepted, once each,
and the failure is logged, so that a full disk never cuts the daemons off from each other).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

MAX_SKEW = 300.0  # seconds a signature stays valid; nonces are remembered this long
FLOOR_STEP = 2.0  # how far ahead of the newest accepted message the persisted limit runs

__all__ = ["FLOOR_STEP", "MAX_SKEW", "GrantLedger", "ReplayGuard", "SignatureError", "StaleMessage"]


class SignatureError(Exception):
    """A message that must not be accepted; ``str()`` says why."""


class StaleMessage(SignatureError):
    """Signed before this receiver's replay floor (``floor``): possibly a replay."""

    def __init__(self, message: str, floor: float) -> None:
        super().__init__(message)
        self.floor = floor


class ReplayGuard:
    """Refuses messages outside the time window, before the floor, or seen before.

    ``path`` (optional) is the file holding the persisted limit; without it the guard
    protects one incarnation only (tests, tools). ``now`` is the receiver's clock at
    start, the floor when ``path`` does not exist yet.
    """

    def __init__(
        self,
        window: float = MAX_SKEW,
        path: str | None = None,
        now: float | None = None,
        step: float = FLOOR_STEP,
    ) -> None:
        self.window = window
        self.path = path
        self.step = step
        self._seen: dict[str, float] = {}
        self.floor = 0.0
        if path is not None:
            # Never below the receiver's own clock at start: a message signed before this
            # incarnation began is refused even if the last limit could not be written (a
            # full or read-only disk); the stored limit covers a clock set back meanwhile.
            stored = _read_floor(path)
            self.floor = max(stored if stored is not None else 0.0, float(now or 0.0))
        self.limit = self.floor
        self._write_failed_at: float | None = None

    def check(self, nonce: str, ts: float, now: float) -> None:
        """Accept (and remember) a message, or raise ``SignatureError`` saying why not."""
        if abs(now - ts) > self.window:
            raise SignatureError("message timestamp outside the allowed window (check clocks)")
        if ts < self.floor:
            raise StaleMessage(f"message signed before this daemon's replay floor {self.floor:.3f}", self.floor)
        if len(self._seen) > 10_000:
            cutoff = now - 2 * self.window
            self._seen = {n: t for n, t in self._seen.items() if t >= cutoff}
        if nonce in self._seen:
            raise SignatureError("replayed message")
        self.advance(ts)
        self._seen[nonce] = now

    def admit(self, ts: float) -> None:
        """For messages whose single use is enforced elsewhere (step grants): refuse one
        issued before the floor, and raise the persisted limit past it."""
        if ts < self.floor:
            raise StaleMessage(f"credential issued before this daemon's replay floor {self.floor:.3f}", self.floor)
        self.advance(ts)

    def advance(self, ts: float) -> None:
        """Make sure the persisted limit is above ``ts`` before ``ts`` is accepted."""
        if self.path is None or ts < self.limit:
            return
        new = ts + self.step
        try:
            _write_floor(self.path, new)
        except OSError as e:
            # A full or read-only disk must not cut the daemons off from each other (a
            # controller that refused every heartbeat would soon call every node dead).
            # The message is new to this incarnation (the nonce cache), and a restart
            # starts the floor at its own clock; so it is accepted, and said so.
            if self._write_failed_at is None or ts - self._write_failed_at > 60:
                log.error(
                    "cannot record the replay floor in %s (%s); relying on the clock at the next start",
                    self.path,
                    e.strerror or e,
                )
                self._write_failed_at = ts
            return
        self.limit = new


def _read_floor(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    try:
        return float(text)
    except ValueError:  # cannot happen with atomic writes; treated as missing
        return None


def _write_floor(path: str, value: float) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{value:.3f}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class GrantLedger:
    """The step grants a node has launched, on disk until they expire: a grant is used once.

    A floor is too blunt for grants: a grant the controller signed just before this agent
    restarted, for a step that was never launched here, is honest, and srun cannot re-sign
    it. So the agent notes each grant's (job, attempt, step) and expiry in ``path``
    (appended, fsync'ed) *before* it launches the step, and a restarted agent reads the
    notes back: a grant is refused when it is noted (launched before, by this run or an
    earlier one), expired, or issued before ``floor``, the time from which the notes are
    complete (the first start with this file: the agent's clock then; a missing or
    unreadable file starts a new ledger at the clock, which refuses every grant issued
    before, as a floor does). Notes of expired grants are dropped when the file is
    compacted, and ``pruned`` (kept in the file) remembers up to when: a grant that expired
    before it is refused even if the clock is later set back. A note that cannot be written
    (full or read-only disk) refuses the launch: an unrecorded launch could be replayed
    after the next restart.
    """

    COMPACT_AFTER = 1000  # notes appended before the file is rewritten with the live ones

    def __init__(self, path: str, now: float) -> None:
        self.path = path
        self._used: dict[tuple[int, int, int], float] = {}
        self._appended = 0
        loaded = _read_ledger(path)
        if loaded is None:
            self.floor, self.pruned = now, now
        else:
            self.floor, self.pruned, self._used = loaded
        self._compact(now)

    def admit(self, key: tuple[int, int, int], issued: float, expires: float, now: float) -> None:
        """Note the grant of step ``key`` (job, attempt, step) as used, or raise
        ``SignatureError`` saying why it must not be launched."""
        if key in self._used:
            raise SignatureError(f"step {key[0]}.{key[2]} was already launched on this node")
        if issued < self.floor:
            raise StaleMessage(f"credential issued before this node's step ledger began {self.floor:.3f}", self.floor)
        if expires < self.pruned or expires < now:
            raise SignatureError("expired step credential")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{key[0]} {key[1]} {key[2]} {expires:.3f}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise SignatureError(f"cannot record the step credential in {self.path}: {e.strerror or e}") from None
        self._used[key] = expires
        self._appended += 1
        if self._appended >= self.COMPACT_AFTER:
            self._compact(now)

    def _compact(self, now: float) -> None:
        live = {k: e for k, e in self._used.items() if e >= now}
        pruned = max(self.pruned, now)
        lines = [f"ledger {self.floor:.3f} {pruned:.3f}\n"]
        lines += [f"{j} {a} {s} {e:.3f}\n" for (j, a, s), e in live.items()]
        tmp = f"{self.path}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, "".join(lines).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:  # the old file (if any) still holds every note: keep using it
            log.error("cannot rewrite the step ledger %s (%s)", self.path, e.strerror or e)
            return
        self._used, self.pruned, self._appended = live, pruned, 0


def _read_ledger(path: str) -> tuple[float, float, dict[tuple[int, int, int], float]] | None:
    """(floor, pruned, notes) from a ledger file; None when it is missing or has no header.
    A torn last line (a crash while appending) is skipped: its launch was never accepted."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    try:
        tag, floor, pruned = lines[0].split()
        if tag != "ledger":
            return None
        head = (float(floor), float(pruned))
    except (IndexError, ValueError):
        return None
    used: dict[tuple[int, int, int], float] = {}
    for line in lines[1:]:
        try:
            job, attempt, step, expires = line.split()
            used[(int(job), int(attempt), int(step))] = float(expires)
        except ValueError:
            continue
    return head[0], head[1], used
