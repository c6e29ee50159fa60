"""muster backup while the controller runs, muster restore once it is stopped: jobs,
accounting, associations, reservations and node states come back as they were."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

MUSTER = [sys.executable, "-m", "muster.cli.muster"]


@pytest.fixture
def small_cluster() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout


def muster(h: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    return h.run([*MUSTER, *args])


def observe(h: Harness) -> dict[str, str]:
    """What users and administrators see of the state."""
    return {
        "squeue": ok(h.run(["squeue", "-h", "-o", "%i %T %r %P %j"])),
        "sacct": ok(h.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobID,JobName,State,ExitCode,Account,Partition"])),
        "assoc": ok(h.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,fairshare"])),
        "reservations": ok(h.run(["scontrol", "show", "reservation"])),
        "nodes": ok(h.run(["sinfo", "-h", "-N", "-o", "%N %T %E"])),
    }


def test_a_restore_loses_nothing(small_cluster: Harness) -> None:
    h = small_cluster
    for words in ("add account physics Fairshare=5", "add user root account=physics"):
        ok(h.run(["sacctmgr", "-i", *words.split()]))
    done = h.sbatch("-A", "physics", "-J", "finished", "--wrap", "true")
    assert h.wait_job(done)["state"] == "COMPLETED"
    failed = h.sbatch("-J", "broken", "--wrap", "exit 3")
    assert h.wait_job(failed)["state"] == "FAILED"
    held = h.sbatch("-H", "-J", "waiting", "--wrap", "true")
    ok(
        h.run(
            [
                "scontrol",
                "create",
                "reservation",
                "ReservationName=maint",
                "StartTime=now+1day",
                "Duration=60",
                "Users=root",
                "Nodes=node1",
            ]
        )
    )
    ok(h.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=bad fan"]))
    before = observe(h)
    assert "bad fan" in before["nodes"] and "waiting" in before["squeue"] and "physics" in before["assoc"]

    backup = os.path.join(h.root, "state.backup")
    out = muster(h, "backup", backup)  # while the controller runs
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"muster: backed up 3 jobs (schema 5, {os.path.getsize(backup)} bytes) to {backup}\n"
    assert oct(os.stat(backup).st_mode & 0o777) == "0o600"
    assert not os.path.exists(backup + "-wal")
    again = muster(h, "backup", backup)
    assert again.returncode == 1 and again.stderr == f"muster: error: {backup} exists; refusing to overwrite it\n"

    # Life goes on after the backup; the restore takes the cluster back to it.
    later = h.sbatch("-t", "1", "-J", "after-backup", "--wrap", "true")  # ends before maint
    h.wait_job(later)
    ok(h.run(["scontrol", "delete", "reservation=maint"]))
    ok(h.run(["scontrol", "update", "nodename=node2", "state=resume"]))

    refused = muster(h, "restore", backup)
    assert refused.returncode == 1
    assert refused.stderr.startswith("muster: error: musterctld (pid ")
    assert "stop it before restoring" in refused.stderr

    h.cluster.stop()
    garbage = os.path.join(h.root, "garbage")
    with open(garbage, "w") as f:
        f.write("not a database\n")
    bad = muster(h, "restore", garbage)
    assert bad.returncode == 1 and "is not a muster state database" in bad.stderr

    restored = muster(h, "restore", backup)
    assert restored.returncode == 0, restored.stderr
    assert "muster: restored 3 jobs (schema 5)" in restored.stdout
    assert "muster.db.pre-restore" in restored.stdout
    h.up()
    after = observe(h)
    assert after == before
    assert h.job(held)["state"] == "PENDING"
    gone = h.run(["squeue", "-h", "-j", str(later)])
    assert "after-backup" not in ok(h.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobName"])) and gone.stdout == ""
    with sqlite3.connect(os.path.join(h.cluster.config().state_save_location, "muster.db.pre-restore")) as kept:
        assert kept.execute("SELECT count(*) FROM jobs").fetchone()[0] == 4  # what it replaced, kept
