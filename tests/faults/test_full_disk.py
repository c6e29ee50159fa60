"""The controller's state directory on a tiny tmpfs, filled to ENOSPC while jobs run.

What must hold: commands print one clear line (no traceback) and fail; nothing acknowledged
is lost and nothing unacknowledged appears; a cancel or a hold that could not be committed
is not applied (not even in memory); reads keep working; and once space is freed the cluster
runs on without a restart: waiting jobs start, finished jobs are recorded.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from harness import Harness, fill_disk
from muster.cluster.local import ClusterShape

pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=4000),
        settings={"SlurmdTimeout": "10", "KillWait": "2"},
    )
    h.cluster.create(h.shape, h.settings)
    ctld = os.path.join(h.cluster.state_dir, "ctld")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", ctld], check=True)
    try:
        h.up()
        yield h
    finally:
        h.down(remove=False)
        subprocess.run(["umount", "-l", ctld], check=False)
        h.down()


def one_line_error(out: subprocess.CompletedProcess[str], prefix: str) -> None:
    assert out.returncode != 0, out
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), out.stderr
    assert "No space left on device" in lines[0], out.stderr


def test_a_full_state_disk_refuses_changes_clearly_and_the_cluster_recovers_when_freed(
    cluster: Harness,
) -> None:
    h = cluster
    ctld = os.path.join(h.cluster.state_dir, "ctld")
    running = h.sbatch("-o", "fd-run.out", "--wrap", "sleep 4; echo finished")
    long = h.sbatch("-o", "fd-long.out", "--wrap", "sleep 25; echo long")
    waiting = h.sbatch("-c2", "-w", "node1", "-o", "fd-wait.out", "--wrap", "echo waited")
    queued = h.sbatch("--hold", "--wrap", "true")
    h.wait_state(running, "RUNNING")
    h.wait_state(long, "RUNNING")
    acknowledged = {running, waiting, queued, long}
    filler = os.path.join(ctld, "filler")
    fill_disk(filler)
    try:
        one_line_error(h.run(["sbatch", "--wrap", "true"]), "sbatch: error: Batch job submission failed:")
        one_line_error(h.run(["scancel", str(queued)]), "scancel: error:")
        one_line_error(h.run(["scontrol", "release", str(queued)]), "")
        for argv in (
            ["scontrol", "hold", str(waiting)],
            ["scontrol", "requeue", str(running)],
            ["scontrol", "update", "nodename=node2", "state=drain", "reason=x"],
            ["scontrol", "create", "reservation", "starttime=now", "duration=60", "users=root", "nodecnt=1"],
            ["sacctmgr", "-i", "add", "account", "fdacct"],
            ["srun", "-N1", "true"],
        ):
            out = h.run(argv, timeout=30)
            assert out.returncode != 0 and "Traceback" not in out.stderr + out.stdout, (argv, out)
            assert "No space left on device" in out.stderr + out.stdout, (argv, out)
        # Longer than SlurmdTimeout: the daemons keep hearing each other (a full disk must
        # not cost a node its life); the short job ends meanwhile, unrecorded yet.
        time.sleep(12)  # sleep: the full disk lasts past SlurmdTimeout, and no node may go DOWN
        listed = h.run(["squeue", "-h", "-o", "%i %T %r"])
        assert listed.returncode == 0 and "Traceback" not in listed.stderr
        states = dict(line.split(" ", 1) for line in listed.stdout.strip().splitlines())
        assert set(map(int, states)) == acknowledged
        assert states[str(queued)] == "PENDING JobHeldUser"  # the cancel and release did not apply
        shown = h.run(["scontrol", "show", "job", str(queued)])
        assert shown.returncode == 0 and "JobState=PENDING" in shown.stdout
        assert h.run(["sinfo"]).returncode == 0
        assert not any(n["drain"] for n in h.cluster.api("GET", "/v1/nodes")["nodes"])
        assert h.cluster.api("GET", "/v1/reservations")["reservations"] == []
        assert "fdacct" not in h.run(["sacctmgr", "-n", "-P", "list", "account"]).stdout
    finally:
        os.unlink(filler)

    # Space is back: no restart, the cluster runs on.
    assert h.wait_job(running, timeout=30)["state"] == "COMPLETED"
    assert h.wait_job(waiting, timeout=30)["state"] == "COMPLETED"
    done = h.wait_job(long, timeout=40)
    assert (done["state"], done["restart_count"]) == ("COMPLETED", 0) and h.read("fd-long.out") == "long\n"
    assert all(n["state"] != "DOWN" for n in h.cluster.api("GET", "/v1/nodes")["nodes"])
    assert h.read("fd-run.out") == "finished\n" and h.read("fd-wait.out") == "waited\n"
    assert h.run(["scancel", str(queued)]).returncode == 0
    assert h.wait_job(queued)["state"] == "CANCELLED"
    after = h.sbatch("--wrap", "true")
    assert h.wait_job(after)["state"] == "COMPLETED"
    assert after == max(acknowledged) + 1  # the refused submission used no id
    sacct = h.run(["sacct", "-n", "-X", "-P", "-o", "JobID,State"]).stdout.splitlines()
    assert sorted(int(r.split("|")[0]) for r in sacct) == sorted(acknowledged | {after})
    log = h.read(os.path.join(h.cluster.state_dir, "log", "musterctld.log"))
    assert "No space left on device" in log and "Traceback" not in log
