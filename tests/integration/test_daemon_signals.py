"""The daemons under signals, as Slurm's (docs/operations.md, "Signals"): SIGHUP
reconfigures, SIGUSR2 reopens the log file logrotate moved away, SIGTERM stops quickly even
with kept-alive connections open; one controller per state directory (a lock), which
``muster restore`` takes too; and the controller's files are private whatever the umask
(docs/security.md, "Files")."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

import waiting
from harness import Harness, ensure_user, process_running
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

V = "/slurm/v0.0.40"
OTHER_USER = "mustersig"


def wait_for(what: str, check: Callable[[], object], timeout: float = 30) -> object:
    return waiting.wait_for(check, timeout, what=what)


def text(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(scope="module")
def umask0_cluster() -> Iterator[Harness]:
    """A cluster whose daemons were started under umask 000."""
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    old = os.umask(0)
    try:
        h.up()
    finally:
        os.umask(old)
    try:
        yield h
    finally:
        h.down()


def log_path(h: Harness, name: str) -> str:
    return os.path.join(h.cluster.state_dir, "log", f"{name}.log")


def hup_agent(h: Harness, name: str, pid: int) -> str:
    """SIGHUP to ``name``'s agent, and its reconfigure line once it has read the file: a test
    that changes the configuration waits for this before the next one changes it again (a
    signal handled late would apply the next test's file)."""
    said = f"reconfigure: node {name}: "

    def lines() -> list[str]:
        return [line.split(said, 1)[1] for line in text(log_path(h, name)).splitlines() if said in line]

    before = len(lines())
    os.kill(pid, signal.SIGHUP)
    wait_for(f"{name}'s reconfigure line", lambda: len(lines()) > before)
    return lines()[before]


def ctld_pid(h: Harness) -> int:
    pid = h.cluster._alive("musterctld")
    assert pid is not None
    return pid


def test_sighup_reconfigures_the_controller_which_stays_up_and_keeps_its_jobs(umask0_cluster: Harness) -> None:
    h = umask0_cluster
    pid = ctld_pid(h)
    held = h.sbatch("-H", "-J", "kept", "--wrap", "true")
    with open(h.cluster.conf_path) as f:
        original = f.read()
    assert "PriorityWeightPartition" not in original
    try:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original + "PriorityWeightPartition=4321\n")
        os.kill(pid, signal.SIGHUP)
        wait_for(
            "the new value in scontrol show config",
            lambda: re.search(r"PriorityWeightPartition\s*=\s*4321", h.run(["scontrol", "show", "config"]).stdout),
        )
        assert h.cluster._alive("musterctld") == pid
        assert h.job(held)["state"] == "PENDING"
        # the lines scontrol reconfigure logs
        assert "reconfigure: PriorityWeightPartition (null) -> 4321" in text(log_path(h, "musterctld"))

        # a file that does not parse: logged, the running configuration kept, still up
        with open(h.cluster.conf_path, "w") as f:
            f.write(original + "PriorityWeightPartition=4321\nNodeName=\n")
        os.kill(pid, signal.SIGHUP)
        wait_for(
            "the refusal in the log", lambda: "SIGHUP: the configuration is refused" in text(log_path(h, "musterctld"))
        )
        assert h.cluster._alive("musterctld") == pid
        assert re.search(r"PriorityWeightPartition\s*=\s*4321", h.run(["scontrol", "show", "config"]).stdout)
    finally:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original)
        os.kill(pid, signal.SIGHUP)
        wait_for(  # applied before the next test changes the file again
            "the value gone from scontrol show config",
            lambda: "4321" not in h.run(["scontrol", "show", "config"]).stdout,
        )
        h.run(["scancel", str(held)])


def rotate(path: str) -> str:
    """What logrotate does without copytruncate: the file moved away, the daemon told."""
    moved = f"{path}.1"
    os.replace(path, moved)
    return moved


@pytest.mark.parametrize("daemon", ["musterctld", "node1"])
def test_sigusr2_reopens_a_log_file_moved_away(umask0_cluster: Harness, daemon: str) -> None:
    h = umask0_cluster
    pid = ctld_pid(h) if daemon == "musterctld" else h.agent_pid(daemon)
    path = log_path(h, daemon)
    moved = rotate(path)
    os.kill(pid, signal.SIGUSR2)
    wait_for("a new log file", lambda: "SIGUSR2: log file" in text(path))
    assert f"SIGUSR2: log file {path} reopened" in text(path)
    assert mode(path) == 0o600  # created by the daemon, under umask 000
    assert process_running(pid)
    if daemon == "musterctld":  # later lines go to the new file
        h.run(["scontrol", "reconfigure"])
        wait_for("a later line in the new file", lambda: "reconfigure" in text(path).split("reopened", 1)[1])
    assert "SIGUSR2" not in text(moved)
    os.unlink(moved)


