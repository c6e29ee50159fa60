"""Heterogeneous jobs (Slurm's "hetjobs"): one job made of components, each with its own
options, started together or not at all.

A submission lists its components separated by ``:`` on the command line
(``sbatch -N1 : -N2 job.sh``, ``salloc A : B``, ``srun A : B cmd``) or by a
``#SBATCH hetjob`` (or the older ``#SBATCH packjob``) line among a batch script's
directives. Each component becomes a job of its own with consecutive job ids; the first
is the *leader*, whose id names the whole job (``Submitted batch job N``) and whose
batch script is the only one run. Commands show component ``k`` as ``N+k``.

Nothing here does I/O: these are the words and the small rules every layer shares.
"""

from __future__ import annotations

__all__ = [
    "NOT_WHOLE",
    "SEPARATOR",
    "SCRIPT_SEPARATORS",
    "het_label",
    "het_suffix",
    "split_components",
]

SEPARATOR = ":"
# ``#SBATCH hetjob`` splits a script's directives into components; ``packjob`` is its
# name before Slurm 20.02, still accepted.
SCRIPT_SEPARATORS = ("hetjob", "packjob")
# Slurm's text for ESLURM_NOT_WHOLE_HET_JOB (e.g. cancelling one component of a pending job)
NOT_WHOLE = "Operation not permitted on individual component of heterogeneous job"


def split_components(argv: list[str]) -> list[list[str]]:
    """A command line cut at each lone ``:`` argument: one list per component (a line
    without ``:`` is one component)."""
    out: list[list[str]] = [[]]
    for arg in argv:
        if arg == SEPARATOR:
            out.append([])
        else:
            out[-1].append(arg)
    return out


def het_label(job_id: int, het_job_id: int | None, offset: int | None) -> str:
    """How commands print a job id: ``N+k`` for component k of heterogeneous job N."""
    if het_job_id is None or offset is None:
        return str(job_id)
    return f"{het_job_id}+{offset}"


def het_suffix(offset: int) -> str:
    """The suffix of the per-component variables: ``SLURM_JOB_ID_HET_GROUP_1``."""
    return f"_HET_GROUP_{offset}"
