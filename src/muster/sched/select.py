"""Placement: which of the nodes that fit a job get it (cons_tres semantics).

Order of preference, deterministic by construction:

1. nodes the job named with ``-w`` are always taken;
2. lower node ``Weight`` first (the admin's word, as in Slurm);
3. best fit: the node left with the fewest free GPUs, then CPUs, then memory after the
   job is placed. This fills partly used nodes before idle ones, so whole nodes stay free
   for large jobs, and keeps CPU-only jobs off free GPUs (fewest fragmented GPU nodes);
4. among equally good nodes, the fewest leaf switches when nodes name theirs
   (``NodeView.switch``, as in topology.conf): one switch that can hold the whole share
   if any (the smallest such, so big switches stay whole), else the biggest switches
   first; then a run that is contiguous in node order (``NodeView.index``, the stand-in
   for topology when none is given), the tightest run first, then the lowest index.

GPU indices are the lowest free ones on each node.
"""

from __future__ import annotations

from muster.sched.profile import NodeProfile

__all__ = ["fit_key", "pick"]

FitKey = tuple[int, int, int, int]


def fit_key(node: NodeProfile, free: tuple[int, int, int], need: tuple[int, int, int]) -> FitKey:
    """Smaller is better: (weight, GPUs left, CPUs left, memory left)."""
    return (node.weight, free[2] - need[2], free[0] - need[0], free[1] - need[1])


def pick(fitting: list[tuple[FitKey, NodeProfile]], count: int, required: frozenset[str]) -> list[NodeProfile]:
    """Choose ``count`` nodes among ``fitting`` (each with its fit key); the caller has
    checked that there are enough and that all ``required`` nodes are among them."""
    chosen: list[NodeProfile] = []
    if required:
        chosen = [n for _, n in fitting if n.name in required]
        fitting = [(k, n) for k, n in fitting if n.name not in required]
    left = count - len(chosen)
    if left <= 0:
        return chosen
    if left == 1:
        best = min(fitting, key=lambda kn: (kn[0], kn[1].index))
        chosen.append(best[1])
        return chosen
    fitting = sorted(fitting, key=lambda kn: (kn[0], kn[1].index))
    i = 0
    while left > 0:
        j = i
        while j < len(fitting) and fitting[j][0] == fitting[i][0]:
            j += 1
        tier = [n for _, n in fitting[i:j]]
        if len(tier) <= left:
            chosen.extend(tier)
            left -= len(tier)
        else:
            chosen.extend(_by_switch(tier, left))
            left = 0
        i = j
    return chosen


def _by_switch(nodes: list[NodeProfile], count: int) -> list[NodeProfile]:
    """``count`` of ``nodes`` (in index order) on as few leaf switches as possible."""
    if nodes[0].switch is None and nodes[-1].switch is None:
        return _tightest_run(nodes, count)
    groups: dict[str, list[NodeProfile]] = {}
    for n in nodes:
        groups.setdefault(n.switch or "", []).append(n)
    if len(groups) == 1:
        return _tightest_run(nodes, count)
    # (size, first index): deterministic whatever the names
    fits = [g for g in groups.values() if len(g) >= count]
    if fits:
        best = min(fits, key=lambda g: (len(g), g[0].index))
        return _tightest_run(best, count)
    chosen: list[NodeProfile] = []
    for g in sorted(groups.values(), key=lambda g: (-len(g), g[0].index)):
        chosen.extend(g[: count - len(chosen)])
        if len(chosen) == count:
            break
    return sorted(chosen, key=lambda n: n.index)


def _tightest_run(nodes: list[NodeProfile], count: int) -> list[NodeProfile]:
    """The ``count`` consecutive nodes (in index order) spanning the fewest indices."""
    best = 0
    best_span = nodes[count - 1].index - nodes[0].index
    for s in range(1, len(nodes) - count + 1):
        span = nodes[s + count - 1].index - nodes[s].index
        if span < best_span:
            best, best_span = s, span
    return nodes[best : best + count]