def test_sighup_gives_the_agent_a_new_prolog(umask0_cluster: Harness) -> None:
    h = umask0_cluster
    pid = h.agent_pid("node1")
    marker = os.path.join(h.root, "prolog-ran")
    prolog = os.path.join(h.root, "prolog.sh")
    with open(prolog, "w") as f:
        f.write(f"#!/bin/sh\necho $SLURM_JOB_ID >> {marker}\n")
    os.chmod(prolog, 0o755)
    with open(h.cluster.conf_path) as f:
        original = f.read()
    try:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original + f"Prolog={prolog}\n")
        assert hup_agent(h, "node1", pid) == "Prolog applied"
        job = h.sbatch("-w", "node1", "--wrap", "true")
        try:
            ended = h.wait_job(job)
        except AssertionError:
            raise AssertionError(f"{h.job(job)}; nodes {h.node_states()}") from None
        assert ended["state"] == "COMPLETED", ended
        assert text(marker).split() == [str(job)]
        assert h.agent_pid("node1") == pid
    finally:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original)
        assert hup_agent(h, "node1", pid) == "Prolog applied"


def test_sighup_starts_a_health_check_program_on_an_agent_that_had_none(umask0_cluster: Harness) -> None:
    # issue 37: the health loop ended at start when no program was configured
    h = umask0_cluster
    pid = h.agent_pid("node1")
    marker = os.path.join(h.root, "health-ran")
    program = os.path.join(h.root, "health.sh")
    with open(program, "w") as f:
        f.write(f"#!/bin/sh\necho $SLURMD_NODENAME >> {marker}\n")
    os.chmod(program, 0o755)
    with open(h.cluster.conf_path) as f:
        original = f.read()
    assert "HealthCheckProgram" not in original
    try:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original + f"HealthCheckProgram={program}\nHealthCheckInterval=1\n")
        assert hup_agent(h, "node1", pid) == "HealthCheckProgram, HealthCheckInterval applied"
        wait_for("the health check program to run", lambda: text(marker).split()[:1] == ["node1"])
        wait_for("its next run, on its interval", lambda: len(text(marker).split()) >= 2)
        assert set(text(marker).split()) == {"node1"}  # node2's agent was not reconfigured
        assert h.agent_pid("node1") == pid
        assert h.node_states()["node1"] in ("IDLE", "MIXED", "ALLOCATED")  # it passed: not drained
    finally:
        with open(h.cluster.conf_path, "w") as f:
            f.write(original)
        assert hup_agent(h, "node1", pid) == "HealthCheckProgram, HealthCheckInterval applied"  # removed


