"""Launches through the tree of agents (``TreeWidth``, ``agent.steptree``): with TreeWidth=2
a 16-node step is four levels deep, every rank starts with its own environment, and an
agent stopped or killed inside the tree is a failure that names its nodes, not a hang.

Sixteen nodes in four agent processes (``nodes_per_agent=4``); with TreeWidth=2 srun
contacts node1 and node9 only; node1 relays to node2 and node6, node2 to node3 and node5,
node6 to node7 and node8, and so on. The third process hosts node9-node12, the second
node5-node8 (node6 being a relay).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

SETTINGS = {"TreeWidth": "2", "MessageTimeout": "3", "SlurmdTimeout": "6", "KillWait": "2"}


def cluster() -> Harness:
    h = Harness(
        ClusterShape(nodes=16, gpus_per_node=0, cpus_per_node=2, mem_per_node=4000, nodes_per_agent=4),
        settings=SETTINGS,
    )
    h.up()
    return h


@pytest.fixture(scope="module")
def tree() -> Iterator[Harness]:
    h = cluster()
    try:
        yield h
    finally:
        h.down()


@pytest.fixture
def fresh() -> Iterator[Harness]:
    h = cluster()
    try:
        yield h
    finally:
        for pid in {h.cluster.node_pid(f"node{i}") for i in range(1, 17)} - {None}:
            try:
                os.kill(pid, signal.SIGCONT)  # type: ignore[arg-type]
            except ProcessLookupError:
                pass
        h.down()


def test_srun_over_sixteen_nodes_in_a_tree_of_width_two_runs_every_rank(tree: Harness) -> None:
    out = tree.run(
        ["srun", "-v", "-N16", "-n32", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_PROCID $SLURM_NODEID $WORLD_SIZE"],
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    assert "launch tree: TreeWidth=2, 4 level(s), heads node1,node9" in out.stderr
    rows = sorted((int(r[1]), r[0], int(r[2]), r[3]) for r in (line.split() for line in out.stdout.splitlines()))
    assert [r[0] for r in rows] == list(range(32))
    assert {r[3] for r in rows} == {"32"}
    # block distribution: ranks 2k and 2k+1 on node k+1, whose SLURM_NODEID is k
    assert all(name == f"node{rank // 2 + 1}" and nodeid == rank // 2 for rank, name, nodeid, _ in rows)


def test_srun_holds_one_connection_per_head_not_per_node(tree: Harness) -> None:
    # 14 open files: srun's own (stdio, its wake-up pipe, Python's) and two heads', not 16 nodes'
    out = tree.run(["/bin/sh", "-c", "ulimit -n 14 && exec srun -N16 true"], timeout=90)
    assert out.returncode == 0, out.stderr


def test_a_batch_job_over_sixteen_nodes_starts_all_ranks_through_the_tree(tree: Harness) -> None:
    script = "#!/bin/bash\nsrun bash -c 'echo $SLURM_PROCID $RANK $WORLD_SIZE $SLURMD_NODENAME $MASTER_ADDR'\n"
    job_id = tree.sbatch("-N16", "--ntasks-per-node=2", "-o", "tree-%j.out", input=script)
    done = tree.wait_job(job_id, timeout=90)
    assert done["state"] == "COMPLETED", tree.read(f"tree-{job_id}.out")
    rows = sorted(line.split() for line in tree.read(f"tree-{job_id}.out").splitlines())
    assert sorted(int(r[0]) for r in rows) == list(range(32))
    assert all(r[0] == r[1] and r[2] == "32" for r in rows)
    assert len({r[4] for r in rows}) == 1  # one MASTER_ADDR for all ranks
    assert {r[3] for r in rows} == {f"node{i}" for i in range(1, 17)}


def test_a_stopped_agent_inside_the_tree_is_named_not_waited_for(fresh: Harness) -> None:
    h = fresh
    pid = h.agent_pid("node6")  # node5-node8: node6 relays to node7 and node8
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    out = h.run(["srun", "-N16", "-w", "node[1-16]", "true"], timeout=90)
    took = time.monotonic() - started
    assert out.returncode != 0
    err = out.stderr
    # each failed alone: node6's group went on with node7, then node8, which were stopped too
    for i in range(5, 9):
        assert f"srun: error: node{i}: no answer within 3 s" in err, err
    # the nodes that answered ran their task; the silent ones are the controller's call:
    # srun waited for it (SlurmdTimeout), and the nodes are DOWN
    assert "Node failure on node5" in err and "Node failure on node6" in err, err
    for i in (1, 2, 3, 4, 9, 16):
        assert f"node{i}:" not in err
    assert took < 40, f"srun took {took:.1f} s"
    states = h.node_states()
    assert all(states[f"node{i}"] == "DOWN" for i in range(5, 9)), states


def test_a_stopped_head_fails_alone_and_the_next_node_of_its_group_takes_its_place(fresh: Harness) -> None:
    h = fresh
    os.kill(h.agent_pid("node5"), signal.SIGSTOP)
    # node[1,5,9-13] with TreeWidth=2: srun -> node1 and node11; node1 -> node5 (for node5
    # and node9) and node10; node5 is silent, so node1 relays to node9 itself
    out = h.run(["srun", "-N7", "-w", "node[1,5,9-13]", "bash", "-c", "echo ran $SLURMD_NODENAME"], timeout=90)
    assert out.returncode != 0
    assert "srun: error: node5: no answer within 3 s" in out.stderr, out.stderr
    assert sorted(out.stdout.split()[1::2]) == sorted(["node1", "node9", "node10", "node11", "node12", "node13"])
    assert [line for line in out.stderr.splitlines() if "node9" in line] == []


def test_an_agent_killed_inside_the_tree_mid_step_fails_the_job_node_fail(fresh: Harness) -> None:
    h = fresh
    script = "#!/bin/bash\nsrun bash -c 'echo up $SLURM_PROCID; exec sleep 30'\n"
    job_id = h.sbatch("-N16", "--no-requeue", "-o", "killed-%j.out", input=script)
    h.wait_state(job_id, "RUNNING", timeout=30)
    out = os.path.join(h.workdir, f"killed-{job_id}.out")
    wait_for(
        lambda: os.path.exists(out) and h.read(out).count("up ") >= 16, 30, interval=0.2, what="all 16 ranks to start"
    )
    os.kill(h.agent_pid("node14"), signal.SIGKILL)  # node13-node16: node14 relays to node15 and node16
    done = h.wait_job(job_id, timeout=60)
    assert done["state"] == "NODE_FAIL"
    text = h.read(f"killed-{job_id}.out")
    assert "srun: error: node13: connection closed before its tasks ended" in text, text
    assert "srun: error: node14: connection closed before its tasks ended" in text, text
    assert "srun: error: node15: lost with its relay node14 (connection closed before its tasks ended)" in text, text
