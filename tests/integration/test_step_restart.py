"""Issue 33 item 1 with real daemons: job steps outlive their agent. A restarted agent takes
each step back from its supervisor (``agent.stepd``), srun reconnects and gets the output it
missed, once, and the ends written while no agent ran are delivered once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import Harness, process_running, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    # SlurmdTimeout well above a restart: the nodes stay up while their agents restart
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=1, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "60", "KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


@pytest.fixture(autouse=True)
def steps_accepted(cluster: Harness) -> None:
    """Every agent answers steps again after an earlier test's restarts."""
    wait_until(lambda: cluster.run(["srun", "-N3", "true"]).returncode == 0, "steps accepted on every node")


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    return wait_for(check, timeout, what=what)


def answers(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=1).close()
    except OSError:
        return False
    return True


def restart_agent(h: Harness, node: str, sig: int = signal.SIGTERM) -> None:
    """Stop ``node``'s agent with ``sig`` and start it again with the same command line
    and state directory (what ``systemctl restart musterd`` does)."""
    pid = h.agent_pid(node)
    os.kill(pid, sig)
    wait_until(lambda: not process_running(pid), f"the agent of {node} to stop")
    h.cluster.start()
    wait_until(lambda: h.cluster.node_pid(node), f"the agent of {node} to run again")


class Lines:
    """srun's stdout, read as it comes (in a thread: the test restarts agents meanwhile)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def of(self, rank: int) -> list[str]:
        with self._lock:
            return [x.split(" ", 1)[1] for x in self.lines if x.split(" ", 1)[0] == str(rank)]

    def join(self) -> None:
        self._thread.join(timeout=30)


def srun(h: Harness, *argv: str, err: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["srun", *argv],
        cwd=h.workdir,
        env=h.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )


def test_a_three_node_step_keeps_running_while_each_agent_is_restarted_in_turn(cluster: Harness) -> None:
    h = cluster
    stop, jobid = os.path.join(h.workdir, "turns-stop"), os.path.join(h.workdir, "turns-jobid")
    # each rank prints numbered lines until told to stop, then "end"
    script = (
        f'[ "$SLURM_PROCID" = 0 ] && echo $SLURM_JOB_ID > {jobid}; i=0; '
        f'while [ ! -e {stop} ]; do i=$((i+1)); echo "$SLURM_PROCID $i"; sleep 0.02; done; '
        'echo "$SLURM_PROCID end"'
    )
    errfile = open(os.path.join(h.workdir, "turns-err"), "w+")  # noqa: SIM115 - closed below
    proc = srun(h, "-N3", "-n3", "sh", "-c", script, err=errfile)
    out = Lines(proc)
    try:
        wait_until(lambda: all(out.of(r) for r in range(3)), "every rank's first line")
        job_id = int(h.read(jobid))
        nodes = [a["node"] for a in h.job(job_id)["alloc"]]
        assert len(nodes) == 3
        for node in nodes:
            rank = nodes.index(node)
            before = len(out.of(rank))
            restart_agent(h, node)
            # its rank's output goes on reaching srun through the new agent
            wait_until(
                lambda r=rank, n=before: len(out.of(r)) > n + 20, f"output of rank {rank} after {node} restarted"
            )
            assert proc.poll() is None
        with open(stop, "w"):
            pass
        proc.wait(timeout=60)
        out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errfile.seek(0)
        err = errfile.read()
        errfile.close()
    assert proc.returncode == 0, err
    for rank in range(3):
        lines = out.of(rank)
        assert lines[-1] == "end", (rank, lines[-5:])
        numbers = [int(x) for x in lines[:-1]]
        assert numbers == list(range(1, len(numbers) + 1)), f"rank {rank}: lines lost, repeated or out of order"
    assert h.wait_job(job_id)["state"] == "COMPLETED"
    assert "CANCELLED" not in err


def test_a_step_started_right_after_its_agent_restarted_runs_although_signed_before_the_floor(
    cluster: Harness,
) -> None:
    """Issue 37: the persisted replay limit runs ahead of the last message (FLOOR_STEP), so
    a grant the controller signs right after a restart can be older than the new floor.
    Here the limit is pushed 10 s ahead while the agent is down: every grant signed in the
    next 10 s is "before the floor", and the step still runs at the first try (grants are
    refused when used before, ``protocol.replay.GrantLedger``, not when old)."""
    h, node = cluster, "node3"
    pid = h.agent_pid(node)
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not process_running(pid), f"the agent of {node} to stop")
    with open(os.path.join(h.cluster.state_dir, "nodes", node, "replay-floor"), "w") as f:
        f.write(f"{time.time() + 10:.3f}\n")
    h.cluster.start()
    conf = next(n for n in h.cluster.config().nodes if n.name == node)
    wait_until(lambda: answers(conf.addr, conf.port), f"the agent of {node} to answer again")
    r = h.run(["srun", "-N1", "-w", node, "echo", "ran"])
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr
    ledger = h.read(os.path.join(h.cluster.state_dir, "nodes", node, "step-grants"))
    assert ledger.startswith("ledger ") and len(ledger.splitlines()) >= 2  # the grant is noted


def test_a_step_that_ends_while_its_agent_is_killed_is_reported_once_when_it_returns(cluster: Harness) -> None:
    h = cluster
    go, pidfile = os.path.join(h.workdir, "end-go"), os.path.join(h.workdir, "end-pid")
    script = (
        f'echo $$ > {pidfile}; echo "first words"; while [ ! -e {go} ]; do sleep 0.02; done; echo "last words"; exit 3'
    )
    proc = srun(h, "-J", "ends-alone", "-N1", "-w", "node2", "sh", "-c", script)
    try:
        task = int(wait_until(lambda: os.path.exists(pidfile) and h.read(pidfile).strip(), "the task to start"))
        pid = h.agent_pid("node2")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not process_running(pid), "the agent to die")
        with open(go, "w"):
            pass
        wait_until(lambda: not process_running(task), "the task to end while no agent runs")
        h.cluster.start()
        stdout, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, err
    assert stdout.splitlines() == ["first words", "last words"]
    assert err.count("task 0: Exited with exit code 3") == 1, err
    jobs = h.cluster.api("GET", "/v1/jobs?name=ends-alone&all=1")["jobs"]
    job = max(jobs, key=lambda j: j["job_id"])
    assert job["state"] == "FAILED" and job["exit_code"] == 3


def test_a_batch_jobs_srun_ranks_outlive_a_restart_of_every_agent(cluster: Harness) -> None:
    """The operator's case: a training job whose ranks are srun steps of a batch script."""
    h = cluster
    stop, out = os.path.join(h.workdir, "batch-stop"), "batch-ranks-%j.out"
    rank = f'i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo "$SLURM_PROCID $i"; sleep 0.02; done; echo "$SLURM_PROCID end"'
    job_id = h.sbatch("-N2", "-n2", "-o", out, "--wrap", f"srun sh -c '{rank}'")
    job = h.wait_state(job_id, "RUNNING")
    path = os.path.join(h.workdir, f"batch-ranks-{job_id}.out")

    def lines(r: int) -> list[str]:
        text = h.read(path) if os.path.exists(path) else ""
        return [x.split(" ", 1)[1] for x in text.splitlines() if x.split(" ", 1)[0] == str(r)]

    wait_until(lambda: lines(0) and lines(1), "both ranks' first lines")
    for node in [a["node"] for a in job["alloc"]]:
        before = [len(lines(r)) for r in (0, 1)]
        restart_agent(h, node)
        wait_until(lambda b=before: all(len(lines(r)) > b[r] + 20 for r in (0, 1)), f"output after {node} restarted")
    with open(stop, "w"):
        pass
    assert h.wait_job(job_id)["state"] == "COMPLETED"
    for r in (0, 1):
        got = lines(r)
        assert got[-1] == "end"
        assert [int(x) for x in got[:-1]] == list(range(1, len(got)))
    assert "CANCELLED" not in h.read(path)


