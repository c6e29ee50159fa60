"""A login node without an agent, muster's own way: the credential daemon (``agent.credd``)
holding a host key made from the cluster key by ``credd keygen`` (docs/deploy.md, "Login
nodes"). The "login node" is a configuration of its own: no controller socket, an agent
socket directory holding only the daemon's socket, and no cluster key."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape
from muster.protocol import hostcred
from muster.protocol.client import ApiError, request
from muster.protocol.signing import load_key
from waiting import wait_for

pytestmark = pytest.mark.integration

USER = "mulogin2"
CREDD = [sys.executable, "-m", "muster.agent.credd"]


@dataclass
class Login:
    cluster: Harness
    root: str
    conf: str
    key: str  # login1's host key
    uid: int
    address: tuple[str, int]
    tls: tuple[str, str] | None
    cluster_key: bytes

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return self.cluster.run(argv, uid=self.uid, env={"MUSTER_CONF": self.conf})

    def ask(self, credential: str) -> dict:
        headers = {"X-Muster-Credential": credential}
        return request("GET", "/v1/jobs", address=self.address, headers=headers, timeout=10, tls=self.tls)


@pytest.fixture(scope="module")
def login() -> Iterator[Login]:
    cluster = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=1000))
    root = tempfile.mkdtemp(prefix="muster-credd-")
    os.chmod(root, 0o755)
    daemon = None
    try:
        cluster.up()
        cfg = cluster.cluster.config()
        key = os.path.join(root, "login.key")
        made = subprocess.run(
            [*CREDD, "keygen", "login1", key, "--conf", cluster.cluster.conf_path], capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
        with open(cluster.cluster.conf_path) as f:
            text = f.read()
        conf = os.path.join(root, "muster.conf")
        with open(conf, "w") as f:  # the CA is found beside AuthKeyFile; the key itself is root's
            f.write(
                text + f"\nCtldSocket={root}/no-controller-here.sock\nAgentSocketDir={root}/run\n"
                f"AuthKeyFile={cfg.auth_key_file}\n"
            )
        os.chmod(conf, 0o644)
        daemon = subprocess.Popen(
            [*CREDD, "--conf", conf, "--key", key, "--host", "login1"],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(root, "credd.log"), "wb"),  # noqa: SIM115 - the daemon's
        )
        sock = os.path.join(root, "run", "mustercredd.sock")

        def started() -> bool:
            assert daemon.poll() is None, open(os.path.join(root, "credd.log")).read()
            return os.path.exists(sock)

        wait_for(started, 30, what="mustercredd's socket")
        _host, addr = cfg.ctld_addrs[0]
        tls = (cfg.tls.ca_cert, "ctld") if cfg.tls.enabled else None
        yield Login(
            cluster, root, conf, key, ensure_user(USER), (addr, cfg.ctld_port), tls, load_key(cfg.auth_key_file)
        )
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


def test_a_user_on_a_login_node_with_the_credential_daemon_submits(login: Login) -> None:
    out = login.run(["sbatch", "--parsable", "-o", "credd-%j.out", "--wrap", "id -u"])
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())
    job = login.cluster.wait_job(job_id)
    assert (job["user"], job["uid"], job["state"]) == (USER, login.uid, "COMPLETED"), job
    assert login.cluster.read(f"credd-{job_id}.out") == f"{login.uid}\n"
    listed = login.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i %u"])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == f"{job_id} {USER}\n"


def test_a_host_credential_is_accepted_once_and_only_under_its_own_hosts_key(login: Login) -> None:
    host_key = load_key(login.key)
    cred = hostcred.make_credential(host_key, 0, 0, "login1", time.time())
    assert "jobs" in login.ask(cred)
    with pytest.raises(ApiError, match="replayed message"):
        login.ask(cred)
    # login1's key cannot speak for login2, nor can a key from another cluster key
    with pytest.raises(ApiError, match="bad login host credential signature"):
        login.ask(hostcred.make_credential(host_key, 0, 0, "login2", time.time()))
    other = hostcred.derive_key(b"another cluster's key, 32 bytes!", "login1")
    with pytest.raises(ApiError, match="bad login host credential signature"):
        login.ask(hostcred.make_credential(other, 0, 0, "login1", time.time()))
    with pytest.raises(ApiError, match="malformed login host credential"):
        login.ask("host:0:0:1:2:bad host:ff")


def test_a_credential_made_before_the_controller_started_is_refused_as_stale(login: Login) -> None:
    # within the 5-minute window, but before this controller's replay floor (its start): the
    # code tells the command that a fresh credential may be tried (client.failover)
    cred = hostcred.make_credential(load_key(login.key), 0, 0, "login1", time.time() - 250)
    with pytest.raises(ApiError, match="replay floor") as refused:
        login.ask(cred)
    assert (refused.value.status, refused.value.code) == (401, "stale")


def test_keygen_and_the_daemon_refuse_bad_keys_with_a_clear_error(login: Login) -> None:
    again = subprocess.run([*CREDD, "keygen", "login1", login.key, "--conf", login.cluster.cluster.conf_path],
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 1 and "File exists" in again.stderr, again.stderr
    bad = subprocess.run([*CREDD, "keygen", "bad:host", os.path.join(login.root, "x.key"), "--conf", login.conf],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 1 and "bad host name 'bad:host'" in bad.stderr, bad.stderr
    missing = subprocess.run([*CREDD, "--conf", login.conf, "--key", os.path.join(login.root, "none.key")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 1 and "no host key" in missing.stderr, missing.stderr
    readable = os.path.join(login.root, "open.key")
    shutil.copy(login.key, readable)
    os.chmod(readable, 0o644)
    loose = subprocess.run([*CREDD, "--conf", login.conf, "--key", readable], capture_output=True, text=True)
    assert loose.returncode == 1 and "must not be accessible by group or others" in loose.stderr, loose.stderr
