"""The commands run in the user's warm command server (``cli.cmdserver``, through the compiled
client ``cli/client.c``) exactly as they would by themselves: what they print, their
status, the directory, input, environment, umask and signals they get; and where the
server cannot take a command, or must not be trusted, the client runs it itself."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import muster.cli.sdiag as sdiag
import waiting
from harness import BIN, Harness, ensure_user
from muster.cli.cmdserver import place
from muster.cli.launchers import client_id, import_root

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not open(os.path.join(BIN, "squeue"), "rb").read(4) == b"\x7fELF",
        reason="this install has no compiled client (no C compiler at install time)",
    ),
]

LIBEXEC = os.path.join(os.path.dirname(BIN), "libexec", "muster")
DIRECT = {"MUSTER_CMD_SERVER": "0"}


def socket_dir(uid: int, env: Mapping[str, str]) -> str:
    """Where ``client.c`` puts the server's socket: the login session's runtime directory
    when ``env`` names one that is ``uid``'s own and closed, else /tmp/muster-cmd-UID."""
    session = env.get("XDG_RUNTIME_DIR", "")
    try:
        st = os.stat(session) if session.startswith("/") and len(session) <= 64 else None
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
        return os.path.join(session, "muster-cmd")
    return f"/tmp/muster-cmd-{uid}"


def live_socket(uid: int = 0, env: dict[str, str] | None = None) -> str | None:
    """The socket of this install's server for ``uid`` and the ``PYTHON*`` variables of
    ``env`` (this process's by default), here: one that has a server, in this process's
    namespaces (the name ends in their hash, ``client.c``'s ``place``; servers that tests
    started elsewhere or with other variables may run, and a server killed may leave its
    socket)."""
    prefix = client_id(os.path.join(BIN, "python"), import_root(), LIBEXEC)
    want = python_vars(os.environ if env is None else env)
    for sock in glob.glob(f"{socket_dir(uid, os.environ if env is None else env)}/{prefix}-*.sock"):
        pids = server_pids(sock)
        if pids and place(pids[0]) == place("self") and python_vars(environ_of(pids[0])) == want:
            return sock
    return None


def python_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def environ_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return {}
    return dict(e.decode(errors="replace").partition("=")[::2] for e in entries if b"=" in e)


