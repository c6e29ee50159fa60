"""Test harness for real daemons on loopback: a local cluster plus helpers that run the
commands as a user would (through the installed console scripts, optionally as another
uid via setpriv)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from muster.cluster.local import ClusterShape, LocalCluster
from waiting import wait_for

BIN = os.path.dirname(sys.executable)


def process_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def fill_disk(path: str) -> None:
    """Write zeros into ``path`` until its file system says ENOSPC (a full-disk fault)."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


def ensure_user(name: str) -> int:
    """The uid of local user ``name``, created (no home, own group) when missing: tests that
    act as other users call it as root."""
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", name], check=True, capture_output=True
    )
    return pwd.getpwnam(name).pw_uid


class Harness:
    """A local cluster for a test. Its links are plain HTTP on loopback unless ``tls`` (or
    ``$MUSTER_TEST_TLS=1``, to run a whole suite over TLS) asks for ``muster up``'s default,
    ``TLSType=tls/muster``; a test's own ``settings`` win over both."""

    def __init__(
        self,
        shape: ClusterShape,
        root: str | None = None,
        settings: dict[str, str] | None = None,
        topology: str | None = None,
        tls: bool | None = None,
    ) -> None:
        if tls is None:
            tls = os.environ.get("MUSTER_TEST_TLS") == "1"
        # With TLS the cluster's config is exactly what `muster up` writes (TLS is its default).
        self.settings = {**({} if tls else {"TLSType": "tls/none"}), **(settings or {})} or None
        self.topology = topology  # topology.conf text, if any
        self.root = root or tempfile.mkdtemp(prefix="muster-it-")
        os.chmod(self.root, 0o755)
        self.cluster = LocalCluster(os.path.join(self.root, "state"))
        self.shape = shape
        self.workdir = os.path.join(self.root, "work")
        os.makedirs(self.workdir, exist_ok=True)
        os.chmod(self.workdir, 0o1777)  # jobs of other test users write here too

    def up(self) -> None:
        if not self.cluster.exists:
            self.cluster.create(self.shape, self.settings, self.topology)
        self.cluster.start()
        self.cluster.wait_ready(60)

    def down(self, remove: bool = True) -> None:
        if self.cluster.exists:
            self.cluster.stop()
        if remove and not os.environ.get("MUSTER_KEEP_TEST_STATE"):  # kept for a post-mortem
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["MUSTER_CONF"] = self.cluster.conf_path
        env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
        for k in list(env):
            if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_")):
                del env[k]
        return env

    def run(
        self,
        argv: list[str] | str,
        *,
        uid: int | None = None,
        input: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command; ``argv`` as a string is split by the shell."""
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        if uid is not None:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
        return subprocess.run(
            argv,
            input=input,
            cwd=cwd or self.workdir,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def sbatch(self, *args: str, uid: int | None = None, **kw: Any) -> int:
        out = self.run(["sbatch", "--parsable", *args], uid=uid, **kw)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, Any]:
        return self.cluster.api("GET", f"/v1/jobs/{job_id}")["job"]

    def wait_job(
        self, job_id: int, done: Callable[[dict[str, Any]], bool] | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until the job has ended (and is no longer completing), or ``done`` says so."""
        check = done or (lambda j: j["state"] not in ("PENDING", "RUNNING") and not j["completing"])
        seen: list[dict[str, Any]] = []

        def reached() -> dict[str, Any] | None:
            seen[:] = [self.job(job_id)]
            return seen[0] if check(seen[0]) else None

        try:
            return wait_for(reached, timeout, what=f"job {job_id} to reach the expected state")
        except AssertionError:
            raise AssertionError(f"job {job_id} did not reach the expected state: {seen[0]['state']}") from None

    def wait_state(self, job_id: int, state: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_job(job_id, lambda j: j["state"] == state, timeout)

    def passes(self) -> int:
        """How many scheduling passes the controller has ended (sdiag's cycles)."""
        return int(self.cluster.api("GET", "/v1/diag")["cycles"])

    def wait_passes(self, count: int = 2, timeout: float = 30) -> None:
        """Wait until ``count`` more scheduling passes have ended: with two, one of them began
        after this call, so a job still pending then was considered and left to wait (what a
        test that asserts "it does not start" waits for, instead of a fixed sleep)."""
        target = self.passes() + count
        wait_for(lambda: self.passes() >= target, timeout, what=f"{count} more scheduling passes")

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo's long form names it (IDLE, DOWN, ...)."""
        return {n["name"]: n["state"] for n in self.cluster.api("GET", "/v1/nodes")["nodes"]}

    def agent_pid(self, node: str) -> int:
        """The pid of the agent process hosting ``node`` (its own, or one it shares under
        ``ClusterShape.nodes_per_agent``)."""
        pid = self.cluster.node_pid(node)
        assert pid is not None, f"no agent runs {node}"
        return pid

    def read(self, path: str) -> str:
        with open(path if os.path.isabs(path) else os.path.join(self.workdir, path)) as f:
            return f.read()
