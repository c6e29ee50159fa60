"""GPU binding: ``--gpu-bind`` parsed, and which of a node's step GPUs each task sees.

Pure: the controller (``core.steps.plan_step``) computes every task's GPUs with
``task_gpus``; ``srun`` validates the option with the same parser and, with ``verbose,``,
prints each task's binding (``verbose_line``).

The default is Slurm's: every task of a step sees all of the step's GPUs on its node
(``CUDA_VISIBLE_DEVICES=0,1`` for both tasks of a 2-task step on a 2-GPU node), unless
``--gpus-per-task=N`` is given, which binds as ``per_task:N``. ``--gpu-bind`` takes
Slurm's forms, optionally after ``verbose,``:

* ``none``: no binding, every task sees all of the step's GPUs on its node (also with
  ``--gpus-per-task``);
* ``closest``: the GPUs closest to the task's CPUs. muster knows no GPU-to-socket
  affinity (as Slurm when gres.conf gives no ``Cores=``), so all of them are equally
  close and every task sees all of the step's GPUs on its node;
* ``single:<tasks_per_gpu>``: one GPU per task, in blocks: the first ``tasks_per_gpu``
  local tasks get the first GPU, the next ones the second, and so on (round again when
  there are more tasks than GPUs allow);
* ``per_task:<gpus_per_task>``: local task *i* gets GPUs *i·n* to *i·n+n-1* of the node's
  step GPUs (taken round again when there are too few);
* ``map_gpu:<list>``: local task *i* gets the *i*-th id of the list (decimal, ``ID*k``
  repeats it k times, the list is reused when there are more tasks than entries);
* ``mask_gpu:<list>``: local task *i* gets the GPUs of the *i*-th hexadecimal mask (``0x``
  optional, ``MASK*k`` repeats).

The ids of ``map_gpu`` and the bits of ``mask_gpu`` count the step's GPUs on the node from
0 (Slurm's rule under ``ConstrainDevices``): ``map_gpu:1`` is the node's second step GPU,
whatever its physical index. ``CUDA_VISIBLE_DEVICES`` itself names physical indices (see
``agent.taskenv``). An id or bit past the step's GPUs on a node refuses the step.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuBind", "GpuBindError", "parse_gpu_bind", "task_gpus", "verbose_line"]

MAX_ITEMS = 4096  # a map/mask list, repeats expanded
MAX_GPU = 1023


class GpuBindError(ValueError):
    """A ``--gpu-bind`` value that is not one of Slurm's forms; ``str()`` is srun's error."""


@dataclass(frozen=True, slots=True)
class GpuBind:
    """``kind``: ``auto`` (not given), ``none``, ``closest``, ``single`` and ``per_task``
    (``count``), ``map`` and ``mask`` (``lists``: per local task, step-relative indices)."""

    kind: str = "auto"
    count: int = 0
    lists: tuple[tuple[int, ...], ...] = ()
    verbose: bool = False


def _error(text: str) -> GpuBindError:
    return GpuBindError(f"Invalid --gpu-bind argument: {text}")


def _positive(text: str, whole: str) -> int:
    if not text.isdigit() or int(text) < 1 or int(text) > MAX_ITEMS:
        raise _error(whole)
    return int(text)


def _items(body: str, whole: str, one: object) -> tuple[tuple[int, ...], ...]:
    out: list[tuple[int, ...]] = []
    for item in body.split(","):
        word, star, times = item.strip().partition("*")
        reps = _positive(times, whole) if star else 1
        value = one(word, whole)  # type: ignore[operator]
        out.extend([value] * reps)
        if len(out) > MAX_ITEMS:
            raise _error(whole)
    if not out:
        raise _error(whole)
    return tuple(out)


def _map_id(word: str, whole: str) -> tuple[int, ...]:
    if not word.isdigit() or int(word) > MAX_GPU:
        raise _error(whole)
    return (int(word),)


def _mask(word: str, whole: str) -> tuple[int, ...]:
    digits = word[2:] if word.lower().startswith("0x") else word
    try:
        mask = int(digits, 16) if digits and digits.isalnum() else 0
    except ValueError:
        mask = 0
    if mask <= 0 or mask.bit_length() > MAX_GPU + 1:
        raise _error(whole)
    return tuple(b for b in range(mask.bit_length()) if mask >> b & 1)


def parse_gpu_bind(text: str | None) -> GpuBind:
    """``--gpu-bind``'s value (None or empty: not given). Raises ``GpuBindError``."""
    if text is None or not text.strip():
        return GpuBind()
    whole = text
    rest = text.strip()
    verbose = False
    head, comma, tail = rest.partition(",")
    if head.strip().lower() == "verbose":
        verbose, rest = True, tail.strip() if comma else ""
        if not rest:  # "verbose" alone: report, bind as by default
            return GpuBind(verbose=True)
    kind, colon, value = rest.partition(":")
    kind = kind.strip().lower()
    if kind in ("none", "closest") and not colon:
        return GpuBind(kind=kind, verbose=verbose)
    if kind in ("single", "per_task") and colon:
        return GpuBind(kind=kind, count=_positive(value.strip(), whole), verbose=verbose)
    if kind == "map_gpu" and colon:
        return GpuBind(kind="map", lists=_items(value, whole, _map_id), verbose=verbose)
    if kind == "mask_gpu" and colon:
        return GpuBind(kind="mask", lists=_items(value, whole, _mask), verbose=verbose)
    raise _error(whole)


