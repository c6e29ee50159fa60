"""Issue 33's day-2 rehearsal: docs/deploy.md followed on network namespaces (tests/netns.py),
then the operations a site performs while a training job runs.

The cluster: two head nodes (``head`` 10.77.0.1, ``head2`` 10.77.0.2) sharing one PostgreSQL
store on a database host (``db``, 10.77.0.3), three GPU nodes (10.77.0.11-13) and a login node
(10.77.0.5) that runs no agent, only the credential daemon. muster is installed as section 1
says, from a wheel built from this checkout into a venv of its own (``--no-deps``: its
dependencies come from the project's venv through a path file, never its ``src/``), with the
commands' launchers; every daemon is started as systemd would start it: ``env -i`` with the
unit's ``Environment=``, cwd ``/``, the unit's ``ExecStart=`` from the wheel's
``share/muster/systemd`` with ``/opt/muster`` replaced by the venv (and a log file, ``-L``,
so that SIGUSR2 has one to reopen; the nodes' GPUs are emulated, so no ``--gpu-detect nvidia``).

The database host: the test's PostgreSQL (``MUSTER_TEST_PG_DSN``) listens on the test
machine's loopback, which no namespace reaches; a forwarder in the test process listens on
``db``'s address (its socket made inside that namespace) and relays to it. Each run gets a
database of its own, dropped at the end.

The scenario, one step per test, in order, on one cluster:

1. the daemons run from the wheel, as their units start them; both heads up, one active;
2. an unprivileged user on the login host submits a 3-node gloo DDP job (examples/train.sbatch:
   the ranks are an srun step inside the batch script), which runs on the three nodes;
3. each agent is stopped (SIGTERM) and started again in turn: the ranks go on;
4. SIGHUP to the active controller (a partition added to the file is served), then SIGUSR2
   (the log file, moved away, is opened again); it stays up;
5. kill -9 of the active controller in the middle of the user's burst of submissions: the
   standby takes over and a job the user submits right after runs (the time from the kill
   to RUNNING is printed); every submission of the burst is acknowledged and runs;
6. the killed head is started again (a standby) and ``scontrol takeover 0``, run on the
   active head node, hands back to it;
7. the DDP job ends COMPLETED, once, without a restart, with every rank's output intact, and
   every submission of the scenario is in the store exactly once.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness import ensure_user
from netns import HEAD_ADDR, SUBNET, NetnsCluster, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
USER = "musterops"
HEAD2_ADDR = f"{SUBNET}.2"
DB_ADDR = f"{SUBNET}.3"
DB_PORT = 5432
CTLD_TIMEOUT = 10  # SlurmctldTimeout
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's default PATH
BOUND = 60.0  # a generous bound on each wait that should take seconds: only so that nothing hangs


# --- the database host ----------------------------------------------------------------


class Forwarder:
    """Relays TCP connections made to ``db``'s address, inside its namespace, to the test's
    PostgreSQL on this machine's loopback (or its Unix socket)."""

    def __init__(self, netns: str, upstream: tuple[int, Any]) -> None:
        self.upstream = upstream  # (family, address)
        self.listener = self._listen_in(netns)
        self.open: list[socket.socket] = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @staticmethod
    def _listen_in(netns: str) -> socket.socket:
        made: list[Any] = []

        def inside() -> None:  # setns moves only this thread; the socket keeps its namespace
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                        raise OSError(ctypes.get_errno(), f"setns {netns}")
                finally:
                    os.close(fd)
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((DB_ADDR, DB_PORT))
                s.listen(64)
                made.append(s)
            except OSError as exc:
                made.append(exc)

        t = threading.Thread(target=inside)
        t.start()
        t.join()
        if isinstance(made[0], OSError):
            raise made[0]
        return made[0]

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.socket(self.upstream[0], socket.SOCK_STREAM)
                server.connect(self.upstream[1])
            except OSError:
                client.close()
                continue
            self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # one side gone: both go, as a dead host's connections do
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.stopped = True
        self.listener.close()
        for s in self.open:
            s.close()


def _pg() -> tuple[dict[str, Any], str] | str:
    """(the DSN's parts, the DSN) of the test's PostgreSQL, or why there is none."""
    dsn = os.environ.get("MUSTER_TEST_PG_DSN")
    if not dsn:
        return "two heads need PostgreSQL: MUSTER_TEST_PG_DSN (a libpq DSN; .ci/run starts one)"
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return "psycopg is not installed (pip install 'muster-wlm[pg]')"
    return dict(conninfo_to_dict(dsn)), dsn


