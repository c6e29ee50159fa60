"""Hang detection with real daemons and real processes (issue 37): a hung job is requeued as
Hung with evidence from each of its processes, and the diagnostic never kills it. The two
measured cases: a Python job that reports three steps and sleeps, and a bash script (which
does not handle SIGUSR1) whose Python child reports the steps. A declared slow section is
not a hang; a job that hangs on one node, then on another, drains neither."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000),
        settings={"KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


PY_JOB = """#!{python}
#SBATCH --hang-timeout=0:03 --requeue
import os, sys, time
from muster import progress
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    sys.exit(0)  # the next attempt: done
for i in range(1, 4):
    progress.step(i)
    time.sleep(0.2)
time.sleep(300)  # hangs
"""

BASH_JOB = """#!/bin/bash
#SBATCH --hang-timeout=0:03 --requeue
# bash has no SIGUSR1 handler: the signal's default action would end it, and the script
# would run on to its exit 0
if [ "${{SLURM_RESTART_COUNT:-0}}" != 0 ]; then exit 0; fi
{python} -c "
import time
from muster import progress
for i in range(1, 4):
    progress.step(i)
    time.sleep(0.2)
time.sleep(300)
"
exit 0
"""


def submit(h: Harness, name: str, text: str, *args: str) -> int:
    path = os.path.join(h.workdir, name)
    with open(path, "w") as f:
        f.write(text.format(python=sys.executable))
    os.chmod(path, 0o755)
    return h.sbatch(*args, path)


def evidence(h: Harness, jid: int) -> list[dict[str, Any]]:
    out = h.run(["muster", "hang-evidence", str(jid), "--json"])
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout)["evidence"])


def hung_then_done(h: Harness, jid: int, restarts: int | None = 1) -> dict[str, Any]:
    job = h.wait_job(jid, timeout=90)
    assert job["state"] == "COMPLETED", job["state"]
    assert restarts is None or job["restart_count"] == restarts, job["attempts"]
    assert job["attempts"][0]["outcome"] == "Hung"
    assert "Hung" in (job["system_comment"] or "")
    out = h.run(["sacct", "-j", str(jid), "-D", "-X", "-n", "-P", "-o", "State,Reason,Restarts"])
    assert out.returncode == 0, out.stderr
    first = out.stdout.strip().splitlines()[0].split("|")
    assert first[:2] == ["REQUEUED", "Hung"], out.stdout  # never FAILED, never COMPLETED
    return job


def test_a_python_job_that_reports_three_steps_then_sleeps_is_requeued_as_hung(cluster: Harness) -> None:
    h = cluster
    jid = submit(h, "hang.py", PY_JOB)
    hung_then_done(h, jid)
    records = evidence(h, jid)
    procs = [p for r in records for p in r["processes"]]
    py = [p for p in procs if "python" in p["cmdline"]]  # the script itself (its name: slurm_script)
    assert py and all(p["signalled"] == "SIGUSR1" for p in py)  # muster.progress's handler
    assert 'slurm_script", line 10' in py[0]["python"]  # its stack: in time.sleep(300)
    assert all(p["state"] and p["pid"] for p in procs)
    show = h.run(["scontrol", "show", "job", str(jid)])
    assert f"HangEvidence=attempt=0 processes={records[0]['node']}:" in show.stdout


def test_a_bash_script_that_ignores_sigusr1_is_requeued_as_hung_and_not_killed(cluster: Harness) -> None:
    h = cluster
    jid = submit(h, "hang.sh", BASH_JOB)
    hung_then_done(h, jid)
    procs = [p for r in evidence(h, jid) for p in r["processes"]]
    shell = [p for p in procs if p["cmdline"].startswith("/bin/bash")]
    child = [p for p in procs if "python" in p["cmdline"]]
    assert shell and all(p["signalled"] is None and not p["catches_usr1"] for p in shell)  # never signalled
    assert child and child[0]["signalled"] == "SIGUSR1" and '<string>", line 7' in child[0]["python"]
    assert shell[0]["wchan"]  # read from outside: it waits for its child
    text = h.run(["muster", "hang-evidence", str(jid)])
    assert text.returncode == 0 and "not signalled" in text.stdout and "python stacks" in text.stdout


SECTION_JOB = """#!{python}
#SBATCH --hang-timeout=0:02
import time
from muster import progress
progress.step(1)
with progress.section("checkpoint"):
    time.sleep(12)  # six hang timeouts: slow on purpose
progress.step(2)
"""


def test_a_declared_slow_section_is_not_a_hang(cluster: Harness) -> None:
    h = cluster
    jid = submit(h, "section.py", SECTION_JOB)
    job = h.wait_job(jid, timeout=60)
    assert (job["state"], job["restart_count"]) == ("COMPLETED", 0)
    assert evidence(h, jid) == []


ALWAYS_HANGS = """#!/bin/bash
#SBATCH --hang-timeout=0:03 --requeue
if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 2 ]; then exit 0; fi
{python} -c "
import time
from muster import progress
progress.step(1)
time.sleep(300)
"
"""


def test_a_job_that_hangs_on_two_nodes_drains_neither(cluster: Harness) -> None:
    h = cluster
    jid = submit(h, "always.sh", ALWAYS_HANGS)
    seen: list[str] = []

    def ran_twice() -> bool:
        job = h.job(jid)
        if job["state"] == "RUNNING" and len(seen) == job["restart_count"]:
            seen.append(job["alloc"][0]["node"])
        return len(seen) >= 2

    wait_for(ran_twice, 120, interval=0.1, what="the job to run on two nodes, one after the other")
    job = h.wait_job(jid, timeout=90)
    assert job["restart_count"] == 2 and [a["outcome"] for a in job["attempts"][:2]] == ["Hung", "Hung"]
    assert seen[0] != seen[1]  # it hung on node A, then on node B
    states = h.node_states()
    assert all("DRAIN" not in states[n] for n in seen), states


RANKS_JOB = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1 --hang-timeout=0:03 --requeue
if [ "${{SLURM_RESTART_COUNT:-0}}" != 0 ]; then exit 0; fi
srun {python} -c "
import time
from muster import progress
for i in range(1, 4):
    progress.step(i)
    time.sleep(0.2)
time.sleep(300)
"
"""


def test_evidence_comes_from_every_rank_on_every_node(cluster: Harness) -> None:
    h = cluster
    jid = submit(h, "ranks.sh", RANKS_JOB)
    # (its next attempt may start on a node where the hung one is still being killed: that
    # launch is refused and the attempt ends NODE_FAIL, a third one completes)
    hung_then_done(h, jid, restarts=None)
    records = evidence(h, jid)
    ranks = {
        r["node"]: [p for p in r["processes"] if p["cmdline"].startswith(sys.executable) and "srun" not in p["cmdline"]]
        for r in records
    }
    assert len(ranks) == 2, records  # both nodes answered
    sruns = [p for r in records for p in r["processes"] if "/srun" in p["cmdline"]]
    assert sruns and all(p["catches_usr1"] and p["signalled"] is None for p in sruns)  # it would forward it
    for node, procs in ranks.items():
        assert procs and all(p["signalled"] == "SIGUSR1" and "line 7" in p["python"] for p in procs), node
