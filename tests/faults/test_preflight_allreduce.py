"""The pre-flight gate's all-reduce with real daemons (``PreflightAllReduce=YES``,
docs/recovery.md): a 2-node ``--preflight`` job whose ranks (torch.distributed gloo, one per
node, rendezvous at the first) sum right starts its script; one whose second node's rank is
made to exit (the fault hook ``MUSTER_PREFLIGHT_ALLREDUCE_FAIL=@<file>`` names it) never
starts: that node is drained with the evidence and recorded (kind ``preflight``), the first
node, which only waited on it, is not, and the job is requeued. One cluster serves the file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.agent.allreduce import FAIL_ENV
from muster.cluster.local import ClusterShape

pytest.importorskip("torch.distributed")
pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    root = tempfile.mkdtemp(prefix="muster-allreduce-")
    hook = os.path.join(root, "fail-ranks")
    open(hook, "w").close()
    os.chmod(root, 0o755)
    before = os.environ.get(FAIL_ENV)
    os.environ[FAIL_ENV] = "@" + hook  # the agents (and their ranks) inherit it
    h = Harness(
        ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=4000),
        root=root,
        settings={
            "SlurmdTimeout": "30",
            "KillWait": "2",
            "PreflightMinFreeMB": "1",
            "PreflightAllReduce": "YES",
            "PreflightAllReduceTimeout": "30",
        },
    )
    h.hook = hook  # type: ignore[attr-defined]
    try:
        h.up()  # inside: a cluster that fails to start is stopped too
        yield h
    finally:
        h.down()
        if before is None:
            os.environ.pop(FAIL_ENV, None)
        else:
            os.environ[FAIL_ENV] = before


def node(h: Harness, name: str) -> dict:  # type: ignore[type-arg]
    return h.cluster.api("GET", f"/v1/nodes?name={name}")["nodes"][0]  # type: ignore[no-any-return]


def drained(h: Harness, name: str) -> dict | None:  # type: ignore[type-arg]
    n = node(h, name)
    return n if n["drain"] else None


def test_a_two_node_job_whose_all_reduce_passes_runs(cluster: Harness) -> None:
    h = cluster
    out = os.path.join(h.workdir, "ran-allreduce")
    job = h.sbatch("--preflight", "-N2", "--wrap", f"echo ran > {out}")
    j = h.wait_job(job, timeout=180)
    assert j["state"] == "COMPLETED" and j["restart_count"] == 0, j
    assert os.path.exists(out)


def test_the_node_whose_rank_fails_is_drained_and_the_job_requeued(cluster: Harness) -> None:
    h = cluster
    with open(h.hook, "w") as f:  # type: ignore[attr-defined]
        f.write("node2\n")
    out = os.path.join(h.workdir, "ran-failed-allreduce")
    try:
        job = h.sbatch("--preflight", "-N2", "--wrap", f"echo ran > {out}")
        n = wait_for(lambda: drained(h, "node2"), 180, interval=0.5, what="node2 drained")
        assert f"{FAIL_ENV} names node2" in n["reason"], n
        j = h.wait_job(job, lambda j: j["restart_count"] >= 1 and j["state"] == "PENDING", timeout=180)
        assert not os.path.exists(out), j  # the script never started
        record = h.cluster.api("GET", "/v1/nodes/node2/failures")["failures"][-1]
        assert (record["kind"], record["job_id"]) == ("preflight", job), record
        assert not node(h, "node1")["drain"]  # its rank only waited on node2's
        h.run(["scancel", str(job)])
    finally:
        open(h.hook, "w").close()  # type: ignore[attr-defined]
    assert h.run(["scontrol", "update", "nodename=node2", "state=resume"]).returncode == 0
    wait_for(lambda: not node(h, "node2")["drain"], 30, interval=0.2, what="node2 resumed")
