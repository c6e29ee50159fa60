"""The launch tree (Slurm's ``TreeWidth``): how a message meant for many nodes is split so
that no sender contacts more than ``width`` of them itself.

``subtrees(nodes, width)`` cuts the list into at most ``width`` contiguous groups of nearly
equal size (sizes differ by one at most, the larger ones first). The sender contacts the
first node of each group, its *head*, and hands it the rest of the group; the head splits
that rest the same way, and so on. The tree is ``ceil(log_width(n))`` levels deep, so a
launch over ``n`` nodes takes time that grows with ``log(n)``, not ``n``.

Contracts: every node appears in exactly one group, in the order given; no group is empty;
``width`` below 1 is read as 1 (a chain); a width at least ``len(nodes)`` gives one group
per node (flat: the sender contacts everyone, as ``TreeWidth=65533`` does in Slurm).
Pure and import-free: ``srun`` and the agents both call it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # spares srun's start-up the import
    from collections.abc import Sequence
    from typing import TypeVar

    T = TypeVar("T")

__all__ = ["DEFAULT_WIDTH", "depth", "subtrees"]

DEFAULT_WIDTH = 50  # Slurm's default TreeWidth


def subtrees(nodes: Sequence[T], width: int) -> list[list[T]]:
    """``nodes`` in at most ``width`` contiguous groups of nearly equal size."""
    n = len(nodes)
    if n == 0:
        return []
    groups = min(max(1, width), n)
    size, extra = divmod(n, groups)
    out: list[list[T]] = []
    start = 0
    for i in range(groups):
        end = start + size + (1 if i < extra else 0)
        out.append(list(nodes[start:end]))
        start = end
    return out


def depth(n: int, width: int) -> int:
    """How many levels of agents a launch over ``n`` nodes crosses (1: the sender reaches
    every node itself)."""
    if n <= 0:
        return 0
    levels = 0
    pending = [n]
    while pending:
        levels += 1
        pending = [len(g) - 1 for count in pending for g in subtrees(range(count), width) if len(g) > 1]
    return levels