def _get(sock: str, path: str) -> tuple[int, dict[str, object]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(sock)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_musterrestd_rereads_its_configuration_on_sighup_and_reopens_its_log_on_sigusr2(
    umask0_cluster: Harness,
) -> None:
    h = umask0_cluster
    conf = os.path.join(h.root, "rest.conf")  # its own copy: the cluster's other tests keep theirs
    with open(h.cluster.conf_path) as f:
        original = f.read()
    with open(conf, "w") as f:
        f.write(original)
    sock = os.path.join(h.root, "rest.sock")
    log = os.path.join(h.root, "rest.log")
    proc = subprocess.Popen(
        [sys.executable, "-m", "muster.rest.main", "-f", conf, "-a", "rest_auth/jwt", "-L", log, f"unix:{sock}"],
        env=h.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for("musterrestd's socket", lambda: os.path.exists(sock) or proc.poll() is not None)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        code, body = _get(sock, f"{V}/ping")
        assert code == 401 and body["meta"]["slurm"]["cluster"] == "muster"  # type: ignore[index]

        with open(conf, "w") as f:
            f.write(original.replace("ClusterName=muster", "ClusterName=renamed"))
        proc.send_signal(signal.SIGHUP)
        wait_for("the new ClusterName", lambda: _get(sock, f"{V}/ping")[1]["meta"]["slurm"]["cluster"] == "renamed")  # type: ignore[index]
        assert "reconfigure: " in text(log) and "ClusterName=renamed" in text(log)

        moved = rotate(log)
        proc.send_signal(signal.SIGUSR2)
        wait_for("a new log file", lambda: "SIGUSR2: log file" in text(log))
        assert mode(log) == 0o600 and "SIGUSR2" not in text(moved)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "SIGTERM: stopping" in text(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_controllers_files_are_private_whatever_the_umask(umask0_cluster: Harness) -> None:
    h = umask0_cluster
    cfg = h.cluster.config()
    state = cfg.state_save_location
    db = os.path.join(state, "muster.db")
    h.sbatch("-H", "--wrap", "echo secret")  # something in the store and its -wal
    wait_for("the -wal and -shm files", lambda: os.path.exists(f"{db}-wal") and os.path.exists(f"{db}-shm"))
    # 0711, not 0700: the controller's Unix socket (CtldSocket) is in it, and users reach it by name
    assert mode(state) == 0o711
    for name in (db, f"{db}-wal", f"{db}-shm", os.path.join(state, "musterctld.lock")):
        assert mode(name) == 0o600, name
    backup = os.path.join(h.root, "state.backup")
    old = os.umask(0)
    try:
        run = h.run([sys.executable, "-m", "muster.cli.muster", "backup", backup])
    finally:
        os.umask(old)
    assert run.returncode == 0, run.stderr
    assert mode(backup) == 0o600

    uid = ensure_user(OTHER_USER)
    for path in (db, f"{db}-wal", f"{db}-shm", backup):
        denied = h.run(["cat", path], uid=uid)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, path
    listing = h.run(["ls", state], uid=uid)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    # ... while the user's commands still reach the controller through its socket
    assert h.run(["squeue", "-h"], uid=uid).returncode == 0


def _keepalive(connect: Callable[[], socket.socket], request: bytes) -> socket.socket:
    s = connect()
    s.sendall(request)
    s.settimeout(10)
    assert s.recv(65536).startswith(b"HTTP/1.1")  # answered; the connection stays open
    return s


def test_sigterm_stops_the_controller_quickly_and_one_controller_holds_its_state_dir() -> None:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    opened: list[socket.socket] = []
    second: subprocess.Popen[str] | None = None
    try:
        cfg = h.cluster.config()
        pid = ctld_pid(h)
        backup = os.path.join(h.root, "state.backup")
        run = h.run([sys.executable, "-m", "muster.cli.muster", "backup", backup])
        assert run.returncode == 0, run.stderr

        # A second controller on the same state directory is refused, naming the first.
        again = h.run([sys.executable, "-m", "muster.ctld.main", "--conf", h.cluster.conf_path], timeout=60)
        assert again.returncode == 1
        lock = os.path.join(cfg.state_save_location, "musterctld.lock")
        assert f"musterctld: error: musterctld (pid {pid}) holds {lock}" in again.stderr
        assert h.cluster._alive("musterctld") == pid and h.run(["squeue"]).returncode == 0

        # So is muster restore.
        refused = h.run([sys.executable, "-m", "muster.cli.muster", "restore", backup])
        assert refused.returncode == 1
        assert f"musterctld (pid {pid}) runs on {cfg.state_save_location}; stop it before restoring" in refused.stderr

        # Kept-alive connections: clients' on the Unix socket and TCP (idle), one sending
        # half a request; the agents' heartbeats keep theirs.
        ping = b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"
        unix = cfg.ctld_socket_for(0)
        tcp = (cfg.ctld_addrs[0][1], cfg.ctld_port)

        def on_tcp() -> socket.socket:  # over TLS where the cluster's links are (MUSTER_TEST_TLS=1)
            s = socket.create_connection(tcp)
            if not cfg.tls.enabled:
                return s
            ctx = ssl.create_default_context(cafile=cfg.tls.ca_cert)
            ctx.check_hostname = False  # the controller's certificate names "ctld", not an address
            return ctx.wrap_socket(s)

        def on_unix() -> socket.socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(unix)
            return s

        opened += [_keepalive(on_unix, ping) for _ in range(3)]
        opened.append(_keepalive(on_tcp, ping))
        half = on_tcp()
        half.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        opened.append(half)

        started = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        wait_for("the controller to stop", lambda: not process_running(pid), timeout=10)
        took = time.monotonic() - started
        print(f"musterctld stopped {took:.2f} s after SIGTERM with {len(opened)} client connections open")
        assert "SIGTERM: stopping" in text(log_path(h, "musterctld"))

        # An agent with half a request on its port stops too (its jobs would keep running).
        agent = h.agent_pid("node1")
        node = cfg.node("node1")
        assert node is not None
        to_agent = socket.create_connection((node.addr, node.port))
        if cfg.tls.enabled:
            ctx = ssl.create_default_context(cafile=cfg.tls.ca_cert)
            ctx.check_hostname = False
            to_agent = ctx.wrap_socket(to_agent)
        to_agent.sendall(b"POST /v1/launch HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        opened.append(to_agent)
        started = time.monotonic()
        os.kill(agent, signal.SIGTERM)
        wait_for("the agent to stop", lambda: not process_running(agent), timeout=10)
        print(f"musterd stopped {time.monotonic() - started:.2f} s after SIGTERM with half a request open")

        # The state directory is free again: a controller starts on it, and exits 0 on SIGTERM.
        second = subprocess.Popen(
            [sys.executable, "-m", "muster.ctld.main", "--conf", h.cluster.conf_path],
            env=h.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for("the new controller", lambda: second.poll() is not None or h.run(["squeue"]).returncode == 0, 60)
        assert second.poll() is None, second.stderr.read() if second.stderr else ""
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=10) == 0
    finally:
        for s in opened:
            s.close()
        if second is not None and second.poll() is None:
            second.kill()
            second.wait()
        h.down()
