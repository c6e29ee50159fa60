"""musterd end to end: the real agent process against a small fake controller.

The fake controller is a Starlette app on loopback that checks every request's signature
and records registrations, heartbeats and job_done reports; tests steer its answers (kill
lists, a 404 that asks for re-registration, going away and coming back). Requests to the
agent are signed like the real controller's.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import waiting
from harness import process_running
from muster.core.clock import SystemClock
from muster.protocol import client as lean_client
from muster.protocol.httpd import SignatureError, Verifier
from muster.protocol.signing import ReplayGuard, generate_key, sign_request, verify_credential

pytestmark = pytest.mark.integration

NOBODY = 65534


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    return waiting.wait_for(check, timeout, what=what)


# --- the fake controller ---------------------------------------------------------------


class FakeController:
    def __init__(self, key: bytes, port: int) -> None:
        self.port = port
        self.verifier = Verifier(key, SystemClock(), "ctld")
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        self.bad_signatures = 0
        self.kill: list[int] = []
        self.heartbeat_404 = False
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    async def _verified(self, request: Request) -> dict[str, Any] | None:
        body = await request.body()
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            self.verifier.verify(request.method, target, body, {k.lower(): v for k, v in request.headers.items()})
        except SignatureError:
            self.bad_signatures += 1
            return None
        return json.loads(body)

    def app(self) -> Starlette:
        async def register(request: Request) -> JSONResponse:
            body = await self._verified(request)
            if body is None:
                return JSONResponse({"error": "bad signature", "code": "auth"}, status_code=401)
            self.registrations.append(body)
            return JSONResponse({"ok": True, "kill": list(self.kill)})

        async def heartbeat(request: Request) -> JSONResponse:
            body = await self._verified(request)
            if body is None:
                return JSONResponse({"error": "bad signature", "code": "auth"}, status_code=401)
            self.heartbeats.append(body)
            if self.heartbeat_404:
                self.heartbeat_404 = False
                return JSONResponse({"error": "node must register", "code": "not_found"}, status_code=404)
            return JSONResponse({"ok": True, "kill": list(self.kill)})

        async def job_done(request: Request) -> JSONResponse:
            body = await self._verified(request)
            if body is None:
                return JSONResponse({"error": "bad signature", "code": "auth"}, status_code=401)
            self.reports.append(body)
            return JSONResponse({"ok": True})

        return Starlette(
            routes=[
                Route("/v1/agent/register", register, methods=["POST"]),
                Route("/v1/agent/heartbeat", heartbeat, methods=["POST"]),
                Route("/v1/agent/job_done", job_done, methods=["POST"]),
            ]
        )

    def start(self) -> None:
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_for(lambda: self._server is not None and self._server.started, what="fake controller")

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None

    def report_for(self, job_id: int) -> dict[str, Any] | None:
        return next((r for r in self.reports if r["job_id"] == job_id), None)

    def wait_report(self, job_id: int, timeout: float = 15.0) -> dict[str, Any]:
        return wait_for(lambda: self.report_for(job_id), timeout, f"job_done of job {job_id}")


# --- the cluster of one node -------------------------------------------------------------


class AgentWorld:
    """A config, a key, a fake controller and (started on demand) one musterd."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="muster-agent-it-")
        os.chmod(self.root, 0o755)
        self.work = os.path.join(self.root, "work")
        os.makedirs(self.work)
        os.chmod(self.work, 0o1777)
        self.key_path = os.path.join(self.root, "muster.key")
        self.key = generate_key(self.key_path)
        self.ctld_port = _free_port()
        self.agent_port = _free_port()
        self.ports = {"node1": self.agent_port, "node2": _free_port()}
        self.state_dir = os.path.join(self.root, "state")
        self.conf_path = os.path.join(self.root, "muster.conf")
        with open(self.conf_path, "w") as f:
            f.write(
                "ClusterName=itest\n"
                f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={self.ctld_port}\n"
                f"AuthKeyFile={self.key_path}\nAgentSocketDir={self.root}/run\n"
                "SlurmdTimeout=5\nKillWait=1\nDefMemPerCPU=100\nTaskPlugin=task/affinity\n"
                f"NodeName=node1 NodeAddr=127.0.0.1 Port={self.agent_port} CPUs=32 RealMemory=128000 Gres=gpu:a100:4\n"
                f"NodeName=node2 NodeAddr=127.0.0.1 Port={self.ports['node2']} CPUs=32 RealMemory=128000 Gres=gpu:a100:4\n"
                "PartitionName=gpu Nodes=ALL Default=YES\n"
            )
        self.ctld = FakeController(self.key, self.ctld_port)
        self.ctld.start()
        self.agent: subprocess.Popen[bytes] | None = None
        self.neighbour: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.root, "musterd.log")
        self.next_job = 100
        self.http = httpx.Client(timeout=10)

    # agent process

    def start_agent(self) -> None:
        self.agent = self._spawn("node1", self.state_dir, self.log_path)

    def start_neighbour(self) -> subprocess.Popen[bytes]:
        """node2's agent, on the same host (as under `muster up`)."""
        self.neighbour = self._spawn("node2", os.path.join(self.root, "state2"), self.log_path + ".2")
        return self.neighbour

    def _spawn(self, node: str, state_dir: str, log_path: str) -> subprocess.Popen[bytes]:
        n = len(self.ctld.registrations)
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "muster.agent.main",
                "--conf",
                self.conf_path,
                "--node",
                node,
                "--state-dir",
                state_dir,
                "--log-file",
                log_path,
                "--gpu-detect",
                "emulate",
            ],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: len(self.ctld.registrations) > n or agent.poll() is not None, 20, "registration")
        assert agent.poll() is None, self.log()
        return agent

    def stop_agent(self) -> int:
        assert self.agent is not None
        self.agent.send_signal(signal.SIGTERM)
        rc = self.agent.wait(15)
        self.agent = None
        return rc

    def log(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def close(self) -> None:
        for agent in (self.agent, self.neighbour):
            if agent is not None and agent.poll() is None:
                agent.kill()
                agent.wait(10)
        self._kill_jobs()
        self.ctld.stop()
        self.http.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_jobs(self) -> None:
        marker = f"SLURM_CONF={self.conf_path}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass

    # requests to the agent, signed like the controller's

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, sign: bool = True, node: str = "node1"
    ) -> httpx.Response:
        payload = json.dumps(body).encode() if body is not None else b""
        headers = (
            sign_request(self.key, method, path, payload, time.time(), sender="ctld", receiver=node) if sign else {}
        )
        url = f"http://127.0.0.1:{self.ports[node]}{path}"
        r = self.http.request(method, url, content=payload, headers=headers)
        if sign and r.status_code == 401 and r.json().get("code") == "stale":
            # the agent restarted within its replay floor's step: sign anew at the floor,
            # as the controller's client does
            at = r.json()["floor"] + 0.001
            headers = sign_request(self.key, method, path, payload, at, sender="ctld", receiver=node)
            r = self.http.request(method, url, content=payload, headers=headers)
        return r

    def job(self, script: str, *, uid: int = 0, time_limit: int | None = 60, **spec: Any) -> dict[str, Any]:
        self.next_job += 1
        user = pwd.getpwuid(uid)
        return {
            "job_id": self.next_job,
            "user": user.pw_name,
            "uid": uid,
            "group": "g",
            "gid": user.pw_gid,
            "partition": "gpu",
            "submit_host": "login1",
            "start_time": time.time(),
            "time_limit": time_limit,
            "restart_count": spec.pop("restart_count", 0),
            "state": "RUNNING",
            "spec": {
                "name": "itest",
                "script": script,
                "workdir": self.work,
                "environment": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                **spec,
            },
            "shape": {"nodes": 1, "cpus_per_node": 2, "mem_per_node": 200, "gpus_per_node": 2, "ntasks": 1},
            "alloc": [{"node": "node1", "cpus": 2, "mem": 200, "gpu_ids": [1, 3]}],
        }

    def launch(self, job: dict[str, Any], node: str = "node1") -> httpx.Response:
        body = {"job": job, "cluster": "itest", "ctld": f"127.0.0.1:{self.ctld_port}", "kill_wait": 1}
        return self.call("POST", "/v1/launch", body, node=node)

    def read(self, name: str) -> str:
        with open(os.path.join(self.work, name)) as f:
            return f.read()

    def running(self) -> list[int]:
        return self.call("GET", "/v1/status").json()["running"]


