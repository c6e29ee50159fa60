"""Topology with real daemons: a 4-node job on a tree of 4 leaf switches x 4 nodes lands
on one leaf when one is free, its ranks in topology order; scontrol show topology."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape, LocalCluster
from muster.core.config import ConfigError

pytestmark = pytest.mark.integration

TREE = """\
# 4 leaf switches x 4 nodes under one top switch
SwitchName=s0 Nodes=node[1-4]
SwitchName=s1 Nodes=node[5-8]
SwitchName=s2 Nodes=node[9-12]
SwitchName=s3 Nodes=node[13-16]
SwitchName=top Switches=s[0-3]
"""


@pytest.fixture
def tree() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=16, gpus_per_node=0, cpus_per_node=2, mem_per_node=4000), topology=TREE)
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_four_node_job_lands_on_one_free_leaf_in_topology_order(tree: Harness) -> None:
    h = tree
    blockers = [h.sbatch("-w", name, "--exclusive", "-t", "5:00", "--wrap", "sleep 60") for name in ("node1", "node6")]
    for b in blockers:
        h.wait_state(b, "RUNNING")
    script = (
        "#!/bin/sh\necho nodelist=$SLURM_JOB_NODELIST $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN\n"
        "srun sh -c 'echo rank $SLURM_NODEID $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR'\n"
    )
    big = h.sbatch("-N4", "--exclusive", "-t", "5:00", "-o", "big.out", input=script)
    job = h.wait_job(big)
    assert job["state"] == "COMPLETED"
    assert [a["node"] for a in job["alloc"]] == ["node9", "node10", "node11", "node12"]  # one leaf: s2
    out = h.read("big.out").splitlines()
    assert out[0] == "nodelist=node[9-12] top.s2.node9 switch.switch.node"
    ranks = sorted(tuple(line.split()[1:]) for line in out[1:] if line.startswith("rank"))
    assert ranks == [(str(i), f"node{9 + i}", f"top.s2.node{9 + i}") for i in range(4)]

    # every leaf now has 3 free nodes: --switches=1 waits its 6 s, then takes two leaves
    blockers += [
        h.sbatch("-w", name, "--exclusive", "-t", "5:00", "--wrap", "sleep 60") for name in ("node9", "node13")
    ]
    for b in blockers:
        h.wait_state(b, "RUNNING")
    waiting = h.sbatch("-N4", "--exclusive", "--switches=1@0:06", "-t", "5:00", "--wrap", "true")
    # a pass has seen it and left it waiting for one leaf (it ends its 6 s wait later)
    assert h.wait_job(waiting, lambda j: j["reason"] != "None", timeout=10)["state"] == "PENDING"
    job = h.wait_job(waiting, timeout=30)
    assert job["state"] == "COMPLETED" and job["start_time"] - job["submit_time"] >= 5.5
    leaves = {(int(a["node"][4:]) - 1) // 4 for a in job["alloc"]}
    assert len(leaves) == 2, job["alloc"]
    for b in blockers:
        h.run(["scancel", str(b)])

    show = h.run(["scontrol", "show", "topology"])
    assert show.returncode == 0, show.stderr
    assert show.stdout.splitlines() == [
        "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-4]",
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[5-8]",
        "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=node[9-12]",
        "SwitchName=s3 Level=0 LinkSpeed=1 Nodes=node[13-16]",
        "SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-16] Switches=s[0-3]",
    ]
    one = h.run(["scontrol", "show", "topology", "node7"]).stdout.splitlines()
    assert [line.split()[0] for line in one] == ["SwitchName=s1", "SwitchName=top"]
    seg = h.run(["sbatch", "-N4", "--segment=3", "--wrap", "true"])
    assert seg.returncode == 1
    assert seg.stderr == "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    sw = h.run(["sbatch", "-N4", "--switches=0", "--wrap", "true"])
    assert sw.returncode != 0 and "Invalid --switches specification: 0" in sw.stderr

    conf = h.run(["scontrol", "show", "config"]).stdout
    assert any(line.split() == ["TopologyPlugin", "=", "topology/tree"] for line in conf.splitlines())

    # scontrol reconfigure reads topology.conf again: a bad one is refused whole, a good one is live
    topo_path = os.path.join(os.path.dirname(h.cluster.conf_path), "topology.conf")
    with open(topo_path, "w") as f:
        f.write(TREE + "SwitchName=s4 Nodes=node16\n")
    bad = h.run(["scontrol", "reconfigure"])
    assert bad.returncode == 1 and "node 'node16' is under two leaf switches: 's3' and 's4'" in bad.stderr
    assert h.run(["scontrol", "show", "topology"]).stdout.splitlines()[0].startswith("SwitchName=s0 ")
    with open(topo_path, "w") as f:
        f.write("SwitchName=big Nodes=node[1-16] LinkSpeed=400\n")
    good = h.run(["scontrol", "reconfigure"])
    assert good.returncode == 0, good.stderr
    assert h.run(["scontrol", "show", "topology"]).stdout == "SwitchName=big Level=0 LinkSpeed=400 Nodes=node[1-16]\n"


def test_a_bad_topology_file_is_refused_before_anything_is_written(tmp_path: object) -> None:
    cluster = LocalCluster(os.path.join(str(tmp_path), "state"))
    with pytest.raises(ConfigError, match="switch 's0' names unknown node 'node5'"):
        cluster.create(ClusterShape(nodes=4), topology="SwitchName=s0 Nodes=node[1-9]\n")
    assert not cluster.exists
