"""scontrol reconfigure against a running controller: a bad file changes nothing, a good
one is live at once (a new partition takes jobs, a new weight shows in sprio), a key that
needs a restart refuses the whole file."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


@pytest.fixture
def two_nodes() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def views(h: Harness) -> dict[str, str]:
    out = {}
    for argv in (["scontrol", "show", "config"], ["sinfo"], ["scontrol", "show", "partition"]):
        run = h.run(argv)
        assert run.returncode == 0, run.stderr
        # (the first line of show config is the time it was asked)
        out[" ".join(argv)] = run.stdout.split("\n", 1)[1] if argv[-1] == "config" else run.stdout
    return out


def priority(h: Harness, job: int) -> int:
    return int(h.run(["squeue", "-h", "-j", str(job), "-o", "%Q"]).stdout.strip())


def reconfigure(h: Harness, text: str) -> tuple[int, str, str]:
    with open(h.cluster.conf_path, "w") as f:
        f.write(text)
    run = h.run(["scontrol", "reconfigure"])
    return run.returncode, run.stdout, run.stderr


def test_reconfigure_refuses_a_bad_file_whole_and_applies_a_good_one_live(two_nodes: Harness) -> None:
    h = two_nodes
    with open(h.cluster.conf_path) as f:
        original = f.read()
    before = views(h)

    # A partition naming a node that does not exist: refused, nothing changes.
    rc, out, err = reconfigure(h, original + "PriorityWeightPartition=4321\nPartitionName=debug Nodes=node9\n")
    assert rc == 1 and out == ""
    assert err.startswith("slurm_reconfigure error: the configuration is refused and the running one kept: ")
    assert "unknown node 'node9'" in err
    assert views(h) == before

    # A good change beside one that needs a restart: the whole file is refused.
    changed = original.replace("ClusterName=muster", "ClusterName=other")
    rc, _out, err = reconfigure(h, changed + "PriorityWeightPartition=4321\nPartitionName=debug Nodes=node1\n")
    assert rc == 1 and "ClusterName cannot change while musterctld runs" in err
    assert views(h) == before
    assert "4321" not in h.run(["sprio", "-w"]).stdout

    # Only administrators may ask.
    with open(h.cluster.conf_path, "w") as f:
        f.write(original + "PriorityWeightPartition=4321\n")
    denied = h.run(["scontrol", "reconfigure"], uid=65534)
    assert denied.returncode == 1 and denied.stderr == "slurm_reconfigure error: Access/permission denied\n"
    assert views(h) == before

    # A good file: nothing printed, exit 0, live at once.
    held = h.sbatch("-H", "-p", "gpu", "--wrap", "true")
    later = h.sbatch("--begin=now+1hour", "-p", "gpu", "--wrap", "true")
    h.wait_job(later, lambda j: j["priority"] > 0)
    ranked_before = priority(h, later)
    rc, out, err = reconfigure(
        h, original + "PriorityWeightPartition=4321\nPartitionName=debug Nodes=node1 MaxTime=30\n"
    )
    assert (rc, out, err) == (0, "", "")
    sinfo = h.run(["sinfo", "-h", "-o", "%P %a %l %D %N"]).stdout.split("\n")
    assert "debug up 30:00 1 node1" in sinfo
    show = h.run(["scontrol", "show", "partition", "debug"])
    assert show.returncode == 0 and "MaxTime=00:30:00" in show.stdout
    assert "PriorityWeightPartition = 4321" in h.run(["scontrol", "show", "config"]).stdout
    assert "4321" in h.run(["sprio", "-w"]).stdout
    row = h.run(["sprio", "-h", "-j", str(held), "-o", "%i %P"]).stdout.split()
    assert row == [str(held), "4321"]  # its partition factor (1.0) times the new weight
    # the scheduling pass the reconfigure asked for ranked the queue with the new weight
    wait_for(  # partition weight 1000 -> 4321
        lambda: priority(h, later) >= ranked_before + 4321 - 1000 - 1,
        10,
        interval=0.2,
        what="the next pass to use the new weight",
    )

    job = h.sbatch("-p", "debug", "--wrap", "hostname")
    done = h.wait_job(job)
    assert done["state"] == "COMPLETED" and done["nodelist"] == "node1" and done["partition"] == "debug"

    log = h.read(h.cluster._logfile("musterctld"))
    assert "reconfigure: PriorityWeightPartition (null) -> 4321" in log
    assert "reconfigure: PartitionName=debug added" in log
    h.run(["scancel", str(held), str(later)])


def test_nodes_change_live_and_a_node_added_runs_jobs_once_its_agent_starts(two_nodes: Harness) -> None:
    h = two_nodes
    with open(h.cluster.conf_path) as f:
        original = f.read()
    node2 = next(line for line in original.splitlines() if line.startswith("NodeName=node2 "))
    addr = node2.split("NodeAddr=")[1].split()[0].replace(".3", ".4") if "127.0.0.3" in node2 else "127.0.0.1"
    with socket.socket() as s:
        s.bind((addr, 0))
        port = s.getsockname()[1]
    node3 = node2.replace("node2", "node3").replace(node2.split("NodeAddr=")[1].split()[0], addr)
    node3 = node3.replace(node2.split("Port=")[1].split()[0], str(port))
    text = original.replace(node2, f"{node2} Features=nvlink State=DRAIN Reason=cabling\n{node3}")

    rc, out, err = reconfigure(h, text)
    assert (rc, out, err) == (0, "", "")
    nodes = h.run(["sinfo", "-h", "-N", "-o", "%N %f %T %E"]).stdout.splitlines()
    assert "node2 nvlink drained cabling" in nodes
    assert nodes[-1].startswith("node3 ") and "unknown" in nodes[-1]

    assert h.cluster.start() == ["node3"]  # muster up starts the agent the file now names
    h.cluster.wait_ready(60)
    job = h.sbatch("-w", "node3", "--wrap", "hostname")
    assert h.wait_job(job)["state"] == "COMPLETED"

    rc, _out, _err = reconfigure(h, original.replace(node2, f"{node2}\n{node3}"))  # the file lifts its drain
    assert rc == 0
    assert "node2 idle" in h.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.splitlines()
