"""TRES as accounting counts them: ``cpu``, ``mem`` (MB), ``node``, ``billing``, ``gres/gpu``.

A job's TRES are counted from its allocation once it has started (``alloc_tres``) and from
its request before (``req_tres``). Text forms follow sacct and sacctmgr: names sorted
alphabetically (``billing=2,cpu=2,gres/gpu=4,mem=2000M,node=2``), memory with a unit.

Billing follows Slurm: with a partition's ``TRESBillingWeights`` the billing value is the
weighted sum of the job's TRES (the largest weighted TRES with ``PriorityFlags=MAX_TRES``);
without weights it is the CPU count. Fair-share charges ``usage_weights``: the partition's
weights when set, else ``DEFAULT_USAGE_WEIGHTS``, under which GPUs dominate (one GPU costs
as much as 64 CPUs), so that on a GPU cluster usage is essentially GPU time.
"""

from __future__ import annotations

from typing import Any

from muster.core.memtext import format_mem
from muster.core.resources import parse_mem_mb

TRES_NAMES = ("billing", "cpu", "gres/gpu", "mem", "node")
_ALIASES = {
    "gpu": "gres/gpu",
    "gres/gpu": "gres/gpu",
    "cpu": "cpu",
    "mem": "mem",
    "node": "node",
    "billing": "billing",
    "nodes": "node",
    "cpus": "cpu",
}

# Fair-share charge per second and per unit when no TRESBillingWeights are set.
DEFAULT_USAGE_WEIGHTS: dict[str, float] = {"cpu": 1.0, "gres/gpu": 64.0}


class TresError(ValueError):
    pass


def tres_name(text: str) -> str:
    key = text.strip().lower()
    if key.startswith("gres/gpu:"):  # gres/gpu:a100 counts as gres/gpu
        key = "gres/gpu"
    name = _ALIASES.get(key)
    if name is None:
        raise TresError(f"Invalid TRES name: {text}")
    return name


def parse_tres(text: str) -> dict[str, int]:
    """``gres/gpu=8,cpu=64,mem=100G`` -> counts; ``-1`` clears an entry (value -1 kept so
    that a modification can remove it). Raises TresError naming the bad item."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise TresError(f"Invalid TRES specification: {item}")
        key = tres_name(name)
        value = value.strip()
        if value == "-1":
            out[key] = -1
            continue
        try:
            out[key] = parse_mem_mb(value) if key == "mem" else int(value)
        except ValueError:
            raise TresError(f"Invalid TRES value: {item}") from None
        if out[key] < 0:
            raise TresError(f"Invalid TRES value: {item}")
    return out


def format_tres(counts: dict[str, Any]) -> str:
    """Alphabetical ``name=value`` list; memory with a unit; zero GPUs left out."""
    parts = []
    for name in sorted(counts):
        value = counts[name]
        if value is None or (name == "gres/gpu" and not value):
            continue
        if name == "mem":
            parts.append(f"mem={format_mem(int(value))}")
        else:
            parts.append(f"{name}={int(value)}")
    return ",".join(parts)


def parse_billing_weights(text: str | None) -> dict[str, float]:
    """``CPU=1.0,Mem=0.25G,GRES/gpu=2.0`` -> weight per unit (memory per MB)."""
    weights: dict[str, float] = {}
    if not text:
        return weights
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        key = tres_name(name)
        value = value.strip()
        unit = value[-1:].upper()
        scale = 1.0
        if key == "mem" and unit in ("K", "M", "G", "T"):
            value = value[:-1]
            # A weight "per G" means per 1024 MB.
            scale = {"K": 1024.0, "M": 1.0, "G": 1 / 1024, "T": 1 / (1024 * 1024)}[unit]
        elif key == "mem":
            scale = 1 / 1024  # Slurm: a bare memory weight is per GB
        try:
            weights[key] = float(value) * scale
        except ValueError:
            raise TresError(f"Invalid TRESBillingWeights item: {item}") from None
    return weights


def billing(counts: dict[str, int], weights: dict[str, float], max_tres: bool = False) -> float:
    if not weights:
        return float(counts.get("cpu", 0))
    terms = [counts.get(name, 0) * w for name, w in weights.items() if name != "billing"]
    if not terms:
        return 0.0
    return max(terms) if max_tres else sum(terms)


def alloc_tres(job: dict[str, Any]) -> dict[str, int]:
    """What a started job holds (from its ``alloc``); empty when it never started."""
    alloc = job.get("alloc") or []
    if not alloc:
        return {}
    return {
        "cpu": sum(int(a.get("cpus", 0)) for a in alloc),
        "mem": sum(int(a.get("mem", 0)) for a in alloc),
        "node": len(alloc),
        "gres/gpu": sum(len(a.get("gpu_ids") or []) for a in alloc),
    }


def req_tres(job: dict[str, Any]) -> dict[str, int]:
    """What a job asks for (from its ``shape``)."""
    shape = job.get("shape") or {}
    nodes = int(shape.get("nodes", 1))
    return {
        "cpu": nodes * int(shape.get("cpus_per_node", 1)),
        "mem": nodes * int(shape.get("mem_per_node", 0)),
        "node": nodes,
        "gres/gpu": nodes * int(shape.get("gpus_per_node", 0)),
    }


def job_tres(job: dict[str, Any]) -> dict[str, int]:
    """Allocated TRES when the job started, else requested ones."""
    return alloc_tres(job) or req_tres(job)
