"""A login node without an agent, its users proven by MUNGE (``AuthType=auth/munge``).

Three real munged daemons run for the module, each with its own socket, key and files under a
temporary directory: the controller's and the login node's share one munge.key, the third
has a key of its own (another site's). The "login node" is a configuration of its own: the
cluster's muster.conf with no controller socket and an empty agent socket directory, so a
command there can reach the controller only over TCP, and prove its user only through its
munged. Where MUNGE is not installed the module is skipped, except in CI (``CI=true``),
where .ci/run installs it and a missing munge fails.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape
from muster.protocol import munge
from muster.protocol.client import ApiError, request

pytestmark = pytest.mark.integration

USER = "mulogin"


def _munge_missing() -> str | None:
    if shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin") is None or shutil.which("munge") is None:
        return "MUNGE is not installed (apt-get install munge libmunge2)"
    try:
        ctypes.CDLL("libmunge.so.2")
    except OSError:
        return "libmunge.so.2 cannot be loaded (apt-get install libmunge2)"
    return None


def _start_munged(root: str, name: str, key: str) -> subprocess.Popen[bytes]:
    sock = os.path.join(root, f"{name}.sock")
    proc = subprocess.Popen(
        [
            shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin") or "munged",
            "--foreground",
            "--force",  # its files sit under /tmp, which others may write
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={root}/{name}.pid",
            f"--seed-file={root}/{name}.seed",
            f"--log-file={root}/{name}.log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(root, f"{name}.err"), "wb"),  # noqa: SIM115 - the daemon's
    )
    deadline = time.monotonic() + 20
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            with open(os.path.join(root, f"{name}.err")) as f:
                raise RuntimeError(f"munged {name} did not start: {f.read()}")
        time.sleep(0.02)
    return proc


def _key(path: str) -> str:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(os.urandom(1024))
    return path


@dataclass
class Login:
    cluster: Harness
    conf: str  # the login node's muster.conf
    socket: str  # the login node's munged
    foreign: str  # a munged with another key
    uid: int
    address: tuple[str, int]
    name: str  # ClusterName
    tls: tuple[str, str] | None  # (CA, "ctld") when the cluster's links are TLS

    def run(self, argv: list[str], conf: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.cluster.run(argv, uid=self.uid, env={"MUSTER_CONF": conf or self.conf})

    def credential(self, socket: str | None = None, cluster: str | None = None, ttl: int | None = None) -> str:
        """A credential of root's (this test's) from a munged, as ``munge`` makes them."""
        argv = ["munge", "-S", socket or self.socket, "-s", munge.payload(cluster or self.name, time.time())]
        if ttl is not None:
            argv += ["-t", str(ttl)]
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()

    def ask(self, credential: str | None) -> dict:
        headers = {"X-Muster-Credential": credential} if credential is not None else None
        return request("GET", "/v1/jobs", address=self.address, headers=headers, timeout=10, tls=self.tls)


@pytest.fixture(scope="module")
def login() -> Iterator[Login]:
    why = _munge_missing()
    if why:
        if os.environ.get("CI") == "true":  # .ci/run installs munge: a skip would hide it
            pytest.fail(f"CI=true and {why}")
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="muster-munge-")
    os.chmod(root, 0o755)
    key = _key(os.path.join(root, "munge.key"))
    other = _key(os.path.join(root, "other.key"))
    daemons = [
        _start_munged(root, "ctld", key),
        _start_munged(root, "login", key),
        _start_munged(root, "foreign", other),
    ]
    cluster = Harness(
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=1000),
        settings={"AuthType": "auth/munge", "AuthInfo": f"socket={root}/ctld.sock"},
    )
    try:
        cluster.up()
        cfg = cluster.cluster.config()
        # The login node: no controller socket, no agent socket, its own munged. The cluster
        # key's path only locates the CA certificate (with TLS); the user cannot read the key.
        login_dir = os.path.join(root, "login")
        os.makedirs(os.path.join(login_dir, "run"))
        with open(cluster.cluster.conf_path) as f:
            text = f.read()
        conf = os.path.join(login_dir, "muster.conf")
        with open(conf, "w") as f:
            f.write(
                text + f"\nCtldSocket={login_dir}/no-controller-here.sock\nAgentSocketDir={login_dir}/run\n"
                f"AuthInfo=socket={root}/login.sock\nAuthKeyFile={cfg.auth_key_file}\n"
            )
        os.chmod(conf, 0o644)
        _host, addr = cfg.ctld_addrs[0]
        tls = (cfg.tls.ca_cert, "ctld") if cfg.tls.enabled else None
        sockets = (f"{root}/login.sock", f"{root}/foreign.sock")
        yield Login(cluster, conf, *sockets, ensure_user(USER), (addr, cfg.ctld_port), cfg.cluster_name, tls)
    finally:
        cluster.down()
        for proc in daemons:
            proc.terminate()
        for proc in daemons:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def test_a_user_on_a_login_node_submits_and_the_job_runs_as_that_user(login: Login) -> None:
    out = login.run(["sbatch", "--parsable", "-o", "login-%j.out", "--wrap", "id -u"])
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())
    job = login.cluster.wait_job(job_id)
    assert (job["user"], job["uid"], job["state"]) == (USER, login.uid, "COMPLETED"), job
    assert login.cluster.read(f"login-{job_id}.out") == f"{login.uid}\n"
    mine = login.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i %u"])
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == f"{job_id} {USER}\n"


def test_without_munge_the_login_node_has_no_proof(login: Login) -> None:
    # The same login node with the default AuthType: no agent, no controller socket, nothing
    # proves the user (the operator's report), which shows that the test above used MUNGE.
    conf = login.conf + ".native"
    with open(login.conf) as f, open(conf, "w") as g:
        g.write(f.read() + "AuthType=auth/muster\n")
    out = login.run(["squeue", "-h"], conf=conf)
    assert out.returncode != 0
    assert "Authentication failure: no credential" in out.stderr


def test_a_request_without_a_credential_or_with_a_forged_one_is_refused(login: Login) -> None:
    with pytest.raises(ApiError, match="no credential") as e:
        login.ask(None)
    assert e.value.status == 401
    forged = f"0:0:{time.time():.3f}:{os.urandom(16).hex()}:node1:{'0' * 64}"  # "I am root"
    with pytest.raises(ApiError, match="bad credential signature"):
        login.ask(forged)
    with pytest.raises(ApiError, match="MUNGE: invalid credential"):
        login.ask(login.credential()[:-6] + "AAAAA:")  # tampered with


def test_a_credential_sealed_with_another_key_is_refused(login: Login) -> None:
    with pytest.raises(ApiError, match=r"MUNGE: invalid credential \(not sealed with this cluster's munge.key"):
        login.ask(login.credential(socket=login.foreign))


def test_a_credential_is_accepted_once(login: Login) -> None:
    cred = login.credential()
    assert "jobs" in login.ask(cred)
    with pytest.raises(ApiError, match="MUNGE: replayed credential"):
        login.ask(cred)


def test_a_credential_for_another_purpose_or_cluster_is_refused(login: Login) -> None:
    with pytest.raises(ApiError, match="made for cluster 'other'"):
        login.ask(login.credential(cluster="other"))
    slurms = subprocess.run(["munge", "-S", login.socket, "-n"], check=True, capture_output=True, text=True)
    with pytest.raises(ApiError, match="not a muster credential"):
        login.ask(slurms.stdout.strip())


def test_an_expired_credential_is_refused(login: Login) -> None:
    cred = login.credential(ttl=1)
    made = time.time()
    while time.time() < made + 2.5:  # munged stamps whole seconds: past its one-second life
        time.sleep(0.1)  # sleep: the credential's one-second life runs out
    with pytest.raises(ApiError, match="MUNGE: expired credential"):
        login.ask(cred)