def _legacy(text: str | None) -> GpuBind:
    """A stored or older srun's value, which kept only the word before ``:`` (muster before
    Slurm's forms): ``none`` as it was, anything else each task its own share."""
    word = (text or "").split(":")[0].split(",")[-1].strip().lower()
    return GpuBind(kind="none") if word == "none" else GpuBind(kind="split")


def task_gpus(text: str | None, gpus: list[int], ntasks: int, gpus_per_task: int | None = None) -> list[list[int]]:
    """The GPUs (physical indices, from ``gpus``: the step's on the node, sorted) each of the
    node's ``ntasks`` local tasks sees. Raises ``GpuBindError`` when a ``map_gpu`` id or a
    ``mask_gpu`` bit names no GPU of the step on the node."""
    try:
        bind = parse_gpu_bind(text)
    except GpuBindError:
        bind = _legacy(text)
    if not gpus:
        return [[] for _ in range(ntasks)]
    kind = bind.kind
    count = bind.count
    if kind == "auto" and gpus_per_task:
        kind, count = "per_task", gpus_per_task
    n = len(gpus)
    if kind == "single":
        return [[gpus[(i // count) % n]] for i in range(ntasks)]
    if kind == "per_task":
        g = min(count, n)
        return [[gpus[(i * g + j) % n] for j in range(g)] for i in range(ntasks)]
    if kind in ("map", "mask"):
        out = []
        for i in range(ntasks):
            picked = bind.lists[i % len(bind.lists)]
            if max(picked) >= n:
                word = "map_gpu" if kind == "map" else "mask_gpu"
                raise GpuBindError(f"--gpu-bind={word} names GPU {max(picked)} of a node with {n} GPUs in the step")
            out.append([gpus[k] for k in sorted(set(picked))])
        return out
    if kind == "split" and gpus_per_task:
        return [gpus[i * gpus_per_task : (i + 1) * gpus_per_task] for i in range(ntasks)]
    if kind == "split" and ntasks > 1 and n % ntasks == 0:
        g = n // ntasks
        return [gpus[i * g : (i + 1) * g] for i in range(ntasks)]
    return [list(gpus) for _ in range(ntasks)]  # auto, none, closest


def _mask_hex(ids: list[int]) -> str:
    return hex(sum(1 << i for i in ids))


def verbose_line(node_gpus: list[int], mine: list[int], local: int) -> str:
    """The line a task's binding is reported with under ``verbose,`` (Slurm's fields:
    the task's GPUs and the step's as masks of physical indices, its local index, and its
    GPUs as physical indices and as the task numbers them)."""
    visible = ",".join(str(g) for g in mine)
    return (
        f"gpu-bind: usable_gres={_mask_hex(mine)}; bit_alloc={_mask_hex(node_gpus)}; "
        f"local_inx={local}; global_list={visible}; local_list={visible}"
    )
