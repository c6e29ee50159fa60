"""The REST suite's world (tests/rest): one local cluster (2 nodes with 2 GPUs each,
PrivateData=jobs), musterrestd on a loopback port in front of it, and two unprivileged users (created when the suite runs as
root) who get their tokens from ``scontrol token``, as a user would."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape
from waiting import wait_for

ALICE, BOB = "musterrest-alice", "musterrest-bob"
V = "/slurm/v0.0.40"
DB = "/slurmdb/v0.0.40"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rest:
    """The cluster, musterrestd's URL, and each user's token."""

    h: Harness
    url: str
    alice: int
    bob: int
    tokens: dict[str, str]

    def token(self, user: str, *, as_uid: int | None = None, lifespan: int | None = None) -> str:
        args = ["scontrol", "token"] + ([f"lifespan={lifespan}"] if lifespan else [])
        if as_uid is None:
            args.append(f"username={user}")
        out = self.h.run(args, uid=as_uid)
        assert out.returncode == 0, out.stderr
        line = out.stdout.strip()
        assert line.startswith("SLURM_JWT="), line
        return line.split("=", 1)[1]

    def headers(self, user: str) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self.tokens[user]}

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(user), timeout=30)

    def wait(self, user: str, job_id: int, states: set[str], timeout: float = 60) -> dict:
        with self.client(user) as c:

            def reached() -> dict | None:
                r = c.get(f"{V}/job/{job_id}")
                assert r.status_code == 200, r.text
                job: dict = r.json()["jobs"][0]
                return job if set(job["job_state"]) & states else None

            return wait_for(reached, timeout, interval=0.2, what=f"job {job_id} in {sorted(states)}")


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"musterrestd exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_for(listening, timeout, interval=0.1, what="musterrestd listening")


def rest_world() -> Iterator[Rest]:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("the REST suite runs as root: it creates two unprivileged users")
    alice, bob = ensure_user(ALICE), ensure_user(BOB)
    h = Harness(
        ClusterShape(nodes=2, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"PrivateData": "jobs"},
    )
    h.up()
    port = free_port()
    log = open(os.path.join(h.root, "musterrestd.log"), "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "muster.rest.main", "-a", "rest_auth/jwt", f"127.0.0.1:{port}"],
        env=h.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_port(port, proc)
        r = Rest(h, f"http://127.0.0.1:{port}", alice, bob, {})
        r.tokens[ALICE] = r.token(ALICE, as_uid=alice)
        r.tokens[BOB] = r.token(BOB, as_uid=bob)
        r.tokens["root"] = r.token("root", as_uid=None)
        yield r
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        h.down()
