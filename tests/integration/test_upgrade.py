"""The upgrade procedure of docs/upgrade.md, end to end: muster 0.2.0 (release N-1, tag
v0.2.0 on commit 22f68a7) upgraded to this release and the controller rolled back, with a
job running and jobs pending (issue 34, item 6).

The old release is its wheel, built from its commit and installed into a temporary
directory (``oldrelease``: ``git archive``, ``pip wheel --no-build-isolation`` with this
venv's hatchling, ``pip install --no-deps --target``); its daemons and commands run with
this venv's Python and ``PYTHONPATH`` on that directory (the two releases' dependencies are
the same).

Steps, as docs/upgrade.md "Upgrade procedure" and "Rolling back" say: a 0.2.0 controller and
three 0.2.0 agents; a batch job whose 3-node srun step prints numbered lines, and pending
jobs (held, with priorities set by scontrol, one with an afterok dependency); ``muster
backup``; the controller stopped and today's started on the same state while the step runs;
once the step has ended (the batch script still running), each agent stopped and started as
today's, one at a time; the job let finish; then the controller rolled back to 0.2.0.

What this found, and docs/upgrade.md now says: 0.2.0 and this release share store schema 5,
so the upgrade migrates nothing (no ``muster.db.schema-5`` copy) and the 0.2.0 controller,
rolled back, opens the store as it is (no refusal, no restore needed); a 0.2.0 agent stopped
while an srun step runs on its node cancels that step's tasks there (the second test), so
the agents are upgraded once the steps have ended; and today's agent, registered with
today's controller, must register again when a 0.2.0 controller takes over (it refuses
protocol 3's ``config_hash`` in heartbeats).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

import oldrelease
from harness import Harness
from muster import __version__
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

SHAPE = ClusterShape(nodes=3, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000)
NODES = ("node1", "node2", "node3")
OLD_AGENT_VERSION = "0.1.0"  # what 0.2.0's agents say of themselves (its __init__)
LINES = 20  # each task of the step prints this many numbered lines, one a second
SACCT = ("-P", "-n", "-X", "-o", "JobID,JobName,Partition,State,ExitCode,NNodes,Submit,Start,End")

SCRIPT = f"""#!/bin/bash
#SBATCH -N 3
#SBATCH -o runner-%j.out
srun -N 3 -n 3 -o step-%j-%t.out bash -c 'for i in $(seq 1 {LINES}); do echo "$SLURM_PROCID $i"; sleep 1; done'
echo "step rc $?"
while [ ! -e release ]; do sleep 0.2; done
echo "batch done"
"""


@pytest.fixture(scope="module")
def old_src() -> Iterator[str]:
    yield from oldrelease.unpack_old_src()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(SHAPE, tls=False)
    try:
        yield h
    finally:
        h.down()


def _wait(h: Harness, check: Any, what: str, timeout: float = 60.0) -> Any:
    return oldrelease.wait(check, what, h, timeout=timeout, logs=NODES)


def _old(h: Harness, old_src: str, command: str, *args: str) -> str:
    out = oldrelease.old_command(h, old_src, command, *args)
    assert out.returncode == 0, f"0.2.0's {command} {args}: {out.stderr}"
    return out.stdout


def _submit(h: Harness, old_src: str, *args: str) -> int:
    return int(_old(h, old_src, "sbatch", "--parsable", *args).strip().split(";")[0])


def _nodes(h: Harness) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in h.cluster.api("GET", "/v1/nodes")["nodes"]}


def _all_up(h: Harness, version: dict[str, str]) -> Any:
    """Every node registered, answering, with its agent of ``version[node]``."""
    return _wait(
        h,
        lambda: all(
            (n := _nodes(h)[name])["registered"] and n["state"] not in ("DOWN", "UNKNOWN") and n["version"] == v
            for name, v in version.items()
        ),
        f"the nodes never all registered as {version}",
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """As systemctl stop does: SIGTERM, and wait for the daemon to exit (0.2.0's controller
    dies of the signal, today's exits 0)."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) in (0, -signal.SIGTERM), proc.returncode


def _pending_view(h: Harness, old_src: str, ids: list[int]) -> str:
    """0.2.0's squeue of ``ids``: id, state, priority, dependency, reason (the same command
    before and after, against either controller)."""
    return _old(h, old_src, "squeue", "-h", "-j", ",".join(map(str, ids)), "-o", "%i %T %Q %E %r")


def test_upgrade_then_roll_the_controller_back(harness: Harness, old_src: str) -> None:
    h = harness
    h.cluster.create(h.shape, h.settings)
    db = os.path.join(h.cluster.config().state_save_location, "muster.db")
    # --- a 0.2.0 cluster: controller and 3 agents
    ctld = oldrelease.spawn_ctld(h, old_src)
    agents = {name: oldrelease.spawn_agent(h, name, old_src) for name in NODES}
    _all_up(h, dict.fromkeys(NODES, OLD_AGENT_VERSION))
    # jobs that end before the upgrade: their accounting must not change
    ended = [_submit(h, old_src, "--wrap", "echo ok"), _submit(h, old_src, "--wrap", "exit 3")]
    for job_id in ended:
        _wait(h, lambda j=job_id: h.job(j)["state"] in ("COMPLETED", "FAILED") and not h.job(j)["completing"], "end")
    # pending jobs: two held with priorities set by scontrol, one depending on the first
    held = [_submit(h, old_src, "-H", "--wrap", "echo held"), _submit(h, old_src, "-H", "--wrap", "echo held2")]
    _old(h, old_src, "scontrol", "update", f"JobId={held[0]}", "Priority=5000")
    _old(h, old_src, "scontrol", "update", f"JobId={held[1]}", "Priority=7000")
    dep = _submit(h, old_src, f"--dependency=afterok:{held[0]}", "--wrap", "echo dep")
    pending = [*held, dep]
    # the running job: a 3-node srun step, then the batch script waits for a file
    with open(os.path.join(h.workdir, "runner.sh"), "w") as f:
        f.write(SCRIPT)
    runner = _submit(h, old_src, "runner.sh")
    step_out = [os.path.join(h.workdir, f"step-{runner}-{t}.out") for t in range(3)]
    _wait(h, lambda: all(os.path.exists(p) and os.path.getsize(p) > 0 for p in step_out), "the step never printed")
    before = _pending_view(h, old_src, pending)
    sacct_before = _old(h, old_src, "sacct", "-j", ",".join(map(str, ended)), *SACCT)
    assert len(sacct_before.splitlines()) == 2, sacct_before
    # --- 1. before: muster backup (0.2.0's)
    backup = os.path.join(h.root, "before-upgrade.db")
    _old(h, old_src, "muster", "backup", backup)
    # --- 2. the controller: stop 0.2.0's, start today's on the same state
    _stop(ctld)
    ctld = oldrelease.spawn_ctld(h, None)
    _all_up(h, dict.fromkeys(NODES, OLD_AGENT_VERSION))
    assert _pending_view(h, old_src, pending) == before
    assert _old(h, old_src, "sacct", "-j", ",".join(map(str, ended)), *SACCT) == sacct_before
    # 0.2.0 and this release share store schema 5: nothing migrated, no schema-N copy kept
    assert _meta(db)["schema_version"] == "5"
    assert "upgraded_from_schema" not in _meta(db)
    assert not os.path.exists(db + ".schema-5")
    # the step goes on under today's controller, to its end
    _wait(
        h,
        lambda: "step rc" in h.read(f"runner-{runner}.out"),
        "the step never ended",
        timeout=LINES + 60,
    )
    # --- 3. the agents, one at a time, while the batch script runs
    version = dict.fromkeys(NODES, OLD_AGENT_VERSION)
    for name in NODES:
        _stop(agents[name])
        agents[name] = oldrelease.spawn_agent(h, name, None)
        version[name] = __version__
        _all_up(h, version)
        assert h.job(runner)["state"] == "RUNNING", oldrelease.log(h, name)
    with open(os.path.join(h.workdir, "release"), "w"):
        pass
    job = _wait(h, lambda: (j := h.job(runner))["state"] != "RUNNING" and not j["completing"] and j, "runner")
    assert job["state"] == "COMPLETED", job
    assert h.read(f"runner-{runner}.out") == "step rc 0\nbatch done\n"
    for t, path in enumerate(step_out):
        with open(path) as f:
            assert f.read() == "".join(f"{t} {i}\n" for i in range(1, LINES + 1)), path
    assert _pending_view(h, old_src, pending) == before
    # --- rolling back the controller: stop today's, start 0.2.0's
    # (the same schema: 0.2.0 opens the store as it is, no restore needed; a release that
    # changes the schema is refused by the older controller, and the backup restored)
    _stop(ctld)
    ctld = oldrelease.spawn_ctld(h, old_src)
    _all_up(h, version)  # today's agents register again, in protocol 2
    for name in NODES:
        assert "registering in protocol 2" in oldrelease.log(h, name), oldrelease.log(h, name)
    assert _pending_view(h, old_src, pending) == before
    assert _old(h, old_src, "sacct", "-j", ",".join(map(str, ended)), *SACCT) == sacct_before
    # the running job ran once: one accounting record, COMPLETED
    runs = _old(h, old_src, "sacct", "-j", str(runner), *SACCT).splitlines()
    assert len(runs) == 1 and runs[0].split("|")[3] == "COMPLETED", runs
    # and the pending jobs still run in their order: the held one released, its dependant after it
    _old(h, old_src, "scontrol", "release", str(held[0]))
    for job_id in (held[0], dep):
        _wait(
            h, lambda j=job_id: "COMPLETED" in _old(h, old_src, "sacct", "-n", "-X", "-j", str(j), "-o", "State"), "ran"
        )
    # the backup taken before the upgrade holds the store as it was
    assert _meta(backup)["schema_version"] == "5"


def _meta(path: str) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()


def test_restarting_a_v020_agent_cancels_the_steps_on_its_node_not_the_job(harness: Harness, old_src: str) -> None:
    """Why the procedure upgrades a 0.2.0 agent only once the srun steps on its node have
    ended: 0.2.0's agent runs a step's tasks itself (today's step supervisors outlive the
    agent), so stopping it cancels them (srun: ``STEP N.0 ON node2 CANCELLED ... DUE TO
    MUSTERD SHUTDOWN``, the step CANCELLED); the batch script outlives it and goes on."""
    h = harness
    h.cluster.create(h.shape, h.settings)
    oldrelease.spawn_ctld(h, old_src)
    agents = {name: oldrelease.spawn_agent(h, name, old_src) for name in NODES[:2]}
    _all_up(h, dict.fromkeys(NODES[:2], OLD_AGENT_VERSION))
    with open(os.path.join(h.workdir, "cut.sh"), "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -o cut-%j.out\n"
            "srun -N 2 -n 2 -o cut-%j-%t.out bash -c 'for i in $(seq 1 12); do echo $i; sleep 1; done'\n"
            'echo "step rc $?"\n'
        )
    job_id = _submit(h, old_src, "cut.sh")
    first = os.path.join(h.workdir, f"cut-{job_id}-1.out")
    _wait(h, lambda: os.path.exists(first) and os.path.getsize(first) > 0, "the step never printed")
    _stop(agents["node2"])
    agents["node2"] = oldrelease.spawn_agent(h, "node2", None)
    job = _wait(h, lambda: (j := h.job(job_id))["state"] != "RUNNING" and not j["completing"] and j, "job")
    assert job["state"] == "COMPLETED", job  # the batch script's last command succeeded
    out = h.read(f"cut-{job_id}.out")
    assert f"STEP {job_id}.0 ON node2 CANCELLED" in out and "DUE TO MUSTERD SHUTDOWN" in out, out
    assert out.endswith("step rc 143\n"), out
    steps = _old(h, old_src, "sacct", "-n", "-P", "-j", str(job_id), "-o", "JobID,State")
    assert f"{job_id}.0|CANCELLED" in steps.splitlines(), steps
    assert len(h.read(f"cut-{job_id}-1.out").splitlines()) < 12


def test_an_agent_rolled_back_to_v020_takes_back_its_batch_job(harness: Harness, old_src: str) -> None:
    """Rolling back, Agents: today's agent replaced by 0.2.0's while a batch job runs on its
    node (today's controller): the old agent re-attaches the job, which completes once."""
    h = harness
    h.cluster.create(h.shape, h.settings)
    oldrelease.spawn_ctld(h, None)
    agent = oldrelease.spawn_agent(h, "node1", None)
    _all_up(h, {"node1": __version__})
    job_id = h.sbatch(
        "-w", "node1", "-o", "back-%j.out", "--wrap", "echo start; while [ ! -e go ]; do sleep 0.2; done; echo end"
    )
    out = os.path.join(h.workdir, f"back-{job_id}.out")
    _wait(h, lambda: os.path.exists(out) and "start" in h.read(out), "the job never started")
    _stop(agent)
    agent = oldrelease.spawn_agent(h, "node1", old_src)
    _all_up(h, {"node1": OLD_AGENT_VERSION})
    assert h.job(job_id)["state"] == "RUNNING"
    with open(os.path.join(h.workdir, "go"), "w"):
        pass
    job = _wait(h, lambda: (j := h.job(job_id))["state"] != "RUNNING" and not j["completing"] and j, "job")
    assert job["state"] == "COMPLETED", (job, oldrelease.log(h, "node1"))
    assert h.read(f"back-{job_id}.out") == "start\nend\n"
    assert job["restart_count"] == 0
