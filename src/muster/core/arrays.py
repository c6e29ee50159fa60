"""Job arrays: ``--array`` specifications, task-id ranges and ``A_i`` job-id expressions.

A job array is submitted once and becomes one job per task. muster numbers the tasks
with consecutive job ids from the array's first id, so the array job id (``%A``,
``SLURM_ARRAY_JOB_ID``) is the job id of its first task, as in Slurm, and every task has a
job id of its own (``%j``, ``SLURM_JOB_ID``).

* ``parse_array("0-15:4%2", max_size)`` -> ``ArraySpec(indices=(0, 4, 8, 12), throttle=2)``;
  raises ``ValueError`` ("Invalid job array specification") for bad syntax or an index at
  or above ``MaxArraySize`` (Slurm's rule: every index must be below it).
* ``format_ranges([0, 1, 2, 5])`` -> ``"0-2,5"``: how squeue and scontrol print a set of
  task ids.
* ``parse_job_ref("123_[1-3]")`` -> ``JobRef(123, (1, 2, 3))``: a job id as users write it
  (``123``, ``123_7``, ``123_[1-3,5]``); ``tasks`` is None for a plain id.

Pure and dependency-free: the commands import it too, so it avoids ``dataclasses`` (whose
import alone costs a command ~15 ms).
"""

# No ``from __future__ import annotations``: squeue -j and scancel import this module, and
# ``__future__`` would cost them ~0.1 ms; the one name only a type checker reads is quoted.

TYPE_CHECKING = False  # typing and collections.abc cost a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Iterable


__all__ = [
    "ARRAY_ERROR",
    "MAX_ID",
    "ArraySpec",
    "JobRef",
    "format_ranges",
    "parse_array",
    "parse_job_ref",
    "parse_job_step_ref",
    "parse_ranges",
]

ARRAY_ERROR = "Invalid job array specification"
MAX_THROTTLE = 2**31 - 1  # a ``%N`` throttle is a 32-bit count


class ArraySpec:
    __slots__ = ("indices", "throttle")

    def __init__(self, indices: tuple[int, ...], throttle: int = 0) -> None:
        self.indices = indices  # sorted, distinct
        self.throttle = throttle  # at most this many tasks run at once; 0: no limit

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArraySpec):
            return NotImplemented
        return (self.indices, self.throttle) == (other.indices, other.throttle)

    def __hash__(self) -> int:
        return hash((self.indices, self.throttle))

    def __repr__(self) -> str:
        return f"ArraySpec({format_ranges(self.indices)!r}, throttle={self.throttle})"

    @property
    def step(self) -> int:
        """SLURM_ARRAY_TASK_STEP: the common difference of the indices when there is one,
        else 1."""
        if len(self.indices) < 2:
            return 1
        diffs = {b - a for a, b in zip(self.indices, self.indices[1:], strict=False)}
        return diffs.pop() if len(diffs) == 1 else 1


def parse_ranges(text: str, limit: int | None = None) -> tuple[int, ...]:
    """``1,3,5-7`` or ``0-15:4`` -> sorted distinct indices; ValueError when malformed or
    when an index reaches ``limit``."""
    out: set[int] = set()
    if not text.strip():
        raise ValueError(ARRAY_ERROR)
    for part in text.split(","):
        part = part.strip()
        rng, colon, step_text = part.partition(":")
        lo_text, dash, hi_text = rng.partition("-")
        if not lo_text.isdigit() or (dash and not hi_text.isdigit()):
            raise ValueError(ARRAY_ERROR)
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        step = 1
        if colon:
            if not dash or not step_text.isdigit() or int(step_text) <= 0:
                raise ValueError(ARRAY_ERROR)
            step = int(step_text)
        if hi < lo or (limit is not None and hi >= limit):
            raise ValueError(ARRAY_ERROR)
        out.update(range(lo, hi + 1, step))
    return tuple(sorted(out))


