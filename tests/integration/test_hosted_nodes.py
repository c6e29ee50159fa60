"""Several nodes hosted by one agent process (``muster up --nodes-per-agent``): each is
still its own node (its name, address, jobs and environment), and a dead agent process
takes exactly its own nodes down, as a rack losing power would."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


@pytest.fixture
def two_racks() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=8, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000, nodes_per_agent=4),
        settings={"SlurmdTimeout": "4", "KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_eight_nodes_in_two_agent_processes_are_eight_nodes(two_racks: Harness) -> None:
    h = two_racks
    assert h.cluster.agents() == {
        "agent1": [f"node{i}" for i in range(1, 5)],
        "agent2": [f"node{i}" for i in range(5, 9)],
    }
    pids = {name: h.agent_pid(name) for name in h.node_states()}
    assert len(set(pids.values())) == 2
    assert set(h.node_states().values()) == {"IDLE"}
    addrs = {(n.addr, n.port) for n in h.cluster.config().nodes}
    assert len(addrs) == 8  # each its own address (or port) and its own server


def test_a_job_across_both_agent_processes_gets_each_nodes_environment(two_racks: Harness) -> None:
    h = two_racks
    script = (
        "#!/bin/bash\n"
        "srun bash -c 'echo $SLURMD_NODENAME $SLURM_NODEID $RANK $WORLD_SIZE $SLURM_PROCID $$' | sort -n -k2\n"
    )
    job_id = h.sbatch("-N4", "-w", "node[3-6]", "-o", "hosted-%j.out", input=script)
    done = h.wait_job(job_id, timeout=60)
    assert done["state"] == "COMPLETED"
    lines = [line.split() for line in h.read(f"hosted-{job_id}.out").splitlines()]
    assert [(x[0], x[1], x[2], x[3], x[4]) for x in lines] == [
        ("node3", "0", "0", "4", "0"),
        ("node4", "1", "1", "4", "1"),
        ("node5", "2", "2", "4", "2"),
        ("node6", "3", "3", "4", "3"),
    ]
    assert len({x[5] for x in lines}) == 4  # every task its own process
    # the tasks on node3/node4 ran under agent1, those on node5/node6 under agent2
    assert h.agent_pid("node3") == h.agent_pid("node4") != h.agent_pid("node5")


def test_killing_an_agent_process_takes_exactly_its_nodes_down(two_racks: Harness) -> None:
    h = two_racks
    os.kill(h.agent_pid("node1"), signal.SIGKILL)
    wait_for(
        lambda: all(h.node_states()[f"node{i}"] == "DOWN" for i in range(1, 5)),
        30,
        interval=0.2,
        what="node1-node4 to be DOWN",
    )
    states = h.node_states()
    assert {name for name, state in states.items() if state == "DOWN"} == {f"node{i}" for i in range(1, 5)}
    assert all(states[f"node{i}"] == "IDLE" for i in range(5, 9))
    # the process comes back: its nodes return to service (ReturnToService=1)
    h.cluster.start()
    h.cluster.wait_ready(30)
