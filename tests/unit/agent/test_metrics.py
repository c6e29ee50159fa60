"""An agent's /metrics: its GPUs' health and use, from NVML when present, else emulated."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from muster.agent.gpuhealth import GpuFault
from muster.agent.gpus import GpuInfo, GpuInventory, emulate
from muster.agent.metrics import AgentCollector


@dataclass
class _Node:
    name: str = "node1"


@dataclass
class _Tracked:
    job: dict[str, Any]


@dataclass
class _Supervisor:
    jobs: dict[int, _Tracked] = field(default_factory=dict)


@dataclass
class _Daemon:
    inventory: GpuInventory
    node: _Node = field(default_factory=_Node)
    supervisor: _Supervisor = field(default_factory=_Supervisor)
    _gpu_faults: set[GpuFault] = field(default_factory=set)


def samples(daemon: _Daemon) -> dict[tuple[str, str | None], float]:
    text = AgentCollector(daemon).render().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, s.labels.get("gpu"))] = s.value
    return out


def running_on(gpu_ids: list[int], node: str = "node1") -> _Supervisor:
    return _Supervisor(
        {7: _Tracked({"alloc": [{"node": node, "gpu_ids": gpu_ids}, {"node": "other", "gpu_ids": [3]}]})}
    )


def test_emulated_gpus_report_health_and_what_jobs_hold() -> None:
    d = _Daemon(emulate(4, "a100"), supervisor=running_on([0, 1]), _gpu_faults={GpuFault(2, "xid 79")})
    m = samples(d)
    assert m[("muster_agent_gpus", None)] == 4
    assert m[("muster_agent_gpus_alloc", None)] == 2
    assert m[("muster_agent_gpus_faulty", None)] == 1
    assert [m[("muster_agent_gpu_healthy", str(i))] for i in range(4)] == [1, 1, 0, 1]
    assert m[("muster_agent_gpu_fault", "2")] == 1
    assert [m[("muster_agent_gpu_utilization_ratio", str(i))] for i in range(4)] == [1.0, 1.0, 0.0, 0.0]
    assert ("muster_agent_gpu_memory_used_bytes", "0") not in m  # no figure is invented


def test_nvml_figures_are_used_when_nvml_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h)  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 2**30)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inv = GpuInventory([GpuInfo(0, "NVIDIA H200", "GPU-a"), GpuInfo(1, "NVIDIA H200", "GPU-b")], "nvml", "h200")
    m = samples(_Daemon(inv))
    assert m[("muster_agent_gpu_utilization_ratio", "1")] == pytest.approx(0.41)
    assert m[("muster_agent_gpu_memory_used_bytes", "0")] == 2**30


def test_an_nvml_error_falls_back_to_the_emulated_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("pynvml")

    def fail() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inv = GpuInventory([GpuInfo(0, "NVIDIA H200")], "nvml", "h200")
    text = AgentCollector(_Daemon(inv, supervisor=running_on([0]))).render().decode()
    assert 'muster_agent_gpu_source{inventory="nvml",node="node1",use="emulated"} 1.0' in text
    assert 'muster_agent_gpu_utilization_ratio{gpu="0",node="node1"} 1.0' in text