# --- muster from a wheel, daemons as their units start them -----------------------------


def install_wheel(where: str) -> str:
    """docs/deploy.md, section 1: a venv, the wheel built from this checkout, the launchers.
    The venv's dependencies are the project venv's (a path file: no index is reached).

    The wheel is built from a copy of the working tree (the files git tracks or would), at the
    version git gives the checkout: building in place would rewrite the checkout's
    ``_version.py`` under every other muster running from it."""
    import warnings

    import setuptools_scm

    with warnings.catch_warnings():  # the scheme's newer name is not known to every release
        warnings.simplefilter("ignore", DeprecationWarning)
        version = setuptools_scm.get_version(root=str(ROOT), version_scheme="release-branch-semver")
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.split(b"\0")
    tree = os.path.join(where, "src")
    for name in filter(None, (f.decode() for f in files)):
        if os.path.isfile(ROOT / name):  # not one deleted meanwhile
            os.makedirs(os.path.dirname(os.path.join(tree, name)), exist_ok=True)
            shutil.copy2(ROOT / name, os.path.join(tree, name))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", f"{where}/dist", tree],
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version},
    )
    (wheel,) = pathlib.Path(where, "dist").glob("muster_wlm-*.whl")
    venv = f"{where}/opt-muster"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", venv], check=True, capture_output=True, timeout=120)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", f"{venv}/bin/python", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = next(pathlib.Path(venv, "lib").glob("python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    # a plain path line: the project venv's own path files (its editable src/) are not read
    (site / "zz-project-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    subprocess.run([f"{venv}/bin/python", "-I", "-m", "muster.cli.launchers", f"{venv}/bin"], check=True, timeout=300)
    os.chmod(where, 0o755)
    return venv


def unit_command(venv: str, unit: str, log: str | None) -> tuple[list[str], list[str]]:
    """(Environment= settings, ExecStart= argv) of the wheel's ``unit``, /opt/muster replaced,
    and ``-L log`` where given."""
    text = pathlib.Path(venv, "share/muster/systemd", unit).read_text()
    env = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("Environment=")]
    (start,) = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ExecStart=")]
    argv = [venv + a[len("/opt/muster") :] if a.startswith("/opt/muster/") else a for a in shlex.split(start)]
    if "--gpu-detect" in argv:  # emulated GPUs here (docs/deploy.md, section 10)
        k = argv.index("--gpu-detect")
        del argv[k : k + 2]
    return env, [*argv, "-L", log] if log else argv


class OpsCluster(NetnsCluster):
    """NetnsCluster with a second head node, a database host and a login node running the
    credential daemon, its daemons run from a wheel's venv as their units say."""

    def __init__(self, venv: str, pg: dict[str, Any], dbname: str) -> None:
        settings = {
            # longer than an agent's restart (docs/deploy.md, section 6), as short as that allows:
            # a launch lost with a killed controller is noticed after it
            "SlurmdTimeout": "15",
            "SlurmctldTimeout": str(CTLD_TIMEOUT),
            "MessageTimeout": "5",
            "KillWait": "2",
            "AccountingStorageType": "accounting_storage/postgresql",
            "AccountingStorageHost": "db",
            "AccountingStoragePort": str(DB_PORT),
            "AccountingStorageUser": str(pg.get("user") or "postgres"),
            "AccountingStorageLoc": dbname,
        }
        if pg.get("password"):
            settings["AccountingStoragePassFile"] = "/etc/muster/dbpass"
        super().__init__(3, settings=settings, login=True)
        self.venv = venv
        self.password = str(pg.get("password") or "")
        self.heads = ["head", "head2"]
        self.argv: dict[str, list[str]] = {}  # each daemon's command line, from its unit
        self.machines = [*self.heads, "db", *self.nodes, *self.logins]
        self.addr.update({"head2": HEAD2_ADDR, "db": DB_ADDR})

    def config_text(self) -> str:
        first = f"SlurmctldHost=head({HEAD_ADDR})\n"
        return super().config_text().replace(first, f"{first}SlurmctldHost=head2({HEAD2_ADDR})\n")

    def create(self) -> None:
        super().create()
        head, head2 = self.etc("head"), self.etc("head2")
        os.makedirs(os.path.join(head2, "tls"), mode=0o755)
        names = ["muster.key", "tls/ca_cert.pem"] + [
            f"tls/{n}" for n in os.listdir(os.path.join(head, "tls")) if n.startswith("ctld_")
        ]
        for name in names:  # section 9: the key and the controllers' certificates
            subprocess.run(["cp", "-p", os.path.join(head, name), os.path.join(head2, name)], check=True)
        if self.password:
            for etc in (head, head2):
                path = os.path.join(etc, "dbpass")
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                    f.write(self.password + "\n")
        # section 11: the login node's host key, made on the head node, copied there
        out = self.run(
            "head",
            [f"{self.venv}/bin/python", "-m", "muster.agent.credd", "keygen", "login", "/etc/muster/login.key"]
            + ["--conf", "/etc/muster/muster.conf"],
        )
        assert out.returncode == 0, out.stderr
        os.rename(os.path.join(head, "login.key"), os.path.join(self.etc("login"), "login.key"))
        for machine in self.machines:
            os.makedirs(os.path.join(self.spool(machine), "log"), mode=0o755)

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PATH"] = f"{self.venv}/bin:{SYSTEM_PATH}"  # the wheel's commands
        return env

    def daemon_log(self, machine: str, daemon: str) -> str:
        return os.path.join(self.spool(machine), "log", f"{daemon}.log")

    def start_unit(self, name: str, machine: str, unit: str) -> None:
        daemon = unit.removesuffix(".service")
        log = f"/var/spool/muster/log/{daemon}.log" if daemon in ("musterctld", "musterd") else None  # credd: stderr
        env, argv = unit_command(self.venv, unit, log)
        # what the kernel will show: a console script runs under the venv's interpreter
        self.argv[name] = argv if argv[0].endswith("/python") else [f"{self.venv}/bin/python", *argv]
        self._spawn(name, machine, ["/usr/bin/env", "-i", f"PATH={SYSTEM_PATH}", *env, *argv])

    def start(self) -> None:
        # the primary first: whichever takes the lease first is active, and stays so
        self.start_unit("musterctld-head", "head", "musterctld.service")
        self.wait_modes({"head": "active", "head2": "stopped"})
        self.start_unit("musterctld-head2", "head2", "musterctld.service")
        for node in self.nodes:
            self.start_agent(node)
        self.start_unit("mustercredd-login", "login", "mustercredd.service")

    def start_agent(self, node: str) -> None:
        self.start_unit(f"musterd-{node}", node, "musterd.service")

    def socket_of(self, head: str) -> str:
        return os.path.join(self.spool(head), "ctld", "musterctld.sock" + ("" if head == "head" else ".1"))

    def mode(self, head: str) -> str:
        from muster.protocol import client

        proc = self.procs.get(f"musterctld-{head}")
        if proc is None or proc.poll() is not None:
            return "stopped"
        try:
            answer = client.request("GET", "/v1/ping", unix_path=self.socket_of(head), timeout=2.0)
        except (client.ConnectError, client.ApiError, OSError):
            return "starting"
        return "standby" if (answer or {}).get("mode") == "standby" else "active"

    def wait_modes(self, want: dict[str, str], timeout: float = BOUND) -> float:
        start = time.monotonic()
        while (modes := {h: self.mode(h) for h in self.heads}) != want:
            assert time.monotonic() - start < timeout, f"controllers {modes}, not {want}"
            time.sleep(0.05)
        return time.monotonic() - start

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """The active controller's answer (either head's socket)."""
        from muster.protocol import client

        last: Exception | None = None
        for head in self.heads:
            try:
                return client.request(method, path, body, unix_path=self.socket_of(head), timeout=10.0)
            except client.ApiError as exc:
                if exc.status != 503:  # the active controller's answer
                    raise
                last = exc
            except (client.ConnectError, OSError) as exc:
                last = exc
        raise AssertionError(f"no active controller: {last}")

    def wait_ready(self, timeout: float = 90) -> None:
        self.wait_modes({"head": "active", "head2": "standby"}, timeout)
        super().wait_ready(timeout)


@pytest.fixture(scope="module")
def ops() -> Iterator[dict[str, Any]]:
    why = unavailable()
    if why and os.environ.get("MUSTER_TEST_REQUIRE_NETNS"):  # CI (.ci/run): a skip would hide it
        pytest.fail(f"MUSTER_TEST_REQUIRE_NETNS is set and network namespaces cannot be made: {why}")
    if why:
        pytest.skip(f"no network namespaces here: {why}")
    pg = _pg()
    if isinstance(pg, str) and os.environ.get("MUSTER_TEST_REQUIRE_NETNS"):  # CI starts PostgreSQL too
        pytest.fail(f"MUSTER_TEST_REQUIRE_NETNS is set and {pg}")
    if isinstance(pg, str):
        pytest.skip(pg)
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    import psycopg

    parts, dsn = pg
    dbname = "muster_ops_" + uuid.uuid4().hex[:10]
    host = str(parts.get("host") or "/var/run/postgresql")
    port = int(parts.get("port") or 5432)
    upstream: tuple[int, Any] = (
        (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (socket.AF_INET, (host, port))
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")
    where = tempfile.mkdtemp(prefix="muster-ops-")  # users run its commands: not under pytest's 0700 tmp
    cluster: OpsCluster | None = None
    forwarder: Forwarder | None = None
    try:
        venv = install_wheel(where)
        cluster = OpsCluster(venv, parts, dbname)
        cluster.create()
        forwarder = Forwarder(cluster.netns("db"), upstream)
        cluster.start()
        cluster.wait_ready()
        yield {
            "hosts": cluster,
            "dsn": dsn,
            "dbname": dbname,
            "uid": ensure_user(USER),
            "submitted": [],  # every job id sbatch acknowledged
            "train_during": {},  # the DDP job's state after each operation
        }
    finally:
        if cluster is not None:
            cluster.teardown()
        if forwarder is not None:
            forwarder.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        shutil.rmtree(where, ignore_errors=True)


# --- helpers --------------------------------------------------------------------------


def as_user(
    state: dict[str, Any], machine: str, argv: list[str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    uid = state["uid"]
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return state["hosts"].run(machine, [*user, *argv], env=state.get("job_env"), timeout=timeout)


def submit(state: dict[str, Any], *args: str) -> int:
    out = as_user(state, "login", ["sbatch", "--parsable", *args])
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    state["submitted"].append(job_id)
    return job_id


def job(hosts: OpsCluster, job_id: int) -> dict[str, Any]:
    return hosts.api("GET", f"/v1/jobs/{job_id}")["job"]


def wait_job(hosts: OpsCluster, job_id: int, check: Any, timeout: float = BOUND) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not check(j := job(hosts, job_id)):
        assert time.monotonic() < deadline, f"job {job_id}: {j['state']}: {j}"
        time.sleep(0.05)
    return j


def ended(j: dict[str, Any]) -> bool:
    return j["state"] not in ("PENDING", "RUNNING") and not j["completing"]


def wait_text(path: str, pattern: str, timeout: float = BOUND, count: int = 1) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = read(path)
        if len(re.findall(pattern, text, re.M)) >= count:
            return text
        assert time.monotonic() < deadline, f"{path}: no {count}x {pattern!r} after {timeout:.0f} s:\n{text[-3000:]}"
        time.sleep(0.1)


def read(path: str) -> str:
    try:
        return pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return ""


def train_out(state: dict[str, Any]) -> str:
    return os.path.join(state["hosts"].workdir, f"train-{state['train']}.out")


def ranks_alive(state: dict[str, Any]) -> dict[str, int]:
    hosts: OpsCluster = state["hosts"]
    return {node: len(hosts.job_pids(node, state["train"])) for node in hosts.nodes}


def time_to_running(hosts: OpsCluster, since: float, job_id: int) -> float:
    j = wait_job(hosts, job_id, lambda j: j["state"] != "PENDING")
    assert j["state"] in ("RUNNING", "COMPLETED"), j
    return time.monotonic() - since


# --- the scenario ---------------------------------------------------------------------


def test_1_daemons_run_from_the_wheel_as_their_units_start_them_and_two_heads_share_postgresql(
    ops: dict[str, Any],
) -> None:
    hosts: OpsCluster = ops["hosts"]
    venv = hosts.venv
    for name, proc in hosts.procs.items():
        cmdline = pathlib.Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        environ = pathlib.Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")[:-1]
        assert [a.decode() for a in cmdline] == hosts.argv[name]  # the unit's ExecStart, from the venv
        assert hosts.argv[name][0] == f"{venv}/bin/python"
        assert sorted(environ) == sorted([f"PATH={SYSTEM_PATH}".encode(), b"MUSTER_CONF=/etc/muster/muster.conf"])
        assert os.readlink(f"/proc/{proc.pid}/cwd") == "/", name
    where = subprocess.run(
        ["env", "-i", f"{venv}/bin/python", "-c", "import muster, muster.ctld; print(muster.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(f"{venv}/lib/"), where.stdout  # the wheel's muster, not src/
    version = subprocess.run([f"{venv}/bin/musterd", "--version"], capture_output=True, text=True, check=True)
    built = version.stdout.split()[1]
    # every agent registered with the wheel's build (docs/deploy.md, section 7, step 5)
    listing = hosts.run("login", ["sinfo", "-h", "-N", "-o", "%N %v"])
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.split("\n")[:3] == [f"{n} {built}" for n in hosts.nodes]
    ping = as_user(ops, "login", ["scontrol", "ping"])
    assert ping.returncode == 0, ping.stderr
    assert ping.stdout.splitlines() == ["Slurmctld(primary) at head is UP (active)", "Slurmctld(backup) at head2 is UP"]
    config = hosts.run("login", ["scontrol", "show", "config"])
    assert re.search(r"^AccountingStorageType\s*=\s*accounting_storage/postgresql$", config.stdout, re.M), config.stdout
    assert not os.path.exists(os.path.join(hosts.etc("login"), "muster.key"))  # no cluster secret there


def test_2_a_user_on_the_login_host_submits_a_three_node_ddp_job(ops: dict[str, Any]) -> None:
    hosts: OpsCluster = ops["hosts"]
    ops["finish"] = os.path.join(hosts.workdir, "finish-training")
    ops["job_env"] = {
        "TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"),
        "PYTHON": sys.executable,  # the project venv's: torch
        "CKPT_DIR": os.path.join(hosts.workdir, "ckpt"),
    }
    ops["train"] = submit(
        ops,
        *("-N3", "--ntasks-per-node=1", "--gres=gpu:1", str(EXAMPLES / "train.sbatch")),
        *("--steps", "20", "--ckpt-every", "10", "--sleep", "0.1", "--until", ops["finish"]),
    )
    running = wait_job(hosts, ops["train"], lambda j: j["state"] != "PENDING")
    assert running["state"] == "RUNNING", running
    assert sorted(a["node"] for a in running["alloc"]) == hosts.nodes
    assert (running["user"], running["uid"]) == (USER, ops["uid"])
    # the ranks met over the links: all three past their first allreduce
    text = wait_text(train_out(ops), r"^\d: \[rank \d\] allreduce ok sum=3 expected=3$", timeout=240, count=3)
    assert all(ranks_alive(ops).values()), (ranks_alive(ops), text)


def test_3_each_agent_restarted_in_turn(ops: dict[str, Any]) -> None:
    """systemctl restart musterd (KillMode=process) on each node in turn: the agent stops,
    the next one registers. What became of the ranks meanwhile is the next step's to judge."""
    hosts: OpsCluster = ops["hosts"]
    stops, ranks = ops["agent_stop_s"], ops["ranks_after_stop"] = {}, {}
    ops["steps_before_restarts"] = len(re.findall(r"^0: \[rank 0\] step \d+ ", read(train_out(ops)), re.M))
    for node in hosts.nodes:
        log = hosts.daemon_log(node, "musterd")
        registered = read(log).count("registered with the controller")
        proc = hosts.procs[f"musterd-{node}"]
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(BOUND)
        finally:
            stops[node] = time.monotonic() - began
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            ranks[node] = ranks_alive(ops)[node]
            hosts.start_agent(node)
        assert proc.returncode == 0, hosts.read_log(f"musterd-{node}")
        wait_text(log, "registered with the controller", count=registered + 1)  # the next agent is in
        assert hosts.node_states()[node]["state"] not in ("DOWN", "UNKNOWN"), hosts.node_states()[node]
    print("agents stopped (SIGTERM) in " + ", ".join(f"{n} {s:.1f} s" for n, s in stops.items()))


def test_3b_the_ranks_went_on_across_the_agent_restarts(ops: dict[str, Any]) -> None:
    hosts: OpsCluster = ops["hosts"]
    stops = ops["agent_stop_s"]
    assert all(ops["ranks_after_stop"].values()), ops["ranks_after_stop"]  # the ranks outlive their agent
    # docs/deploy.md, Signals: SIGTERM stops musterd (a restart well under SlurmdTimeout)
    assert len(stops) == 3 and max(stops.values()) < 10, stops
    # training goes on after all three: rank 0 logs further steps, every rank still runs
    wait_text(train_out(ops), r"^0: \[rank 0\] step \d+ ", count=ops["steps_before_restarts"] + 1)
    assert job(hosts, ops["train"])["state"] == "RUNNING"
    assert all(ranks_alive(ops).values()), ranks_alive(ops)


def test_4_sighup_reconfigures_and_sigusr2_reopens_the_log_of_the_active_controller(ops: dict[str, Any]) -> None:
    hosts: OpsCluster = ops["hosts"]
    proc = hosts.procs["musterctld-head"]
    for machine in hosts.machines:  # the same file everywhere
        with open(os.path.join(hosts.etc(machine), "muster.conf"), "a") as f:
            f.write("PartitionName=ops Nodes=ALL MaxTime=60 State=UP\n")
    proc.send_signal(signal.SIGHUP)
    log = hosts.daemon_log("head", "musterctld")
    wait_text(log, r"reconfigure: PartitionName=ops added")
    listed = as_user(ops, "login", ["sinfo", "-h", "-p", "ops", "-o", "%P %D"])
    assert listed.returncode == 0 and listed.stdout.strip() == "ops 3", listed.stdout + listed.stderr
    # logrotate's way: move the file, signal; the daemon writes a new one
    os.rename(log, log + ".1")
    proc.send_signal(signal.SIGUSR2)
    wait_text(log, r"SIGUSR2: log file .* reopened")
    assert os.stat(log).st_mode & 0o777 == 0o600
    assert proc.poll() is None and hosts.mode("head") == "active"
    ops["train_during"]["signals"] = job(hosts, ops["train"])["state"]


def start_burst(state: dict[str, Any], count: int, ids: str) -> subprocess.Popen[str]:
    """The user submitting ``count`` jobs one after the other on the login host, each
    acknowledged id appended to ``ids``."""
    hosts: OpsCluster = state["hosts"]
    uid = state["uid"]
    script = (
        f"for i in $(seq 1 {count}); do sbatch --parsable -p ops -J burst-$i -o /dev/null --wrap true >>{ids} "
        "|| echo FAILED $i >&2; done"
    )
    return subprocess.Popen(
        [*hosts._enter("login"), "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", script],
        cwd=hosts.workdir,
        env=hosts.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_5_kill_9_of_the_active_controller_the_standby_takes_over_and_schedules(ops: dict[str, Any]) -> None:
    hosts: OpsCluster = ops["hosts"]
    proc = hosts.procs["musterctld-head"]
    ids = os.path.join(hosts.workdir, "burst-ids")
    burst = start_burst(ops, 8, ids)
    try:
        wait_text(ids, r"^\d+$", count=2)  # some acknowledged, more on their way
        killed = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        after = submit(ops, "-p", "ops", "-o", "/dev/null", "--wrap", "sleep 2")  # waits for the standby
        took = time_to_running(hosts, killed, after)
        _out, err = burst.communicate(timeout=BOUND)
    finally:
        if burst.poll() is None:
            burst.kill()
            burst.wait()
    print(f"kill -9 of the active controller: a job submitted right after RUNNING {took:.2f} s after the kill")
    assert took < BOUND
    # every submission of the burst across the kill acknowledged, once each
    assert burst.returncode == 0 and "FAILED" not in err, err
    acked = [int(line) for line in read(ids).split()]
    assert len(acked) == 8, (acked, err)
    ops["submitted"] += acked
    hosts.wait_modes({"head": "stopped", "head2": "active"})
    ping = as_user(ops, "login", ["scontrol", "ping"])
    assert ping.stdout.splitlines() == [
        "Slurmctld(primary) at head is DOWN",
        "Slurmctld(backup) at head2 is UP (active)",
    ], ping.stdout + ping.stderr
    for job_id in [after, *acked]:
        assert wait_job(hosts, job_id, ended)["state"] == "COMPLETED"
    ops["train_during"]["kill -9"] = job(hosts, ops["train"])["state"]


def test_6_the_killed_head_comes_back_as_standby_and_takes_over_again(ops: dict[str, Any]) -> None:
    hosts: OpsCluster = ops["hosts"]
    hosts.start_unit("musterctld-head", "head", "musterctld.service")
    hosts.wait_modes({"head": "standby", "head2": "active"})
    moved = time.monotonic()
    # asked on the active head node (no agent there: the credential is its controller's)
    out = hosts.run("head2", ["scontrol", "takeover", "0"])
    assert out.returncode == 0, out.stderr
    hosts.wait_modes({"head": "active", "head2": "standby"})
    back = submit(ops, "-p", "ops", "-o", "/dev/null", "--wrap", "true")
    took = time_to_running(hosts, moved, back)
    print(f"scontrol takeover 0: a job submitted after it RUNNING {took:.2f} s after the takeover began")
    assert took < BOUND
    assert wait_job(hosts, back, ended)["state"] == "COMPLETED"
    ops["train_during"]["takeover"] = job(hosts, ops["train"])["state"]


def test_7_every_submission_is_in_the_store_exactly_once(ops: dict[str, Any]) -> None:
    import psycopg

    hosts: OpsCluster = ops["hosts"]
    pathlib.Path(ops["finish"]).touch()  # the DDP job may end now
    ops["train_done"] = wait_job(hosts, ops["train"], ended, timeout=120)
    with psycopg.connect(f"{ops['dsn']} dbname={ops['dbname']}") as conn:
        ids = [int(r[0]) for r in conn.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall()]
    assert len(set(ops["submitted"])) == len(ops["submitted"]) == 11  # no id acknowledged twice
    assert ids == sorted(ops["submitted"]), (ids, ops["submitted"])  # none lost, none doubled
    # each is one job in accounting, COMPLETED. A job whose start the killed controller had
    # committed but not yet sent to its node is ended NODE_FAIL by the new one once the
    # node's grace (SlurmdTimeout) has passed and run again under its id: an attempt that
    # never ran, listed by sacct -D
    never_ran = []
    for job_id in ops["submitted"]:
        acct = hosts.run("login", ["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID,State"])
        assert acct.stdout.split() == [f"{job_id}|COMPLETED"], acct.stdout + acct.stderr
        attempts = hosts.run("login", ["sacct", "-X", "-n", "-P", "-D", "-j", str(job_id), "-o", "State"])
        states = attempts.stdout.split()
        assert states[-1] == "COMPLETED" and set(states) <= {"NODE_FAIL", "COMPLETED"}, states
        never_ran += [job_id] * states.count("NODE_FAIL")
    print(f"submissions: {len(ops['submitted'])}, each once; launches lost with the killed controller: {never_ran}")


def test_8_the_ddp_job_ran_through_it_all_and_completed_once_with_every_ranks_output_intact(
    ops: dict[str, Any],
) -> None:
    hosts: OpsCluster = ops["hosts"]
    train, done = ops["train"], ops["train_done"]
    text = read(train_out(ops))
    assert ops["train_during"] == {"signals": "RUNNING", "kill -9": "RUNNING", "takeover": "RUNNING"}, text
    assert (done["state"], done["restart_count"]) == ("COMPLETED", 0), text
    acct = hosts.run("login", ["sacct", "-X", "-n", "-P", "-D", "-j", str(train), "-o", "JobID,State,Restarts"])
    assert acct.stdout.split() == [f"{train}|COMPLETED|0"], acct.stdout + acct.stderr
    # every rank's output, once and whole: one start, one allreduce, one end each
    for rank in range(3):
        mine = [line for line in text.splitlines() if line.startswith(f"{rank}: ")]
        assert len([line for line in mine if " world=3 " in line]) == 1, text
        assert len([line for line in mine if "allreduce ok sum=3 expected=3" in line]) == 1, text
        assert len([line for line in mine if re.search(r"done steps=\d+ .* replicas_agree=True$", line)]) == 1, text
    steps = [int(s) for s in re.findall(r"^0: \[rank 0\] step (\d+) loss", text, re.M)]
    assert steps == list(range(10, 10 * len(steps) + 1, 10)) and len(steps) >= 2, text  # no line lost or repeated
    assert len(re.findall(r"^job \d+ on .* \(restart 0\)$", text, re.M)) == 1, text  # the batch script ran once
