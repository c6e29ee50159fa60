"""The pre-flight gate's all-reduce (``agent.allreduce``, ``agent.preflight``): two nodes' gates
run their ranks in real child processes with torch.distributed gloo on this host and pass;
a rank the fault hook makes exit fails by itself (its node blamed) while its peer fails
waiting on it (``peer``)."""

from __future__ import annotations

import asyncio
import os
import pathlib

import pytest

from muster.agent.allreduce import FAIL_ENV, port_for, run_allreduce
from muster.agent.preflight import Preflight
from muster.core.config import parse_config

pytest.importorskip("torch.distributed")

CONF = """
ClusterName=t
PreflightMinFreeMB=1
PreflightAllReduceTimeout=120
NodeName=node1 NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000
NodeName=node2 NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000
PartitionName=p Nodes=ALL Default=YES PreflightAllReduce=YES
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_rank_that_exits_is_blamed_and_its_peer_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAIL_ENV, "b")
    port = _free_port()

    async def both() -> list[object]:
        return await asyncio.gather(
            run_allreduce("a", "127.0.0.1", port, 0, 2, 5.0), run_allreduce("b", "127.0.0.1", port, 1, 2, 5.0)
        )

    waiting, failed = asyncio.run(both())
    assert not failed.ok and not failed.peer and f"{FAIL_ENV} names b" in failed.reason  # type: ignore[attr-defined]
    assert not waiting.ok and waiting.peer, waiting  # type: ignore[attr-defined]


def test_the_gate_runs_its_rank_from_the_jobs_allocation(tmp_path: pathlib.Path) -> None:
    config = parse_config(CONF, "t.conf")
    gates = [Preflight.from_config(config, n) for n in ("node1", "node2")]
    assert gates[0].allreduce_timeout == 120 and gates[0].addrs["node1"] == "127.0.0.1"
    job = {
        "job_id": os.getpid() % 10000,
        "restart_count": 0,
        "spec": {},
        "alloc": [{"node": "node1"}, {"node": "node2"}],
    }

    async def both() -> list[object]:
        return await asyncio.gather(*(g.run(job, str(tmp_path), allreduce=True) for g in gates))

    verdicts = asyncio.run(both())
    assert all(v.ok for v in verdicts), verdicts  # type: ignore[attr-defined]
    assert 29500 <= port_for(int(job["job_id"]), 0) < 31500  # type: ignore[call-overload]
    # without ``allreduce`` (the batch host's launch) no rank runs: one node alone passes
    alone = asyncio.run(gates[0].run(job, str(tmp_path)))
    assert alone.ok
