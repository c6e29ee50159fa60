"""In-allocation replacement with real daemons (issue 36 items 1-2): a 3-node job with
``--spare-nodes=1`` on a 4-node cluster whose partition keeps node4 as its spare
(``SpareNodes=node4``). One non-batch node dies (its agent and its tasks SIGKILLed): the job
keeps its id and restart count, the running srun step fails, and the batch loop's next srun
runs on the repaired allocation and prints the new hostnames. Without the option the job
is requeued as before; so is a job whose batch host fails (the script ran there). A node
whose health check starts failing is replaced too, and the job's tasks there are stopped."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

LOOP = """#!/bin/bash
# the common pattern: re-run srun after it fails; its next run uses the repaired allocation
n=0
while [ $n -lt 3 ]; do
  n=$((n+1))
  srun -l bash -c "echo round $n host \\$SLURMD_NODENAME of \\$SLURM_JOB_NODELIST rank \\$SLURM_NODEID; \
if [ $n = 1 ]; then sleep 600; fi" && break
  echo "srun failed: $?"
  # the node's agent was told the repaired allocation: beside the progress file (a wait
  # with a deadline: the message and srun's end are not ordered)
  for i in $(seq 600); do [ -e "$MUSTER_PROGRESS.allocation" ] && break; sleep 0.1; done
  echo "allocation: $(cat "$MUSTER_PROGRESS.allocation")"
done
echo "loop over after round $n"
"""


@pytest.fixture(scope="module")
def spared() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "4", "KillWait": "2"},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    with open(h.cluster.conf_path, "w") as f:
        f.write(text.replace("PartitionName=gpu Nodes=ALL", "PartitionName=gpu Nodes=ALL SpareNodes=node4"))
    h.up()
    try:
        yield h
    finally:
        h.down()


def _pids_of(job_id: int, node: str) -> list[int]:
    """Processes of the job that run "on" ``node`` (all nodes share this host)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == str(job_id).encode() and env.get(b"SLURMD_NODENAME") == node.encode():
            out.append(int(entry))
    return out


