"""A controller killed between committing a job's start and sending its launch: the next
one launches that attempt as soon as the node's agent says it never got it (``ctld.unlaunched``),
with no NODE_FAIL attempt and no requeue. The crash is made deterministic by
``MUSTER_TEST_CRASH_BEFORE_LAUNCH=1`` (``ctld.dispatch``: the controller exits in place of
sending a launch)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def one_node() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def _wait_gone(h: Harness, timeout: float = 30.0) -> None:
    wait_for(
        lambda: h.cluster._alive("musterctld", check_cmdline=False) is None, timeout, what="the controller to exit"
    )


def test_a_start_committed_and_never_sent_runs_once_after_the_restart_without_node_fail(
    one_node: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = one_node
    pid = h.cluster._alive("musterctld", check_cmdline=False)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    _wait_gone(h)
    monkeypatch.setenv("MUSTER_TEST_CRASH_BEFORE_LAUNCH", "1")  # the next launch it sends: it exits
    assert h.cluster.start() == ["musterctld"]
    h.cluster.wait_ready(30)
    monkeypatch.delenv("MUSTER_TEST_CRASH_BEFORE_LAUNCH")

    runs = os.path.join(h.workdir, "runs")
    job_id = h.sbatch("-o", "/dev/null", "--wrap", f"date +%s.%N >> {runs}; echo ${{SLURM_RESTART_COUNT:-0}} >> {runs}")
    _wait_gone(h)  # it committed the start and died before the launch left
    assert not os.path.exists(runs)

    assert h.cluster.start() == ["musterctld"]
    restarted = time.time()
    h.cluster.wait_ready(30)
    job = h.wait_job(job_id, timeout=60)
    assert (job["state"], job["restart_count"]) == ("COMPLETED", 0), job
    lines = h.read(runs).split()
    assert len(lines) == 2 and lines[1] == "0", lines  # ran once, its first attempt
    print(f"job {job_id} started {float(lines[0]) - restarted:.2f} s after the controller's restart")

    acct = h.run(["sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "--format=JobID,State"])
    assert acct.returncode == 0, acct.stderr
    assert acct.stdout.split() == [f"{job_id}|COMPLETED"], acct.stdout
    log = h.read(h.cluster._logfile("musterctld"))
    assert "never reached" in log and "vanished" not in log
