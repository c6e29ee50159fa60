"""Stragglers: which nodes of a job run their steps markedly slower than their peers, judged from each node's median step time (pure: times are passed in).

A job reports each rank's steps (``muster.progress.step``); the node agent keeps, per rank,
a rolling median of its step durations, and the controller turns a node's ranks into one
``Pace`` (``node_pace``: its slowest rank, since a node is as slow as its slowest rank).
``judge`` compares each node's pace with its peers' in the same job:

* **robust**: the reference is the median of the *other* nodes' medians, and a node is slow
  only when it is both ``slower`` (15 %) above that reference and more than ``mad_k``
  scaled median absolute deviations (MAD x 1.4826) of the peers above it, so a job whose
  nodes are unequal anyway (mixed hardware, noisy steps) does not flag its slowest one;
* **enough evidence**: a node is judged only once its median rests on ``min_samples``
  step durations, and only where at least ``min_nodes`` nodes are (two nodes cannot say
  which one is slow);
* **hysteresis**: a node is flagged once it was slow at every judgement for ``sustain``
  seconds (one slow step, a checkpoint, a garbage collection do not flag: the median hides
  a few, the sustain window the rest), and cleared once it was below ``clear`` (10 %) for
  ``sustain`` seconds.

``judge`` takes and returns the per-node ``Watch`` (its state between judgements), so the
caller keeps it wherever it likes (the controller: in the job's progress, committed with it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Pace", "Rules", "Watch", "flagged", "judge", "node_pace", "text"]

MAD_SCALE = 1.4826  # a MAD times this estimates the standard deviation of normal noise
EXACT_UP_TO = 32  # nodes up to which each is compared with exactly the others (else with all)


@dataclass(frozen=True, slots=True)
class Rules:
    """When a node is a straggler. The defaults catch issue 37's nodes ">= 20 % slower"
    within 5 minutes: flagging at 15 % leaves room for the noise of a median of 9 steps
    (benchmarks/bench_stragglers.py: at 20 % a 20 % node is caught in two runs of three)."""

    slower: float = 0.15  # flagged at this fraction above the peers' median step time
    clear: float = 0.10  # a flagged node is cleared below this fraction
    sustain: float = 60.0  # seconds slow (or fast again) at every judgement before it counts
    min_samples: int = 5  # step durations behind a node's median before it is judged
    min_nodes: int = 3  # nodes with a judged pace in the job
    mad_k: float = 3.0  # and this many scaled MADs of the peers above their median

    def __post_init__(self) -> None:
        if not (0 < self.clear <= self.slower):
            raise ValueError("stragglers: need 0 < clear <= slower")
        if self.sustain < 0 or self.min_samples < 1 or self.min_nodes < 2 or self.mad_k < 0:
            raise ValueError("stragglers: sustain >= 0, min_samples >= 1, min_nodes >= 2, mad_k >= 0")


@dataclass(frozen=True, slots=True)
class Pace:
    """A node's step time: the median seconds per step of its slowest rank, over ``samples``
    step durations."""

    median: float
    samples: int
    rank: str = ""  # the rank it comes from ("" when the job did not say ranks)


@dataclass(frozen=True, slots=True)
class Watch:
    """One node's state between judgements. ``slow_since``: first judgement of the current
    run of slow ones; ``fast_since``: likewise below ``clear`` (for a flagged node);
    ``flagged``: when it was flagged (None: not a straggler); ``slower``, ``median``,
    ``peers``: the evidence at the last judgement (fraction above, its median, the peers')."""

    slow_since: float | None = None
    fast_since: float | None = None
    flagged: float | None = None
    slower: float = 0.0
    median: float = 0.0
    peers: float = 0.0

    def to_list(self) -> list[Any]:
        return [self.slow_since, self.fast_since, self.flagged, self.slower, self.median, self.peers]

    @classmethod
    def from_list(cls, raw: Any) -> Watch:
        """A ``to_list`` read back (from the store); anything else is a fresh watch."""
        if not isinstance(raw, list | tuple) or len(raw) != 6:
            return cls()
        vals = [float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None for v in raw]
        return cls(vals[0], vals[1], vals[2], vals[3] or 0.0, vals[4] or 0.0, vals[5] or 0.0)


def node_pace(ranks: Mapping[str, Any], min_samples: int = 1) -> Pace | None:
    """A node's ``Pace`` from its ranks' reports (rank -> ``[step, time, median, samples]``,
    as the agent sends them): the slowest rank with at least ``min_samples`` durations."""
    best: Pace | None = None
    for rank, v in ranks.items():
        if not isinstance(v, list | tuple) or len(v) < 4:
            continue
        median, samples = v[2], v[3]
        if not isinstance(median, int | float) or not isinstance(samples, int) or isinstance(samples, bool):
            continue
        if samples < min_samples or not median > 0:
            continue
        if best is None or median > best.median:
            best = Pace(float(median), samples, str(rank))
    return best


def _reference(peers: list[float]) -> tuple[float, float]:
    """The median of ``peers`` and their scaled MAD."""
    ref = statistics.median(peers)
    return ref, statistics.median(abs(p - ref) for p in peers) * MAD_SCALE


def _slow(x: float, ref: float, mad: float, rules: Rules) -> tuple[bool, float, float]:
    """Whether pace ``x`` is slow against its peers' median ``ref`` and scaled MAD ``mad``;
    with the fraction above and the reference."""
    if ref <= 0:
        return False, 0.0, ref
    frac = x / ref - 1.0
    return frac >= rules.slower and x - ref > rules.mad_k * mad, frac, ref


def judge(
    paces: Mapping[str, Pace], watches: Mapping[str, Watch], now: float, rules: Rules = Rules()
) -> dict[str, Watch]:
    """The watches after a judgement at ``now`` of the nodes' ``paces`` (see the module
    docstring). Nodes without a judged pace keep their watch as it was (a flagged node stays
    flagged until it is seen fast again); watches of nodes not in ``paces`` are dropped."""
    judged = {n: p for n, p in paces.items() if p.samples >= rules.min_samples and p.median > 0}
    # each node against the others; in a large job one node hardly moves the median and the
    # MAD of all, computed once (O(n log n) instead of O(n^2 log n): a 1,000-node job)
    shared = _reference([p.median for p in judged.values()]) if len(judged) > EXACT_UP_TO else None
    out: dict[str, Watch] = {}
    for node in paces:
        w = watches.get(node, Watch())
        pace = judged.get(node)
        if pace is None or len(judged) < rules.min_nodes:
            out[node] = replace(w, slow_since=None, fast_since=None) if w.flagged is None else w
            continue
        ref, mad = shared or _reference([p.median for n, p in judged.items() if n != node])
        slow, frac, ref = _slow(pace.median, ref, mad, rules)
        w = replace(w, slower=frac, median=pace.median, peers=ref)
        if w.flagged is None:
            since = (w.slow_since if w.slow_since is not None else now) if slow else None
            flagged = now if since is not None and now - since >= rules.sustain else None
            out[node] = replace(w, slow_since=since, fast_since=None, flagged=flagged)
        else:
            fast = frac < rules.clear
            since = (w.fast_since if w.fast_since is not None else now) if fast else None
            if since is not None and now - since >= rules.sustain:
                out[node] = Watch(slower=frac, median=pace.median, peers=ref)
            else:
                out[node] = replace(w, fast_since=since, slow_since=None)
    return out


def flagged(watches: Mapping[str, Watch]) -> dict[str, Watch]:
    """The stragglers among ``watches``, by node name."""
    return {n: w for n, w in sorted(watches.items()) if w.flagged is not None}


def text(stragglers: Mapping[str, Any]) -> str:
    """``node3(+34%),node7(+21%)``: the stragglers as ``scontrol show job`` and squeue show
    them (values: a ``Watch`` or a dict with ``slower``)."""
    parts = []
    for node, w in sorted(stragglers.items()):
        frac = w.slower if isinstance(w, Watch) else (w or {}).get("slower", 0.0) if isinstance(w, dict) else 0.0
        parts.append(f"{node}(+{round(float(frac or 0.0) * 100)}%)")
    return ",".join(parts)
