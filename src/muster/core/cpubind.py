"""CPU binding: ``--cpu-bind`` parsed, and which CPUs a job and its tasks are pinned to.

Pure: the agent (``agent.affinity``) owns the ledger of the host's CPUs and applies the sets
with ``sched_setaffinity``; ``srun`` validates the option with the same parser.

``--cpu-bind`` takes a comma-separated list (Slurm's spelling):

* ``verbose``/``v`` and ``quiet``/``q``: each task reports its binding on stderr, or not;
* ``none``/``no``: tasks are not bound (they may use every CPU of the job on the node);
* ``cores``, ``threads``, ``rank``: each task is bound to CPUs of its own, ``--cpus-per-task``
  of them, taken in order from the job's CPUs on the node (muster does not read the socket
  and hyper-thread topology, so these three bind alike);
* ``sockets``, ``ldoms``, ``boards``: every task is bound to all of the job's CPUs on the node;
* ``map_cpu:<list>``: local task *i* to the *i*-th CPU id of the list (``N*k`` repeats N k
  times; the list is reused when there are more tasks than entries);
* ``mask_cpu:<list>``: local task *i* to the *i*-th hexadecimal mask (``0x`` optional).

A ``map_cpu``/``mask_cpu`` list runs to the end of the option, so it comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "CpuBind",
    "CpuBindError",
    "mask_text",
    "parse_cpu_bind",
    "pick_least_used",
    "task_cpu_sets",
]

_OWN = {"cores", "threads", "rank"}
_WHOLE = {"sockets", "ldoms", "boards"}
MAX_CPU = 4095


class CpuBindError(ValueError):
    """A ``--cpu-bind`` value muster cannot use; ``str()`` names the bad part."""


@dataclass(frozen=True, slots=True)
class CpuBind:
    """``kind``: ``auto`` (not given), ``none``, ``task`` (each task its own CPUs),
    ``job`` (all of the job's CPUs), ``map`` or ``mask`` (``lists`` per local task)."""

    kind: str = "auto"
    lists: tuple[tuple[int, ...], ...] = ()
    verbose: bool = False

    @property
    def given(self) -> bool:
        return self.kind != "auto"


def parse_cpu_bind(text: str | None) -> CpuBind:
    """``--cpu-bind``'s value. Raises ``CpuBindError`` naming what is wrong."""
    if text is None or not text.strip():
        return CpuBind()
    kind = "auto"
    verbose = False
    lists: tuple[tuple[int, ...], ...] = ()
    rest = text.strip()
    while rest:
        token, _, rest = rest.partition(",")
        word = token.strip().lower()
        if word.startswith(("map_cpu:", "mask_cpu:")):
            name, _, first = token.partition(":")
            items = [first, *rest.split(",")] if rest else [first]
            rest = ""
            if name.lower() == "map_cpu":
                kind, lists = "map", tuple((cpu,) for cpu in _cpu_ids(items, text))
            else:
                kind, lists = "mask", tuple(_mask(item, text) for item in items)
        elif word in ("verbose", "v"):
            verbose = True
        elif word in ("quiet", "q"):
            verbose = False
        elif word in ("none", "no"):
            kind = "none"
        elif word in _OWN:
            kind = "task"
        elif word in _WHOLE:
            kind = "job"
        elif word.startswith(("map_ldom", "mask_ldom")):
            raise CpuBindError(f"--cpu-bind={word.split(':')[0]} is not supported by muster")
        else:
            raise CpuBindError(f'unrecognized --cpu-bind argument "{token.strip()}"')
    return CpuBind(kind, lists, verbose)


def _cpu_ids(items: list[str], text: str) -> list[int]:
    out: list[int] = []
    for item in items:
        value, star, count = item.strip().partition("*")
        try:
            cpu = int(value, 0) if value.lower().startswith("0x") else int(value)
            times = int(count) if star else 1
        except ValueError:
            raise CpuBindError(f'bad CPU id "{item.strip()}" in --cpu-bind={text}') from None
        if not 0 <= cpu <= MAX_CPU or times < 1:
            raise CpuBindError(f'bad CPU id "{item.strip()}" in --cpu-bind={text}')
        out.extend([cpu] * times)
    if not out:
        raise CpuBindError(f"no CPU ids in --cpu-bind={text}")
    return out


def _mask(item: str, text: str) -> tuple[int, ...]:
    raw = item.strip()
    digits = raw[2:] if raw.lower().startswith("0x") else raw
    try:
        value = int(digits, 16)
    except ValueError:
        raise CpuBindError(f'bad CPU mask "{raw}" in --cpu-bind={text}') from None
    cpus = tuple(i for i in range(min(value.bit_length(), MAX_CPU + 1)) if value >> i & 1)
    if not cpus:
        raise CpuBindError(f'bad CPU mask "{raw}" in --cpu-bind={text}')
    return cpus


def mask_text(cpus: Sequence[int]) -> str:
    """``[0, 1]`` -> ``0x3``, as Slurm prints masks."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    return f"{value:#x}"


def pick_least_used(pool: Sequence[int], usage: Mapping[int, int], n: int) -> list[int]:
    """``n`` CPUs of ``pool`` (at most all of them), the least used first and, among equals,
    in pool order; returned sorted."""
    if n <= 0 or not pool:
        return []
    order = sorted(range(len(pool)), key=lambda i: (usage.get(pool[i], 0), i))
    return sorted(pool[i] for i in order[: min(n, len(pool))])


def task_cpu_sets(
    bind: CpuBind,
    job_cpus: Sequence[int],
    per_task: Sequence[int],
    usage: dict[int, int],
    default: str = "none",
) -> list[tuple[int, ...]] | None:
    """The CPUs of each local task, or None when the tasks are not bound.

    ``job_cpus`` are the job's CPUs on the node, ``per_task`` how many CPUs each local task
    was given, ``usage`` how many tasks of the job's other steps already hold each CPU (it
    is updated). ``default`` is what an absent ``--cpu-bind`` means (``task`` under
    ``TaskPlugin=task/affinity``, else ``none``). ``map``/``mask`` CPUs outside the job's set
    are dropped; a task left with none gets the whole set.
    """
    kind = bind.kind if bind.given else default
    if kind == "none" or not job_cpus:
        return None
    allowed = set(job_cpus)
    out: list[tuple[int, ...]] = []
    for local, n in enumerate(per_task):
        if kind == "job":
            cpus = tuple(sorted(allowed))
        elif kind in ("map", "mask"):
            chosen = [c for c in bind.lists[local % len(bind.lists)] if c in allowed]
            cpus = tuple(chosen) if chosen else tuple(sorted(allowed))
        else:
            cpus = tuple(pick_least_used(list(job_cpus), usage, max(1, n)))
        for c in cpus:
            usage[c] = usage.get(c, 0) + 1
        out.append(cpus)
    return out
