"""Resource limits that travel with a job: Slurm's names, which of them propagate, checks.

A job's processes get the submit shell's soft limits (``ulimit -n``, ``-s``, ``-l``...) for
the limits that propagate, and the node agent's for the others (Slurm's behaviour):

* ``PropagateResourceLimits`` (slurm.conf; default ``ALL``) names the limits that propagate,
  or ``PropagateResourceLimitsExcept`` the ones that do not; only one of the two may be set.
* ``--propagate[=rlim[,rlim...]]`` (sbatch, srun, salloc) overrides both for one job; a bare
  ``--propagate`` is ``ALL``.

The names are ``AS CORE CPU DATA FSIZE MEMLOCK NOFILE NPROC RSS STACK`` (``RLIMIT_`` may be
prefixed), plus ``ALL`` and ``NONE``, case-blind. The commands capture the chosen soft limits
(``resource.getrlimit``) into the job's ``rlimits`` (name -> value, ``UNLIMITED`` = -1); the
agent sets them in each task, within the hard limits it runs under itself (``agent.rlimits``).

Pure and import-free: the commands import it at submission.
"""

__all__ = ["NAMES", "UNLIMITED", "RlimitError", "check", "parse_names", "propagated", "shared"]

# In Slurm's order (its ``rlimits_info`` table): what ``ALL`` means.
NAMES = ("CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK", "AS")
UNLIMITED = -1  # RLIM_INFINITY on the wire
MAX_VALUE = 2**63 - 1


class RlimitError(ValueError):
    """A limit name or value that is not one; ``str()`` is Slurm's message."""


def parse_names(text: str) -> frozenset[str]:
    """The limits a list names: ``ALL``, ``NONE`` or names separated by commas or blanks.
    Raises ``RlimitError("Bad rlimit name: X")``."""
    chosen: set[str] = set()
    for raw in text.replace(",", " ").replace("\t", " ").replace("\n", " ").split(" "):
        word = raw.strip().upper()
        if not word:
            continue
        if word == "ALL":
            chosen.update(NAMES)
            continue
        if word == "NONE":
            continue
        if word.startswith("RLIMIT_"):
            word = word[len("RLIMIT_") :]
        if word not in NAMES:
            raise RlimitError(f"Bad rlimit name: {raw.strip()}")
        chosen.add(word)
    return frozenset(chosen)


def propagated(only: str | None = None, excluded: str | None = None, option: str | None = None) -> frozenset[str]:
    """The limits that propagate: ``option`` (``--propagate``'s value; ``""`` for a bare
    ``--propagate``) when given, else ``only`` (PropagateResourceLimits), else all but
    ``excluded`` (PropagateResourceLimitsExcept). Raises ``RlimitError``."""
    if option is not None:
        return parse_names(option or "ALL")
    if only is not None and only.strip():
        return parse_names(only)
    if excluded is not None and excluded.strip():
        return frozenset(NAMES) - parse_names(excluded)
    return frozenset(NAMES)


def check(limits: object) -> dict[str, int]:
    """A job's ``rlimits`` as received: a mapping of known names to -1 (unlimited) or a
    non-negative integer. Raises ``RlimitError`` naming what is wrong."""
    if not isinstance(limits, dict):
        raise RlimitError("rlimits: expected an object of limit names and values")
    out: dict[str, int] = {}
    for name, value in limits.items():
        key = str(name).upper()
        if key not in NAMES:
            raise RlimitError(f"Bad rlimit name: {name}")
        if isinstance(value, bool) or not isinstance(value, int) or not UNLIMITED <= value <= MAX_VALUE:
            raise RlimitError(f"Bad rlimit value for {key}: {value!r} (expected -1 for unlimited, or 0..2^63-1)")
        out[key] = value
    return out


# Jobs submitted from the same shell carry equal limits: a queue of hundreds of thousands
# of jobs keeps one dict per distinct set instead of one per job (~270 B a job, measured).
_SHARED: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
_SHARED_MAX = 4096


def shared(limits: dict[str, int]) -> dict[str, int]:
    """One dict for equal limits (never mutate what it returns); a new set is kept while
    fewer than ``_SHARED_MAX`` are."""
    key = tuple(sorted(limits.items()))
    found = _SHARED.get(key)
    if found is not None:
        return found
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[key] = limits
    return limits