def server_pids(sock: str) -> list[int]:
    """The server of ``sock`` and its runners (one per command running)."""
    out = subprocess.run(["pgrep", "-f", f"cmdserver {sock}"], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def wait_for(predicate, timeout: float = 15.0) -> bool:  # noqa: ANN001
    """waiting.wait_for as a yes or no, for the asserts here that say what they expect."""
    try:
        waiting.wait_for(predicate, timeout)
    except AssertionError:
        return False
    return True


def served(h: Harness) -> str:
    """The socket of a server that runs: a command starts one where none does (and where a
    stale one refuses it and leaves, the next command does)."""

    def up() -> bool:
        h.run(["sinfo"])
        sock = live_socket()
        return sock is not None and len(server_pids(sock)) >= 1

    assert wait_for(up), "no server"
    sock = live_socket()
    assert sock is not None
    return sock


def exe(pid: int) -> str:
    return os.path.basename(os.readlink(f"/proc/{pid}/exe"))


@pytest.mark.parametrize(
    "argv",
    [
        ["squeue"],
        ["sinfo", "-N", "-o", "%N %T %c %G"],
        ["scontrol", "show", "partition"],
        ["sbatch", "--version"],
        ["sbatch", "--no-such-option"],
        ["scontrol", "show", "job", "999999"],
        ["squeue", "-o", "%i %j", "-j", "999999"],
        ["sacct", "-X", "-n", "-j", "999999"],
    ],
)
def test_a_served_command_says_what_it_says_by_itself(cluster: Harness, argv: list[str]) -> None:
    served(cluster)
    through_server = cluster.run(argv)
    by_itself = cluster.run(argv, env=DIRECT)
    assert (through_server.returncode, through_server.stdout, through_server.stderr) == (
        by_itself.returncode,
        by_itself.stdout,
        by_itself.stderr,
    )


def test_it_takes_the_clients_directory_input_environment_and_umask(cluster: Harness, tmp_path: Path) -> None:
    served(cluster)
    work = tmp_path / "work dir"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    script = '#!/bin/sh\n#SBATCH -J from-stdin -o probe-%j.out\necho "$CMDSERVER_PROBE|$SLURM_UMASK|$TZ|$(pwd)"\n'
    out = cluster.run(
        "umask 027; exec sbatch --parsable",
        input=script,
        cwd=str(work),
        env={"CMDSERVER_PROBE": "yes and more", "TZ": "America/New_York"},
    )
    assert out.returncode == 0, out.stderr
    job = cluster.wait_job(int(out.stdout.strip()))
    assert (job["state"], job["spec"]["name"], job["spec"]["workdir"]) == ("COMPLETED", "from-stdin", str(work))
    probe = (work / f"probe-{job['job_id']}.out").read_text()
    assert probe == f"yes and more|0027|America/New_York|{work}\n"
    # The time zone is the client's: the same submit time, shown in New York and in UTC.
    shown = {
        tz: cluster.run(["scontrol", "show", "job", str(job["job_id"])], env={"TZ": tz}).stdout.split("SubmitTime=")[1][
            :19
        ]
        for tz in ("America/New_York", "UTC")
    }
    assert shown["America/New_York"] != shown["UTC"]
    direct = cluster.run(["scontrol", "show", "job", str(job["job_id"])], env={**DIRECT, "TZ": "America/New_York"})
    assert direct.stdout.split("SubmitTime=")[1][:19] == shown["America/New_York"]


def test_ctrl_c_reaches_the_command_and_the_client_dies_of_it(cluster: Harness) -> None:
    served(cluster)
    codes = {}
    for mode, extra in (("served", {}), ("direct", DIRECT)):
        p = subprocess.Popen(
            ["sbatch", "--wait", "-J", f"ctrl-c-{mode}", "--wrap", "sleep 30"],
            env={**cluster.env, **extra},
            cwd=cluster.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", f"ctrl-c-{mode}", "-t", "R"]).stdout))  # noqa: B023
        # Served, the process the caller started is the small client, not an interpreter.
        assert exe(p.pid).startswith("python") == (mode == "direct")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        codes[mode] = p.returncode
        cluster.run(["scancel", "-n", f"ctrl-c-{mode}"])
    assert codes["served"] == codes["direct"] == 130


def test_a_command_in_a_job_runs_by_itself(cluster: Harness) -> None:
    served(cluster)
    p = subprocess.Popen(
        ["sbatch", "--wait", "-J", "own-python", "--wrap", "sleep 30"],
        env={**cluster.env, "SLURM_JOB_ID": "4242"},  # in a job: nothing may outlive it
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", "own-python"]).stdout))
    assert exe(p.pid).startswith("python")
    cluster.run(["scancel", "-n", "own-python"])
    p.communicate(timeout=30)


def test_other_python_variables_have_a_server_of_their_own(cluster: Harness) -> None:
    default = served(cluster)
    env = {**cluster.env, "PYTHONWARNINGS": "ignore"}  # how the interpreter would start differs
    assert wait_for(lambda: cluster.run(["sinfo"], env=env).returncode == 0 and live_socket(env=env) is not None)
    own = live_socket(env=env)
    assert own is not None and own != default
    assert environ_of(the_server(own))["PYTHONWARNINGS"] == "ignore"
    out = cluster.run(["sinfo", "-h", "-o", "%P"], env=env)
    assert (out.returncode, out.stdout) == (0, "gpu*\n")
    subprocess.run(["pkill", "-f", f"cmdserver {own}"])


def test_a_socket_directory_the_user_does_not_own_alone_is_never_used(cluster: Harness) -> None:
    uid = ensure_user("mustercmd")
    planted = f"/tmp/muster-cmd-{uid}"
    subprocess.run(["rm", "-rf", planted], check=True)
    os.mkdir(planted, 0o777)  # root's, open to all: as another user could have made it
    os.chmod(planted, 0o1777)
    try:
        out = cluster.run(["squeue", "-h", "-o", "%i", "-j", "999999"], uid=uid)
        assert out.returncode == 1 and "Invalid job id" in out.stderr, out
        time.sleep(0.5)  # sleep: a negative check: a server started in the background had time to show
        assert os.listdir(planted) == []  # no socket planted, no server started there
    finally:
        subprocess.run(["rm", "-rf", planted], check=True)
    # Its own directory it makes closed to everyone else, with its own server.
    out = cluster.run(["sinfo", "-h", "-o", "%P"], uid=uid)
    assert out.returncode == 0 and out.stdout.strip() == "gpu*", out
    st = os.stat(planted)
    assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o700)
    assert wait_for(lambda: live_socket(uid) is not None)
    sock = live_socket(uid)
    assert sock is not None
    for pid in server_pids(sock):
        assert os.stat(f"/proc/{pid}").st_uid == uid
    subprocess.run(["pkill", "-f", f"cmdserver {sock}"])


def test_a_server_leaves_when_muster_changes_or_its_socket_goes(cluster: Harness) -> None:
    sock = served(cluster)
    server = the_server(sock)
    module = sdiag.__file__
    assert module is not None
    before = os.stat(module)
    try:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        out = cluster.run(["sinfo", "-h", "-o", "%P"])  # refused as stale: run by the client itself
        assert out.returncode == 0 and out.stdout.strip() == "gpu*"
    finally:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert wait_for(lambda: server not in server_pids(sock))
    sock = served(cluster)  # the next command starts a new one
    server = the_server(sock)
    os.unlink(sock)
    assert wait_for(lambda: server not in server_pids(sock), timeout=30)  # it checks every 5 s


def exe_ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def the_server(sock: str) -> int:
    """The server of ``sock``: the process of its name that is not one of its runners."""
    pids = server_pids(sock)
    (server,) = [pid for pid in pids if exe_ppid(pid) not in pids]
    return server


# A client written here, to reach a server as client.c would from where client.c never asks:
# ``RAW_CLIENT SOCKET go|nogo ARGV...`` prints the kinds of the replies it had on stderr.
# With ``nogo`` it never answers the runner's "P" with "G", as a client that gave up waiting.
RAW_CLIENT = """
import os, socket, struct, sys
sock, go, argv = sys.argv[1], sys.argv[2] == "go", sys.argv[3:]
fields = [argv[0], "22", "0", f"{os.getuid()}:{os.getgid()}", ",".join(map(str, os.getgroups())), "",
          str(len(argv)), *argv, *(f"{k}={v}" for k, v in os.environ.items())]
body = b"".join(f.encode() + b"\\0" for f in fields)
conn = socket.socket(socket.AF_UNIX)
conn.connect(sock)
try:
    conn.sendall(b"MUS1" + struct.pack("=I", len(body)) + body)
except BrokenPipeError:  # answered and closed before the request was read: its answer is there
    pass
kinds = ""
while True:
    try:
        kind = conn.recv(1)
    except ConnectionResetError:  # the runner closed with our "G" unread: it had refused
        break
    if not kind:
        break
    kinds += kind.decode()
    if kind in (b"P", b"X"):
        conn.recv(4, socket.MSG_WAITALL)
    if kind == b"F":
        break  # as client.c: it runs the command itself
    if kind == b"P":
        if not go:
            break
        try:
            socket.send_fds(conn, [b"G"], [0, 1, 2, os.open(".", os.O_RDONLY)])
        except OSError:
            pass  # refused already: its "F" follows
sys.stderr.write(kinds + "\\n")
"""


@pytest.fixture
def own_server(cluster: Harness) -> Iterator[str]:
    """A server of the test's own, at a socket no client.c would use."""
    sock = f"/tmp/muster-cmd-0/test-{os.getpid()}.sock"
    server = subprocess.Popen([os.path.join(LIBEXEC, "cmdserver"), sock], env=cluster.env, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: len(server_pids(sock)) >= 1 and os.path.exists(sock))
        yield sock
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and not os.path.exists(sock), err
    assert wait_for(lambda: not server_pids(sock), timeout=10)


def raw(cluster: Harness, sock: str, go: str, *argv: str, prefix: tuple[str, ...] = ()) -> tuple[str, str]:
    out = subprocess.run(
        [*prefix, sys.executable, "-c", RAW_CLIENT, sock, go, *argv],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=cluster.workdir,
        timeout=20,  # it reads to the end: no other runner holds its socket open
    )
    return out.stdout, out.stderr


# CI (MUSTER_TEST_REQUIRE_NETNS, .ci/run) runs it wherever: a skip there would hide a failure.
@pytest.mark.skipif(
    subprocess.run(["unshare", "--net", "true"]).returncode != 0 and not os.environ.get("MUSTER_TEST_REQUIRE_NETNS"),
    reason="no network namespaces here (unshare --net fails), and this run does not require them",
)
def test_a_server_runs_nothing_for_a_client_in_another_namespace(cluster: Harness, own_server: str) -> None:
    out, kinds = raw(cluster, own_server, "go", "sbatch", "--version")
    # It runs, as the client would. (The server's own report of the runner's end follows.)
    assert (out.startswith("slurm 22.05"), kinds[:2]) == (True, "PX")
    out, kinds = raw(cluster, own_server, "go", "sbatch", "--version", prefix=("unshare", "--net"))
    assert (out, kinds) == ("", "PF\n")  # refused: run it yourself
    out, kinds = raw(cluster, own_server, "go", "sbatch", "--version", prefix=("env", "PYTHONWARNINGS=ignore"))
    assert (out, kinds) == ("", "PF\n")  # so are other PYTHON* variables than the server's
    # (and within raw()'s time limit: the "G" that followed each refusal brought the client's
    # streams, which the runner closed, although the server holds the connection too)


def test_a_runner_runs_nothing_until_its_client_says_go(cluster: Harness, own_server: str) -> None:
    for go in ("nogo", "go"):
        _, kinds = raw(cluster, own_server, go, "sbatch", "--hold", "-J", f"say-{go}", "--wrap", "true")
        assert kinds[:2] == {"nogo": "P\n", "go": "PX"}[go]
    time.sleep(1)  # sleep: a negative check: what the runner left without "G" would have submitted by now
    queued = cluster.run(["squeue", "-h", "-o", "%j", "-n", "say-nogo,say-go"]).stdout.split()
    cluster.run(["scancel", "-n", "say-go"])
    assert queued == ["say-go"]


def test_a_stopped_server_costs_one_wait_and_the_command_runs_once(cluster: Harness) -> None:
    sock = served(cluster)
    before = os.stat(sock).st_ino
    server = the_server(sock)
    os.kill(server, signal.SIGSTOP)  # nobody takes a command, but the runner forked ahead
    try:
        submitted = []
        for _ in range(2):
            out = cluster.run(["sbatch", "--parsable", "--hold", "-J", "past-a-stop", "--wrap", "true"])
            assert out.returncode == 0, out
            submitted.append(out.stdout.strip())
        # The first ran in the runner forked ahead; for the second the stopped server forked
        # none: its client waited its ANSWER time, ran the command itself and took the socket
        # away from the stopped server, so that the next command starts a fresh one.
        assert not os.path.exists(sock) or os.stat(sock).st_ino != before
    finally:
        os.kill(server, signal.SIGCONT)
    # Continued, the old server finds its socket gone and leaves; the runner it forks for the
    # connection still queued finds the client gone, and runs nothing.
    assert wait_for(lambda: server not in server_pids(sock), timeout=30)
    queued = cluster.run(["squeue", "-h", "-o", "%i", "-n", "past-a-stop"]).stdout.split()
    cluster.run(["scancel", "-n", "past-a-stop"])
    assert sorted(queued) == sorted(submitted) and len(set(submitted)) == 2


def test_an_idle_server_keeps_one_runner_forked_ahead_and_forks_the_next_as_one_takes_a_client(
    cluster: Harness,
) -> None:
    sock = served(cluster)
    server = the_server(sock)
    own = output_of(server)

    def waiting() -> set[int]:  # the server's runners that have no command: their output is the server's
        return {pid for pid in server_pids(sock) if pid != server and output_of(pid) == own}

    assert wait_for(lambda: len(waiting()) == 1)  # idle: one runner, forked ahead
    p = subprocess.Popen(
        ["sbatch", "--wait", "-J", "one-runner", "--wrap", "sleep 60"],
        env=cluster.env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", "one-runner", "-t", "R"]).stdout))
        # the command runs in a child of the server, and one more waits beside it: the next
        ours = os.readlink(f"/proc/self/fd/{p.stdout.fileno()}")  # type: ignore[union-attr]
        (runner,) = [pid for pid in server_pids(sock) if output_of(pid) == ours]
        assert exe_ppid(runner) == server
        assert wait_for(lambda: len(waiting()) == 1)
    finally:
        cluster.run(["scancel", "-n", "one-runner"])
        p.communicate(timeout=30)
    assert wait_for(lambda: runner not in server_pids(sock) and len(waiting()) == 1)  # it ends with its command


def output_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return "gone"


def test_over_its_bound_of_runners_a_client_runs_its_command_itself_at_once(cluster: Harness) -> None:
    sock = f"/tmp/muster-cmd-0/test-bound-{os.getpid()}.sock"
    env = {**cluster.env, "MUSTER_CMD_SERVER_RUNNERS": "1"}
    server = subprocess.Popen([os.path.join(LIBEXEC, "cmdserver"), sock], env=env, stderr=subprocess.PIPE)
    held = socket.socket(socket.AF_UNIX)
    try:
        assert wait_for(lambda: os.path.exists(sock))
        # One client holds the one runner: its request sent and answered "P", it never says go.
        argv = ["sbatch", "--version"]
        fields = [argv[0], "22", "0", f"{os.getuid()}:{os.getgid()}", ",".join(map(str, os.getgroups())), "", "2"]
        body = b"".join(f.encode() + b"\0" for f in [*fields, *argv, *(f"{k}={v}" for k, v in env.items())])
        held.settimeout(30)
        held.connect(sock)
        held.sendall(b"MUS1" + struct.pack("=I", len(body)) + body)
        answer = held.recv(5, socket.MSG_WAITALL)
        assert answer[:1] == b"P"
        runner = struct.unpack("=i", answer[1:])[0]
        _, kinds = raw(cluster, sock, "go", "sbatch", "--version")
        assert kinds == "F\n"  # told at once to run it itself: no wait, no second runner
        assert len(server_pids(sock)) == 2  # none forked ahead at the bound either
        held.close()  # its runner ran nothing, and is gone
        assert wait_for(lambda: runner not in server_pids(sock))
        out, kinds = raw(cluster, sock, "go", "sbatch", "--version")
        assert (out.startswith("slurm 22.05"), kinds[:2]) == (True, "PX")
    finally:
        held.close()
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and not os.path.exists(sock), err


def test_a_command_whose_client_was_killed_is_hung_up_on(cluster: Harness) -> None:
    sock = served(cluster)
    p = subprocess.Popen(
        ["sbatch", "--wait", "-J", "client-killed", "--wrap", "sleep 60"],
        env=cluster.env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", "client-killed", "-t", "R"]).stdout))
        ours = os.readlink(f"/proc/self/fd/{p.stdout.fileno()}")  # type: ignore[union-attr]
        (runner,) = [pid for pid in server_pids(sock) if os.readlink(f"/proc/{pid}/fd/1") == ours]
        p.kill()
        p.wait(timeout=10)
        assert wait_for(lambda: not os.path.exists(f"/proc/{runner}"))  # SIGHUP, as a terminal closing
    finally:
        cluster.run(["scancel", "-n", "client-killed"])


def test_a_burst_of_commands_runs_each_exactly_once(cluster: Harness) -> None:
    served(cluster)
    burst = [
        subprocess.Popen(
            ["sbatch", "--parsable", "--hold", "-J", "burst", "--wrap", "true"],
            env=cluster.env,
            cwd=cluster.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(24)  # more than the runners' bound (8): the rest run by themselves
    ]
    outs = [p.communicate(timeout=60) for p in burst]
    try:
        assert [p.returncode for p in burst] == [0] * len(burst), outs
        submitted = sorted(out.strip() for out, _ in outs)
        queued = sorted(cluster.run(["squeue", "-h", "-o", "%i", "-n", "burst"]).stdout.split())
        assert queued == submitted and len(set(submitted)) == len(burst)
    finally:
        cluster.run(["scancel", "-n", "burst"])


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_socket_directory_leaves_every_command_running_by_itself(cluster: Harness) -> None:
    uid = ensure_user("mustercmd")
    directory = f"/tmp/muster-cmd-{uid}"
    subprocess.run(["pkill", "-u", str(uid), "-f", "libexec/muster/cmdserver"])
    subprocess.run(["rm", "-rf", directory], check=True)
    os.mkdir(directory, 0o700)
    # No room for one more file: neither a server's socket nor the client's start mark.
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"nr_inodes=1,mode=700,uid={uid}", "tmpfs", directory], check=True)
    try:
        for _ in range(3):
            out = cluster.run(["sinfo", "-h", "-o", "%P"], uid=uid, timeout=30)
            assert (out.returncode, out.stdout.strip()) == (0, "gpu*"), out
        assert os.listdir(directory) == []
        assert not subprocess.run(["pgrep", "-u", str(uid), "-f", "cmdserver"], capture_output=True).stdout
    finally:
        subprocess.run(["umount", directory], check=True)
        subprocess.run(["rm", "-rf", directory], check=True)


def test_a_server_that_only_refuses_leaves_when_idle(cluster: Harness) -> None:
    sock = f"/tmp/muster-cmd-0/test-idle-{os.getpid()}.sock"
    env = {**cluster.env, "MUSTER_CMD_SERVER_IDLE": "1"}
    server = subprocess.Popen([os.path.join(LIBEXEC, "cmdserver"), sock], env=env, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: os.path.exists(sock))
        # Refused requests (other PYTHON* variables) every half second, more often than the
        # idle limit: they are no command run, and do not keep it.
        deadline = time.monotonic() + 20  # it checks every 5 s at least
        while os.path.exists(sock) and time.monotonic() < deadline:
            _, kinds = raw(cluster, sock, "go", "sbatch", "--version", prefix=("env", "PYTHONWARNINGS=ignore"))
            assert kinds == "PF\n" or not os.path.exists(sock), kinds
            time.sleep(0.5)  # sleep: the behaviour: a refused request every half second
        assert not os.path.exists(sock)  # gone while still refusing
        server.wait(timeout=30)
    finally:
        server.kill()
        server.wait()


def proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_ctrl_z_stops_the_command_and_its_client_and_fg_continues_both(cluster: Harness) -> None:
    sock = served(cluster)
    p = subprocess.Popen(
        ["sbatch", "--wait", "-J", "ctrl-z", "--wrap", "sleep 60"],
        env=cluster.env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", "ctrl-z", "-t", "R"]).stdout))
        assert not exe(p.pid).startswith("python")  # served: the caller's process is the client
        p.send_signal(signal.SIGTSTP)  # the terminal's Ctrl-Z reaches the client alone
        # the command stops (in its runner, out of the terminal's reach), then the client
        assert wait_for(lambda: any(proc_state(pid) == "T" for pid in server_pids(sock)))
        assert wait_for(lambda: proc_state(p.pid) == "T")
        p.send_signal(signal.SIGCONT)  # fg
        assert wait_for(lambda: proc_state(p.pid) != "T")
        assert wait_for(lambda: all(proc_state(pid) != "T" for pid in server_pids(sock)))
        p.send_signal(signal.SIGINT)  # and the command still answers, as ever
        p.communicate(timeout=30)
        assert p.returncode == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        cluster.run(["scancel", "-n", "ctrl-z"])


def test_the_session_runtime_directory_holds_the_socket_when_it_is_the_users_own(cluster: Harness) -> None:
    session = Path(tempfile.mkdtemp(prefix="run-user-"))  # short, as /run/user/UID: a socket's path is
    try:  # at most 107 bytes
        check_session_directory(cluster, session)
    finally:
        shutil.rmtree(session)


def check_session_directory(cluster: Harness, session: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(session)}
    out = cluster.run(["sinfo", "-h", "-o", "%P"], env=env)
    assert (out.returncode, out.stdout) == (0, "gpu*\n")
    assert wait_for(lambda: live_socket(0, {**cluster.env, **env}) is not None)
    sock = live_socket(0, {**cluster.env, **env})
    assert sock is not None and sock.startswith(f"{session}/muster-cmd/")
    assert stat.S_IMODE(os.stat(session / "muster-cmd").st_mode) == 0o700
    subprocess.run(["pkill", "-f", f"cmdserver {sock}"])
    # one open to others is never used: /tmp/muster-cmd-UID instead
    os.chmod(session, 0o755)
    assert socket_dir(0, env) == "/tmp/muster-cmd-0"
    before = set(os.listdir(session / "muster-cmd"))
    out = cluster.run(["sinfo", "-h", "-o", "%P"], env=env)
    assert (out.returncode, out.stdout) == (0, "gpu*\n")
    assert set(os.listdir(session / "muster-cmd")) <= before  # nothing new there


def test_the_sites_switch_makes_every_command_run_by_itself(cluster: Harness, tmp_path: Path) -> None:
    conf = tmp_path / "muster.conf"
    with open(cluster.cluster.conf_path) as f:
        conf.write_text(f.read() + "CommandServer=no\n")
    env = {**cluster.env, "MUSTER_CONF": str(conf)}
    p = subprocess.Popen(
        ["sbatch", "--wait", "-J", "site-off", "--wrap", "sleep 60"],
        env=env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: bool(cluster.run(["squeue", "-h", "-n", "site-off", "-t", "R"]).stdout))
        assert exe(p.pid).startswith("python")  # the client ran the command's launcher itself
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        assert p.returncode == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        cluster.run(["scancel", "-n", "site-off"])
    out = cluster.run(["sinfo", "-h", "-o", "%P"], env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "gpu*\n", "")  # the key is muster's own: no warning
