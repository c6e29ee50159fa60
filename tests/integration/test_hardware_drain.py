"""A node configured larger than its machine, with agents that detect the hardware for real
(``musterd --gpu-detect nvidia``, as deploy.md's unit runs it): the controller drains it at
registration with Slurm's reason; a node that fits is accepted. (Agents that emulate their
nodes, ``muster up``'s default, are taken at their word: every other integration test.)"""

from __future__ import annotations

import re

import pytest

from harness import Harness
from muster import __version__
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

HUGE = 10**9  # MiB: a petabyte of RAM, which no test machine has


def test_a_node_with_less_memory_than_configured_is_drained_low_realmemory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_GPU_DETECT", "nvidia")  # the agents' mode (muster up passes the environment on)
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=1, mem_per_node=1))
    try:
        h.cluster.create(h.shape, h.settings)
        with open(h.cluster.conf_path) as f:
            text = f.read()
        with open(h.cluster.conf_path, "w") as f:
            f.write(re.sub(r"(NodeName=node1 .*)RealMemory=1\b", rf"\1RealMemory={HUGE}", text))
        h.up()  # both register
        show = h.run(["scontrol", "show", "node", "node1"]).stdout
        reason = re.search(r"Reason=(.*) \[root@", show)
        assert reason and reason.group(1).startswith("Low RealMemory (reported:"), show
        reported = int(reason.group(1).split("reported:")[1].split()[0])
        assert 0 < reported < HUGE and reason.group(1).endswith(f"configured:{HUGE})")
        assert "State=IDLE+DRAIN " in show and f" Version={__version__}\n" in show
        assert "Low RealMemory" in h.run(["sinfo", "-R", "-h", "-o", "%n %E"]).stdout
        versions = h.run(["sinfo", "-h", "-N", "-o", "%N %v"]).stdout.splitlines()
        assert versions == [f"node1 {__version__}", f"node2 {__version__}"]  # sinfo %v: each agent's
        # the node that fits the machine is in service, and jobs go there only
        fits = h.run(["scontrol", "show", "node", "node2"]).stdout
        assert "State=IDLE " in fits and "Reason=" not in fits, fits
        job = h.sbatch("-N1", "--wrap", "hostname")
        done = h.wait_job(job)
        assert (done["state"], done["batch_host"]) == ("COMPLETED", "node2")
    finally:
        h.down()
