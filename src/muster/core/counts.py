"""Slurm's compact count lists: ``[2, 2, 1]`` -> ``2(x2),1``.

The form of ``SLURM_TASKS_PER_NODE``, ``SLURM_JOB_CPUS_PER_NODE`` and their kin: a value
repeated on consecutive nodes is written once with ``(xN)``. This module is its only writer
(tests/unit/test_architecture.py checks that no other module spells the pattern).
"""

TYPE_CHECKING = False  # collections.abc costs a command (salloc) its import
if TYPE_CHECKING:
    from collections.abc import Sequence


def format_counts(counts: "Sequence[int]") -> str:
    """``[2, 2, 1]`` -> ``2(x2),1``; ``[4]`` -> ``4``; ``[]`` -> ``""``."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        run = j - i + 1
        parts.append(f"{counts[i]}(x{run})" if run > 1 else str(counts[i]))
        i = j + 1
    return ",".join(parts)