def _kill_node(h: Harness, job_id: int, node: str) -> None:
    """The node dies: its agent and the job's processes there, SIGKILLed."""
    pid = h.cluster._alive(node)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for task in _pids_of(job_id, node):
        try:
            os.kill(task, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _bring_back(h: Harness) -> None:
    h.cluster.start()
    h.cluster.wait_ready(60)
    wait_for(lambda: all(s != "DOWN" for s in h.node_states().values()), 60, what="every node back in service")


def test_a_dead_node_is_replaced_by_the_spare_and_the_loops_next_srun_runs_there(spared: Harness) -> None:
    h = spared
    script = os.path.join(h.workdir, "loop.sh")
    with open(script, "w") as f:
        f.write(LOOP)
    job_id = h.sbatch("-N3", "--ntasks-per-node=1", "--spare-nodes=1", "-o", "loop-%j.out", script)
    job = h.wait_state(job_id, "RUNNING")
    assert [a["node"] for a in job["alloc"]] == ["node1", "node2", "node3"]  # node4: the spare
    out = os.path.join(h.workdir, f"loop-{job_id}.out")
    wait_for(lambda: os.path.exists(out) and h.read(out).count("round 1 host") == 3, 60, what="round 1 on 3 nodes")

    _kill_node(h, job_id, "node2")
    repaired = h.wait_job(job_id, lambda j: [a["node"] for a in j["alloc"]] == ["node1", "node4", "node3"], 60)
    assert repaired["state"] == "RUNNING" and repaired["restart_count"] == 0

    done = h.wait_job(job_id, timeout=90)
    text = h.read(out)
    assert done["state"] == "COMPLETED" and done["restart_count"] == 0, text
    second = sorted(line.split(": ", 1)[-1] for line in text.splitlines() if "round 2 host" in line)
    assert second == [
        "round 2 host node1 of node[1,3-4] rank 0",
        "round 2 host node3 of node[1,3-4] rank 2",  # SLURM_NODEID kept: node4 took node2's place
        "round 2 host node4 of node[1,3-4] rank 1",
    ], text
    assert re.search(r"srun failed: \d+", text) and "loop over after round 2" in text, text
    told = json.loads(text.split("allocation: ", 1)[1].splitlines()[0])
    assert told["nodelist"] == "node[1,3-4]" and told["nodes"] == ["node1", "node4", "node3"], text
    assert (told["replaced"]["old"], told["replaced"]["new"]) == ("node2", "node4"), text
    (event,) = done["replacements"]
    assert (event["old"], event["new"], event["cause"]) == ("node2", "node4", "not_responding")
    shown = h.run(["scontrol", "show", "job", str(job_id)])
    assert "Replaced=node2>node4(not_responding)" in shown.stdout, shown.stdout
    # sacct: one attempt, its nodes as they ended, the replacement as an event of the job
    acct = h.run(["sacct", "-D", "-X", "-j", str(job_id), "--parsable2", "--noheader", "-o", "JobID,NodeList,Replaced"])
    assert acct.returncode == 0, acct.stderr
    (row,) = acct.stdout.splitlines()
    assert re.fullmatch(rf"{job_id}\|node\[1,3-4\]\|node2>node4@\d{{4}}-\d\d-\d\dT[\d:]+\(not_responding\)", row), row
    as_json = json.loads(h.run(["sacct", "-j", str(job_id), "--json"]).stdout)
    (record,) = as_json["jobs"]
    assert [(e["old"], e["new"]) for e in record["replacements"]] == [("node2", "node4")]
    _bring_back(h)


def test_without_spare_nodes_a_dead_node_requeues_the_job_as_before(spared: Harness) -> None:
    h = spared
    job_id = h.sbatch("-N3", "--requeue", "--wrap", "sleep 600")
    job = h.wait_state(job_id, "RUNNING")
    # each test kills another node: one that fails twice is quarantined (QuarantineFailures=2)
    victim = job["alloc"][2]["node"]
    _kill_node(h, job_id, victim)
    requeued = h.wait_job(job_id, lambda j: j["restart_count"] == 1, 60)
    assert not requeued.get("replacements")
    _bring_back(h)
    h.run(["scancel", str(job_id)])
    h.wait_job(job_id, timeout=60)


def test_the_batch_host_is_not_replaced_the_job_is_requeued(spared: Harness) -> None:
    h = spared
    job_id = h.sbatch("-N3", "--spare-nodes=1", "--requeue", "--wrap", "sleep 600")
    job = h.wait_state(job_id, "RUNNING")
    batch_host = job["alloc"][0]["node"]
    _kill_node(h, job_id, batch_host)
    requeued = h.wait_job(job_id, lambda j: j["restart_count"] == 1, 60)
    assert not requeued.get("replacements")  # the script ran there: nothing to go on with
    _bring_back(h)
    h.run(["scancel", str(job_id)])
    h.wait_job(job_id, timeout=60)


@pytest.fixture
def checked() -> Iterator[Harness]:
    """A cluster like ``spared`` whose nodes run a health check every second: it fails on
    the node named by a file ``sick-<node>`` in the cluster's root."""
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "4", "KillWait": "2"},
    )
    program = os.path.join(h.root, "health.sh")
    with open(program, "w") as f:
        f.write(f'#!/bin/sh\nif [ -e "{h.root}/sick-$SLURMD_NODENAME" ]; then echo "NIC down"; exit 1; fi\n')
    os.chmod(program, 0o755)
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    text = text.replace("PartitionName=gpu Nodes=ALL", "PartitionName=gpu Nodes=ALL SpareNodes=node4")
    with open(h.cluster.conf_path, "w") as f:
        f.write(text + f"HealthCheckProgram={program}\nHealthCheckInterval=1\n")
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_node_whose_health_check_starts_failing_is_replaced_and_its_tasks_stopped(checked: Harness) -> None:
    h = checked
    script = os.path.join(h.workdir, "loop.sh")
    with open(script, "w") as f:
        f.write(LOOP)
    job_id = h.sbatch("-N3", "--ntasks-per-node=1", "--spare-nodes=1", "-o", "loop-%j.out", script)
    h.wait_state(job_id, "RUNNING")
    out = os.path.join(h.workdir, f"loop-{job_id}.out")
    wait_for(lambda: os.path.exists(out) and h.read(out).count("round 1 host") == 3, 60, what="round 1 on 3 nodes")
    with open(os.path.join(h.root, "sick-node3"), "w"):
        pass
    done = h.wait_job(job_id, timeout=90)
    text = h.read(out)
    assert done["state"] == "COMPLETED" and done["restart_count"] == 0, text
    assert [a["node"] for a in done["alloc"]] == ["node1", "node2", "node4"], text
    assert "round 2 host node4 of node[1-2,4] rank 2" in text, text
    (event,) = done["replacements"]
    assert (event["old"], event["new"], event["cause"]) == ("node3", "node4", "health_check")
    wait_for(lambda: not _pids_of(job_id, "node3"), 30, what="the job's tasks on node3 stopped")  # it still runs
    node3 = next(n for n in h.cluster.api("GET", "/v1/nodes")["nodes"] if n["name"] == "node3")
    assert node3["drain"] and "NIC down" in node3["reason"], node3  # drained by its health check