@pytest.fixture(scope="module")
def world() -> Iterator[AgentWorld]:
    w = AgentWorld()
    try:
        w.start_agent()
        yield w
    finally:
        w.close()


@pytest.fixture
def private_world() -> Iterator[AgentWorld]:
    w = AgentWorld()
    try:
        yield w
    finally:
        w.close()


# --- tests ---------------------------------------------------------------------------------


def test_the_agent_registers_its_configured_resources_and_heartbeats(world: AgentWorld) -> None:
    reg = world.ctld.registrations[0]
    assert (reg["node"], reg["addr"], reg["port"]) == ("node1", "127.0.0.1", world.agent_port)
    assert (reg["cpus"], reg["real_memory"], reg["gpus"], reg["gpu_type"]) == (32, 128000, 4, "a100")
    assert reg["gpu_source"] == "emulated" and reg["running"] == []
    wait_for(lambda: world.ctld.heartbeats, 5, "a heartbeat")
    assert world.ctld.heartbeats[0]["node"] == "node1"
    assert world.ctld.bad_signatures == 0


def test_unsigned_or_tampered_requests_are_refused(world: AgentWorld) -> None:
    assert world.call("GET", "/v1/status", sign=False).status_code == 401
    payload = json.dumps({"job_id": 1, "signal": 10}).encode()
    headers = sign_request(world.key, "POST", "/v1/signal", b"{}", time.time(), sender="ctld", receiver="node1")
    r = world.http.post(f"http://127.0.0.1:{world.agent_port}/v1/signal", content=payload, headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "auth"
    headers = sign_request(world.key, "GET", "/v1/status", b"", time.time(), sender="ctld", receiver="node1")
    url = f"http://127.0.0.1:{world.agent_port}/v1/status"
    assert world.http.get(url, headers=headers).status_code == 200
    assert world.http.get(url, headers=headers).status_code == 401  # replayed


def test_the_query_string_is_part_of_what_is_signed(world: AgentWorld) -> None:
    assert world.call("GET", "/v1/status?verbose=1").status_code == 200
    headers = sign_request(world.key, "GET", "/v1/status", b"", time.time(), sender="ctld", receiver="node1")
    r = world.http.get(f"http://127.0.0.1:{world.agent_port}/v1/status?verbose=1", headers=headers)
    assert r.status_code == 401


def test_a_batch_script_runs_with_slurms_environment_and_reports_its_exit_code(world: AgentWorld) -> None:
    job = world.job(
        "#!/bin/sh\n"
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES"\n'
        'echo "pid=$SLURM_TASK_PID self=$$ args=$1,$2 env=$ENVIRONMENT cwd=$(pwd)"\n'
        "echo to-stderr >&2\n"
        "exit 3\n",
        argv=["a", "b"],
    )
    assert world.launch(job).json() == {"ok": True}
    report = world.ctld.wait_report(job["job_id"])
    assert (report["exit_code"], report["signal"], report["terminated_by"]) == (3, 0, None)
    assert report["node"] == "node1" and report["restart_count"] == 0
    assert report["end_time"] >= report["start_time"]
    lines = world.read(f"slurm-{job['job_id']}.out").splitlines()
    assert lines[0] == f"id={job['job_id']} name=itest node=node1 cuda=1,3"
    fields = dict(item.split("=", 1) for item in lines[1].split())
    assert fields["pid"] == fields["self"]
    assert (fields["env"], fields["cwd"]) == ("BATCH", world.work)
    assert "to-stderr" in lines
    assert fields["args"] == "a,b"
    assert not os.path.exists(os.path.join(world.state_dir, "spool", f"job{job['job_id']:05d}"))


def test_output_patterns_stdin_and_append_mode(world: AgentWorld) -> None:
    with open(os.path.join(world.work, "input.txt"), "w") as f:
        f.write("from stdin\n")
    job = world.job(
        "#!/bin/sh\ncat\necho err >&2\n",
        stdout="out-%x-%j.txt",
        stderr="err-%5j.txt",
        stdin="input.txt",
        restart_count=1,
    )
    with open(os.path.join(world.work, f"out-itest-{job['job_id']}.txt"), "w") as f:
        f.write("earlier run\n")
    assert world.launch(job).status_code == 200
    world.ctld.wait_report(job["job_id"])
    assert world.read(f"out-itest-{job['job_id']}.txt") == "earlier run\nfrom stdin\n"
    assert world.read(f"err-{job['job_id']:05d}.txt") == "err\n"


def test_a_script_without_a_shebang_runs_under_sh(world: AgentWorld) -> None:
    job = world.job("echo plain $0\n")
    assert world.launch(job).status_code == 200
    assert world.ctld.wait_report(job["job_id"])["exit_code"] == 0
    assert world.read(f"slurm-{job['job_id']}.out").startswith("plain ")


def test_a_job_of_another_user_runs_as_that_user_and_owns_its_output(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\nid -u; id -g; echo $SLURM_JOB_USER $HOME\n", uid=NOBODY)
    assert world.launch(job).status_code == 200
    assert world.ctld.wait_report(job["job_id"])["exit_code"] == 0
    path = os.path.join(world.work, f"slurm-{job['job_id']}.out")
    assert os.stat(path).st_uid == NOBODY
    uid, gid, rest = world.read(path).split("\n", 2)
    assert (uid, gid) == (str(NOBODY), str(pwd.getpwuid(NOBODY).pw_gid))
    assert rest.startswith("nobody ")


def test_a_user_cannot_make_root_write_where_the_user_cannot(world: AgentWorld) -> None:
    private = os.path.join(world.root, "root-only")
    os.makedirs(private, mode=0o700, exist_ok=True)
    job = world.job("#!/bin/sh\necho never\n", uid=NOBODY, stdout=os.path.join(private, "x.out"))
    r = world.launch(job)
    assert r.status_code == 500 and r.json()["code"] == "launch_failed"
    assert "opening the output file" in r.json()["error"] and "Permission denied" in r.json()["error"]
    assert not os.path.exists(os.path.join(private, "x.out"))
    report = world.ctld.wait_report(job["job_id"])
    assert report["exit_code"] == 1 and "Permission denied" in report["reason"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workdir": "/nonexistent/dir"}, "working directory /nonexistent/dir"),
        ({"script": "#!/no/such/interpreter\n"}, "executing"),
    ],
)
def test_a_job_that_cannot_start_is_reported_failed_with_the_reason(
    world: AgentWorld, change: dict[str, Any], message: str
) -> None:
    job = world.job("#!/bin/sh\ntrue\n")
    job["spec"].update(change)
    if "workdir" in change:
        job["spec"]["stdout"] = os.path.join(world.work, "never-%j.out")
    r = world.launch(job)
    assert r.status_code == 500 and message in r.json()["error"]
    report = world.ctld.wait_report(job["job_id"])
    assert (report["exit_code"], report["terminated_by"]) == (1, None)
    assert message in report["reason"]
    assert job["job_id"] not in world.running()


def test_an_unknown_user_is_refused(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\ntrue\n")
    job["uid"], job["user"] = 4_000_123, "ghost"
    r = world.launch(job)
    assert r.status_code == 500 and "unknown" in r.json()["error"]


def test_the_time_limit_sends_term_then_kill_and_reports_a_timeout(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\ntrap '' TERM\necho started\nsleep 60\n", time_limit=1)
    started = time.monotonic()
    assert world.launch(job).status_code == 200
    report = world.ctld.wait_report(job["job_id"])
    elapsed = time.monotonic() - started
    assert (report["terminated_by"], report["signal"]) == ("timeout", signal.SIGKILL)
    assert 1.5 < elapsed < 8
    text = world.read(f"slurm-{job['job_id']}.out")
    banner = next(line for line in text.splitlines() if "CANCELLED AT" in line)
    assert banner.startswith(f"slurmstepd: error: *** JOB {job['job_id']} ON node1 CANCELLED AT ")
    assert banner.endswith(" DUE TO TIME LIMIT ***")


def test_terminate_reaches_the_whole_tree_including_setsid_escapes(world: AgentWorld) -> None:
    job = world.job(
        "#!/bin/sh\n(sleep 300; echo late) & setsid sleep 301 & echo $! > tree-$SLURM_JOB_ID.pid\nsleep 302\n"
    )
    assert world.launch(job).status_code == 200
    pid_file = os.path.join(world.work, f"tree-{job['job_id']}.pid")
    escaped = int(wait_for(lambda: os.path.exists(pid_file) and open(pid_file).read().strip(), 5, "pid file"))
    assert wait_for(lambda: job["job_id"] in world.running(), 5, "running")
    assert (
        world.call("POST", "/v1/terminate", {"job_id": job["job_id"], "reason": "cancel", "kill_wait": 1}).json()[
            "running"
        ]
        is True
    )
    report = world.ctld.wait_report(job["job_id"])
    assert report["terminated_by"] == "cancel" and report["signal"] == signal.SIGTERM
    wait_for(lambda: not process_running(escaped), 5, "the setsid escape to die")


def test_a_daemon_that_double_forked_away_dies_with_the_job(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\nsetsid sh -c 'sleep 303 & echo $! > daemon-'$SLURM_JOB_ID'.pid' &\nsleep 1\nexit 0\n")
    assert world.launch(job).status_code == 200
    assert world.ctld.wait_report(job["job_id"])["exit_code"] == 0
    pid = int(world.read(f"daemon-{job['job_id']}.pid").strip())
    wait_for(lambda: not process_running(pid), 5, "the orphaned daemon to be swept")


def test_the_jobs_orphans_that_end_while_it_runs_are_reaped_by_its_monitor(world: AgentWorld) -> None:
    # Each `true` is orphaned at once: the monitor, their subreaper, inherits and reaps it,
    # so it has no child but the script (no zombies pile up under a long job).
    job = world.job(
        "#!/bin/sh\nfor i in 1 2 3 4 5; do sh -c 'true &'; done\nsleep 0.5\n"
        "wc -w < /proc/$PPID/task/$PPID/children > kids-$SLURM_JOB_ID\n"
    )
    assert world.launch(job).status_code == 200
    assert world.ctld.wait_report(job["job_id"])["exit_code"] == 0
    assert world.read(f"kids-{job['job_id']}").strip() == "1"


def test_monitors_are_forked_by_the_agents_spawner_which_goes_with_the_agent(private_world: AgentWorld) -> None:
    w = private_world
    w.start_agent()
    assert w.agent is not None
    job = w.job("#!/bin/sh\nawk '{print $4}' /proc/$PPID/stat > spawner-$SLURM_JOB_ID\n")
    assert w.launch(job).status_code == 200
    assert w.ctld.wait_report(job["job_id"])["exit_code"] == 0
    spawner = int(w.read(f"spawner-{job['job_id']}").strip())  # the monitor's parent
    with open(f"/proc/{spawner}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == w.agent.pid
    with open(f"/proc/{spawner}/cmdline", "rb") as f:
        assert b"muster.agent.zygote" in f.read()
    w.agent.kill()
    w.agent.wait(10)
    wait_for(lambda: not process_running(spawner), 5, "the spawner to leave with its agent")


def test_signals_go_to_the_job_or_only_its_batch_shell(world: AgentWorld) -> None:
    job = world.job(
        "#!/bin/bash\ntrap 'echo got USR1' USR1\ntouch ready-$SLURM_JOB_ID\nfor i in $(seq 100); do sleep 0.1; done\n"
    )
    assert world.launch(job).status_code == 200
    wait_for(lambda: os.path.exists(os.path.join(world.work, f"ready-{job['job_id']}")), 5, "trap")
    r = world.call("POST", "/v1/signal", {"job_id": job["job_id"], "signal": int(signal.SIGUSR1), "batch_only": True})
    assert r.json() == {"ok": True}
    wait_for(lambda: "got USR1" in world.read(f"slurm-{job['job_id']}.out"), 5, "USR1 in the output")
    assert world.call("POST", "/v1/signal", {"job_id": 999_999, "signal": 10}).status_code == 404
    world.call("POST", "/v1/terminate", {"job_id": job["job_id"], "reason": "cancel", "kill_wait": 1})
    world.ctld.wait_report(job["job_id"])


def test_the_controllers_kill_list_is_obeyed(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\nsleep 300\n")
    assert world.launch(job).status_code == 200
    world.ctld.kill = [job["job_id"]]
    try:
        report = world.ctld.wait_report(job["job_id"])
    finally:
        world.ctld.kill = []
    assert report["terminated_by"] == "cancel"


def test_running_jobs_appear_in_status_and_heartbeats(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\nsleep 300\n")
    assert world.launch(job).status_code == 200
    assert world.launch(job).json() == {"ok": True}  # a repeated launch is harmless
    status = world.call("GET", "/v1/status").json()
    assert status["node"] == "node1" and job["job_id"] in status["running"]
    n = len(world.ctld.heartbeats)
    wait_for(lambda: len(world.ctld.heartbeats) > n + 1, 5, "heartbeats")
    assert [job["job_id"], 0] in world.ctld.heartbeats[-1]["running"]
    world.call("POST", "/v1/terminate", {"job_id": job["job_id"], "reason": "cancel"})
    world.ctld.wait_report(job["job_id"])


def test_a_404_heartbeat_makes_the_agent_register_again(world: AgentWorld) -> None:
    n = len(world.ctld.registrations)
    world.ctld.heartbeat_404 = True
    wait_for(lambda: len(world.ctld.registrations) > n, 8, "re-registration")


def test_the_credential_socket_vouches_for_the_callers_uid(world: AgentWorld) -> None:
    sock = os.path.join(world.root, "run", "musterd-node1.sock")
    assert os.stat(sock).st_mode & 0o777 == 0o666
    answer = lean_client.request("POST", "/v1/credential", {}, unix_path=sock)
    uid, gid = verify_credential(world.key, answer["credential"], time.time(), ReplayGuard())
    assert (uid, gid) == (os.getuid(), os.getgid())
    code = (
        "import json,sys; from muster.protocol import client;"
        f"print(client.request('POST','/v1/credential',{{}},unix_path={sock!r})['credential'])"
    )
    out = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert verify_credential(world.key, out.stdout.strip(), time.time(), ReplayGuard())[0] == NOBODY


def test_reports_wait_for_a_controller_that_is_down(private_world: AgentWorld) -> None:
    w = private_world
    w.start_agent()
    w.ctld.stop()
    job = w.job("#!/bin/sh\nexit 7\n")
    w.launch(job)
    reports = os.path.join(w.state_dir, "reports")
    wait_for(lambda: os.listdir(reports), 5, "a saved report")
    time.sleep(1.5)  # sleep: the outage lasts a while, and the agent retries meanwhile
    n = len(w.ctld.registrations)
    w.ctld.start()
    report = w.ctld.wait_report(job["job_id"])
    assert report["exit_code"] == 7
    wait_for(lambda: len(w.ctld.registrations) > n, 10, "re-registration after the outage")
    wait_for(lambda: not os.listdir(reports), 5, "the report to be deleted once acknowledged")


def test_a_stopped_agent_leaves_jobs_running_and_its_successor_adopts_them(private_world: AgentWorld) -> None:
    w = private_world
    w.start_agent()
    keep = w.job("#!/bin/sh\necho $$ > keep-$SLURM_JOB_ID.pid\nsleep 300\n")
    lost = w.job("#!/bin/sh\necho $$ > lost-$SLURM_JOB_ID.pid\nsleep 300\n")
    done = w.job(
        "#!/bin/sh\necho $$ > done-$SLURM_JOB_ID.pid\nwhile [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done\nexit 3\n"
    )
    for job in (keep, lost, done):
        assert w.launch(job).status_code == 200
    keep_pid = int(wait_for(lambda: _read(w, f"keep-{keep['job_id']}.pid"), 5, "pid"))
    lost_pid = int(wait_for(lambda: _read(w, f"lost-{lost['job_id']}.pid"), 5, "pid"))
    done_pid = int(wait_for(lambda: _read(w, f"done-{done['job_id']}.pid"), 5, "pid"))
    assert w.stop_agent() == 0
    time.sleep(0.3)  # sleep: a negative check: whatever the stop would kill has had time to die
    assert process_running(keep_pid) and process_running(lost_pid) and process_running(done_pid)
    os.kill(lost_pid, signal.SIGKILL)  # ends while no agent watches: its monitor keeps the status
    n = len(w.ctld.registrations)
    w.start_agent()
    reg = w.ctld.registrations[n]
    assert reg["running"] == [[keep["job_id"], 0], [done["job_id"], 0]]
    report = w.ctld.wait_report(lost["job_id"])
    assert (report["exit_code"], report["signal"], report["terminated_by"]) == (0, signal.SIGKILL, None)
    open(os.path.join(w.work, f"go-{done['job_id']}"), "w").close()  # ends by itself, adopted
    report = w.ctld.wait_report(done["job_id"])
    assert (report["exit_code"], report["signal"], report["terminated_by"]) == (3, 0, None)
    assert (
        w.call("POST", "/v1/terminate", {"job_id": keep["job_id"], "reason": "cancel", "kill_wait": 1}).status_code
        == 200
    )
    report = w.ctld.wait_report(keep["job_id"])
    assert report["terminated_by"] == "cancel"
    wait_for(lambda: not process_running(keep_pid), 5, "the adopted job to die")
    assert os.listdir(os.path.join(w.state_dir, "exits")) == []


def test_bad_startup_input_fails_clearly(private_world: AgentWorld) -> None:
    w = private_world
    run = [sys.executable, "-m", "muster.agent.main", "--conf", w.conf_path, "--state-dir", w.state_dir]
    out = subprocess.run([*run, "--node", "nosuch"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "musterd: error: node nosuch is not defined" in out.stderr
    out = subprocess.run(
        [*run[:3], "--conf", "/nonexistent.conf", "--node", "node1"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 1 and "/nonexistent.conf" in out.stderr
    os.chmod(w.key_path, 0o644)
    out = subprocess.run([*run, "--node", "node1"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "chmod 600" in out.stderr


def _read(w: AgentWorld, name: str) -> str:
    try:
        return w.read(name).strip()
    except OSError:
        return ""


def test_the_job_inherits_no_ignored_signals_from_the_agent(world: AgentWorld) -> None:
    job = world.job("#!/bin/sh\ngrep -E '^Sig(Ign|Blk)' /proc/self/status\nyes | head -n 1 >/dev/null\n")
    assert world.launch(job).status_code == 200
    assert world.ctld.wait_report(job["job_id"])["exit_code"] == 0
    text = world.read(f"slurm-{job['job_id']}.out")
    masks = dict(line.split(":\t") for line in text.splitlines() if line.startswith("Sig"))
    # Signals 32 and 33 belong to glibc's threads; no program can change them, and a parent
    # (CI runs under timeout(1)) may pass them on ignored.
    glibc_reserved = (1 << 31) | (1 << 32)
    assert int(masks["SigIgn"], 16) & ~glibc_reserved == 0, text
    assert int(masks["SigBlk"], 16) == 0, text
    assert "Broken pipe" not in text


def test_a_malformed_launch_is_refused_without_harm(world: AgentWorld) -> None:
    assert world.call("POST", "/v1/launch", {"job": {"spec": {}}}).status_code == 400
    # a job that is no LaunchJob (protocol.messages) is refused whole, naming the field
    r = world.call("POST", "/v1/launch", {"job": {"job_id": 4242, "spec": None}})
    assert r.status_code == 400 and "job.spec" in r.json()["error"], r.text
    r = world.call("POST", "/v1/launch", {"job": {"job_id": 4242, "uid": None, "spec": {}}})
    assert r.status_code == 500 and r.json()["code"] == "launch_failed"
    assert world.call("GET", "/v1/status").status_code == 200


def test_several_launches_in_one_request_are_each_answered(world: AgentWorld) -> None:
    """``/v1/launches``: one pass's launches to a node in one request; each starts (or
    fails) as alone, and the answers come in order, a failure with its status."""
    good = [world.job("#!/bin/sh\nexit 0\n"), world.job("#!/bin/sh\nexit 4\n")]
    bad = {"job_id": 4343, "uid": None, "spec": {}}
    body = {"launches": [{"job": j, "cluster": "itest", "kill_wait": 1} for j in (good[0], bad, good[1])]}
    r = world.call("POST", "/v1/launches", body)
    assert r.status_code == 200
    answers = r.json()["answers"]
    assert answers[0] == {"ok": True} and answers[2] == {"ok": True}
    assert answers[1]["code"] == "launch_failed" and answers[1]["status"] == 500
    assert world.ctld.wait_report(good[0]["job_id"])["exit_code"] == 0
    assert world.ctld.wait_report(good[1]["job_id"])["exit_code"] == 4
    assert world.call("POST", "/v1/launches", {"launches": [{"job": {"spec": {}}}]}).status_code == 400


def test_a_rerun_on_a_neighbour_agent_survives_the_sweep_of_its_old_run(private_world: AgentWorld) -> None:
    """Two agents on one host: the requeued run of a job starts on node2 while node1 still
    sweeps the old run's processes; the sweep must not reach across."""
    w = private_world
    w.start_agent()
    w.start_neighbour()
    old = w.job("#!/bin/sh\nsetsid sh -c 'sleep 304 & echo $! > old.pid' &\nsleep 300\n")
    assert w.launch(old).status_code == 200
    old_daemon = int(wait_for(lambda: _read(w, "old.pid"), 5, "old run's daemon"))
    rerun = {**old, "restart_count": 1, "alloc": [{"node": "node2", "cpus": 2, "mem": 200, "gpu_ids": [0]}]}
    rerun["spec"] = {**old["spec"], "script": "#!/bin/sh\necho $$ > rerun.pid\nsleep 300\n", "stdout": "rerun.out"}
    assert w.launch(rerun, node="node2").status_code == 200
    rerun_pid = int(wait_for(lambda: _read(w, "rerun.pid"), 5, "rerun"))
    w.call("POST", "/v1/terminate", {"job_id": old["job_id"], "reason": "node_fail", "kill_wait": 1})
    wait_for(lambda: w.ctld.report_for(old["job_id"]), 10, "the old run's report")
    wait_for(lambda: not process_running(old_daemon), 5, "the old run's daemon to be swept")
    time.sleep(0.3)  # sleep: a negative check: a sweep that reached the rerun has had time to end it
    assert process_running(rerun_pid)
    w.call("POST", "/v1/terminate", {"job_id": old["job_id"], "reason": "cancel", "kill_wait": 1}, node="node2")
    wait_for(lambda: not process_running(rerun_pid), 5, "the rerun to stop")


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2,
    reason="two jobs or tasks can only get CPUs of their own on a host with two or more (CI has two)",
)
def test_under_task_affinity_batch_scripts_are_pinned_to_cpus_of_their_own(world: AgentWorld) -> None:
    script = "#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status\nsleep 1\n"
    jobs = [world.job(script) for _ in range(2)]
    for job in jobs:
        job["alloc"][0]["cpus"] = 1
        assert world.launch(job).json() == {"ok": True}
    for job in jobs:
        world.ctld.wait_report(job["job_id"])
    pinned = [world.read(f"slurm-{job['job_id']}.out").split()[-1] for job in jobs]
    assert all(p.isdigit() for p in pinned), pinned
    assert pinned[0] != pinned[1]


def test_a_controller_that_took_over_has_the_agent_register_at_once(world: AgentWorld) -> None:
    seen = len(world.ctld.registrations)
    r = world.call("POST", "/v1/register", {"controller": 0})
    assert r.status_code == 200, r.text
    # now, not at its next heartbeat
    wait_for(lambda: len(world.ctld.registrations) > seen, 5, "a registration")
    assert world.call("POST", "/v1/register", {}, sign=False).status_code == 401