def test_stdin_streams_as_it_comes_and_a_restart_ends_it_without_waiting_for_srun(cluster: Harness) -> None:
    """srun's stdin reaches the task line by line (not once srun's input ends), and an
    agent stopped while that stream is open stops at once: the task's input ends with
    the agent (it is not carried to the next one), the step goes on and ends well."""
    h = cluster
    script = 'read a; echo "got $a"; while read b; do echo "more $b"; done; echo "input over"'
    proc = subprocess.Popen(
        ["srun", "-N1", "-w", "node3", "sh", "-c", script],
        cwd=h.workdir,
        env=h.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    out = Lines(proc)
    assert proc.stdin is not None
    try:
        proc.stdin.write("first\n")
        proc.stdin.flush()
        wait_until(lambda: "got first" in out.lines, "the first line to reach the task while stdin is open")
        restart_agent(h, "node3")  # returns once the old agent is gone: the open stream held nothing
        wait_until(lambda: "input over" in out.lines, "the task to see the end of its input")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.lines == ["got first", "input over"]


@pytest.fixture
def chain() -> Iterator[Harness]:
    """Three nodes in a launch tree of width 1: srun -> node1 -> node2 -> node3."""
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=1, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "60", "KillWait": "2", "TreeWidth": "1", "MessageTimeout": "10"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_step_launched_through_the_tree_outlives_a_restart_of_its_relays(chain: Harness) -> None:
    """Restarting a relay's agent ends the streams it relays; the nodes below keep their
    part of the step for MessageTimeout, and srun asks each of them directly."""
    h = chain
    stop = os.path.join(h.workdir, "chain-stop")
    script = f'i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo "$SLURM_PROCID $i"; sleep 0.02; done; echo "$SLURM_PROCID end"'
    errfile = open(os.path.join(h.workdir, "chain-err"), "w+")  # noqa: SIM115 - closed below
    proc = srun(h, "-v", "-N3", "-n3", "-w", "node[1-3]", "sh", "-c", script, err=errfile)
    out = Lines(proc)
    try:
        wait_until(lambda: all(out.of(r) for r in range(3)), "every rank's first line")
        for node in ("node1", "node2"):  # the head, then the relay below it
            before = [len(out.of(r)) for r in range(3)]
            restart_agent(h, node)
            wait_until(
                lambda b=before: all(len(out.of(r)) > b[r] + 20 for r in range(3)), f"output after {node} restarted"
            )
        with open(stop, "w"):
            pass
        proc.wait(timeout=60)
        out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errfile.seek(0)
        err = errfile.read()
        errfile.close()
    assert proc.returncode == 0, err
    assert "launch tree: TreeWidth=1" in err
    for rank in range(3):
        lines = out.of(rank)
        assert lines[-1] == "end"
        assert [int(x) for x in lines[:-1]] == list(range(1, len(lines)))
