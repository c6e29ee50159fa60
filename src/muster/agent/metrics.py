"""``/metrics`` on a node agent: its GPUs' health and use, in Prometheus's text format.

Served over TCP without a credential when ``MetricsType=metrics/openmetrics`` (as the
controller's, docs/metrics.md); it names the node, its GPUs and the jobs' counts, nothing
of a job's content. Read at scrape time:

* the inventory (``agent.gpus``: NVML, nvidia-smi or emulated) and its source;
* each GPU's health from the last periodic check (``agent.gpuhealth``): 1 healthy, 0 with
  a fault (``muster_agent_gpu_fault{cause=}``);
* which GPUs the jobs running here hold (from the jobs' allocations);
* utilisation and memory in use from NVML when it is present (``pynvml``); otherwise
  emulated: a GPU held by a job counts as busy (1.0), a free one as idle (0.0), no memory
  figure. ``muster_agent_gpu_source`` says which.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

__all__ = ["AgentCollector", "held_gpus"]

log = logging.getLogger("musterd.metrics")


def held_gpus(jobs: Any, node: str) -> set[int]:
    """The GPU indices that the jobs running here (``Supervisor.jobs``) were given."""
    held: set[int] = set()
    for t in jobs.values():
        for a in t.job.get("alloc") or []:
            if a.get("node") == node:
                held.update(int(i) for i in a.get("gpu_ids") or [])
    return held


class AgentCollector:
    """``daemon``: the ``AgentDaemon`` (its node, inventory, GPU faults and supervisor)."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self._nvml: Any = None

    def render(self) -> bytes:
        return generate_latest(self)  # type: ignore[arg-type]

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        node = d.node.name
        inv = d.inventory
        faults = {f.index: f.cause for f in d._gpu_faults}
        held = held_gpus(d.supervisor.jobs, node)
        use = self._nvml_use(inv) if inv.source == "nvml" else {}
        source = GaugeMetricFamily(
            "muster_agent_gpu_source",
            "1 for where the inventory comes from (nvml, nvidia-smi, emulated) and the use figures (nvml, emulated)",
            labels=["node", "inventory", "use"],
        )
        source.add_metric([node, inv.source, "nvml" if use else "emulated"], 1)
        yield source
        yield _one("muster_agent_gpus", "GPUs the node has", node, inv.count)
        yield _one("muster_agent_gpus_alloc", "GPUs held by the jobs running on the node", node, len(held))
        yield _one("muster_agent_gpus_faulty", "GPUs with a fault at the last check", node, len(faults))
        yield _one("muster_agent_jobs_running", "Jobs running on the node", node, len(d.supervisor.jobs))
        labels = ["node", "gpu", "name", "uuid"]
        info = GaugeMetricFamily("muster_agent_gpu_info", "1 per GPU, with its name and UUID", labels=labels)
        healthy = GaugeMetricFamily(
            "muster_agent_gpu_healthy", "1 when the GPU passed its last check", labels=["node", "gpu"]
        )
        fault = GaugeMetricFamily(
            "muster_agent_gpu_fault", "1 for the GPU's fault, by cause", labels=["node", "gpu", "cause"]
        )
        alloc = GaugeMetricFamily("muster_agent_gpu_alloc", "1 when a job holds the GPU", labels=["node", "gpu"])
        util = GaugeMetricFamily(
            "muster_agent_gpu_utilization_ratio",
            "GPU busy share, 0 to 1 (NVML; else 1 if held)",
            labels=["node", "gpu"],
        )
        mem = GaugeMetricFamily(
            "muster_agent_gpu_memory_used_bytes", "GPU memory in use (NVML only)", labels=["node", "gpu"]
        )
        for g in inv.gpus:
            idx = str(g.index)
            info.add_metric([node, idx, g.name, g.uuid], 1)
            healthy.add_metric([node, idx], 0 if g.index in faults else 1)
            if g.index in faults:
                fault.add_metric([node, idx, faults[g.index]], 1)
            alloc.add_metric([node, idx], 1 if g.index in held else 0)
            if g.index in use:
                ratio, used = use[g.index]
                util.add_metric([node, idx], ratio)
                mem.add_metric([node, idx], used)
            else:
                util.add_metric([node, idx], 1.0 if g.index in held else 0.0)
        yield from (info, healthy, fault, alloc, util, mem)

    def _nvml_use(self, inv: Any) -> dict[int, tuple[float, int]]:
        """Utilisation and memory in use per GPU from NVML; {} when NVML cannot answer."""
        try:
            if self._nvml is None:
                import pynvml  # type: ignore[import-not-found]

                pynvml.nvmlInit()
                self._nvml = pynvml
            nv = self._nvml
            out = {}
            for g in inv.gpus:
                h = nv.nvmlDeviceGetHandleByIndex(g.index)
                rates = nv.nvmlDeviceGetUtilizationRates(h)
                memory = nv.nvmlDeviceGetMemoryInfo(h)
                out[g.index] = (float(rates.gpu) / 100.0, int(memory.used))
            return out
        except Exception as exc:  # no NVML, a lost GPU: the emulated figures stand in
            log.debug("NVML use not available: %s", exc)
            return {}


def _one(name: str, doc: str, node: str, value: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=["node"])
    fam.add_metric([node], value)
    return fam