def parse_array(text: str, max_size: int) -> ArraySpec:
    """``--array`` as sbatch passes it: ranges, then an optional ``%N`` throttle."""
    body, pct, limit_text = text.strip().partition("%")
    throttle = 0
    if pct:
        # ``%N``: at most N tasks at once, N at least 1: ``%0`` (which would never run a
        # task) is refused with the array error; ``scontrol update ArrayTaskThrottle=0``
        # is what lifts a limit.
        if not limit_text.isdigit() or not 0 < int(limit_text) <= MAX_THROTTLE:
            raise ValueError(ARRAY_ERROR)
        throttle = int(limit_text)
    indices = parse_ranges(body, max_size)
    return ArraySpec(indices, throttle)


def format_ranges(ids: "Iterable[int]") -> str:
    """Sorted task ids as Slurm prints them: runs of consecutive ids as ``lo-hi``."""
    values = sorted(set(ids))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


class JobRef:
    """A job id as a user writes it: ``job_id`` alone, array tasks of ``job_id``, or
    component ``offset`` of the heterogeneous job ``job_id`` (``123+1``)."""

    __slots__ = ("job_id", "tasks", "offset")

    def __init__(self, job_id: int, tasks: tuple[int, ...] | None = None, offset: int | None = None) -> None:
        self.job_id = job_id
        self.tasks = tasks
        self.offset = offset

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobRef):
            return NotImplemented
        return (self.job_id, self.tasks, self.offset) == (other.job_id, other.tasks, other.offset)

    def __hash__(self) -> int:
        return hash((self.job_id, self.tasks, self.offset))

    def __repr__(self) -> str:
        return f"JobRef({self})"

    def matches(self, job_id: object, array_job_id: object, array_task_id: object, het_job_id: object = None) -> bool:
        """Whether a job (given by its ids, as the wire carries them) is one this names."""
        if self.offset is not None:
            return isinstance(job_id, int) and job_id == self.job_id + self.offset and het_job_id in (None, self.job_id)
        if self.tasks is None:
            return job_id == self.job_id or array_job_id == self.job_id or het_job_id == self.job_id
        return array_job_id == self.job_id and array_task_id in self.tasks

    def __str__(self) -> str:
        if self.offset is not None:
            return f"{self.job_id}+{self.offset}"
        if self.tasks is None:
            return str(self.job_id)
        if len(self.tasks) == 1:
            return f"{self.job_id}_{self.tasks[0]}"
        return f"{self.job_id}_[{format_ranges(self.tasks)}]"


MAX_ID = 0xFFFFFFFE  # job and step ids are 32-bit in Slurm (0xFFFFFFFF means "none")
STEP_NAMES = frozenset({"batch", "extern", "interactive"})


def parse_job_ref(text: str) -> JobRef:
    """``123``, ``123_7``, ``123_[1-3,5]`` (a ``%N`` inside the brackets is ignored) or a
    heterogeneous job's component ``123+1``; ValueError otherwise."""
    item = text.strip()
    head, plus, tail = item.partition("+")
    if plus:
        if not head.isdigit() or not 0 < int(head) <= MAX_ID or not tail.isdigit() or int(tail) > MAX_ID:
            raise ValueError(f"Invalid job id {text}")
        return JobRef(int(head), None, int(tail))
    head, underscore, tail = item.partition("_")
    if not head.isdigit() or not 0 < int(head) <= MAX_ID:
        raise ValueError(f"Invalid job id {text}")
    if not underscore:
        return JobRef(int(head))
    if tail.startswith("[") and tail.endswith("]"):
        inner = tail[1:-1].partition("%")[0]
        try:
            return JobRef(int(head), parse_ranges(inner))
        except ValueError:
            raise ValueError(f"Invalid job id {text}") from None
    if tail.isdigit() and int(tail) <= MAX_ID:
        return JobRef(int(head), (int(tail),))
    raise ValueError(f"Invalid job id {text}")


def parse_job_step_ref(text: str) -> tuple[JobRef, str | None]:
    """A job reference with an optional step: ``123``, ``123.4``, ``123_7.batch``,
    ``123.extern``; ValueError for anything else (``1.``, ``1_``, a step id over 32 bits)."""
    job, dot, step = text.strip().partition(".")
    ref = parse_job_ref(job)
    if not dot:
        return ref, None
    if step in STEP_NAMES or (step.isdigit() and int(step) <= MAX_ID):
        return ref, step
    raise ValueError(f"Invalid job id {text}")
