"""A login node on its own host (network namespace), as docs/deploy.md's "Login nodes" sets
one up: the cluster's muster.conf with ``AuthType=auth/munge``, the CA certificate, munged
with the site's munge.key, and nothing else (no agent, no muster key, no controller socket).
The head node runs munged with the same key. A user there submits and lists jobs; the job
runs on node1 as that user; node1, which runs no munged, still proves its users with its
agent's credentials. tests/netns.py builds and removes the network; munged runs in each
machine's namespaces and is stopped with the other daemons.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator

import pytest

from harness import ensure_user
from netns import NetnsCluster, unavailable
from waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

USER = "musterlogin"
MUNGE_DIR = "/var/spool/muster/munge"  # inside each machine (its own spool)
SOCKET = f"{MUNGE_DIR}/munge.socket.2"


def _munge_missing() -> str | None:
    if shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin") is None or shutil.which("munge") is None:
        return "MUNGE is not installed (apt-get install munge libmunge2)"
    return None


@pytest.fixture(scope="module")
def hosts() -> Iterator[NetnsCluster]:
    why = unavailable()
    if why and os.environ.get("MUSTER_TEST_REQUIRE_NETNS"):  # CI (.ci/run): a skip would hide it
        pytest.fail(f"MUSTER_TEST_REQUIRE_NETNS is set and network namespaces cannot be made: {why}")
    if why:
        pytest.skip(f"no network namespaces here: {why}")
    why = _munge_missing()
    if why and os.environ.get("CI") == "true":  # .ci/run installs munge
        pytest.fail(f"CI=true and {why}")
    if why:
        pytest.skip(why)
    cluster = NetnsCluster(1, settings={"AuthType": "auth/munge", "AuthInfo": f"socket={SOCKET}"}, login=True)
    try:
        cluster.create()
        key = os.urandom(1024)  # the site's munge.key, copied to each MUNGE host
        munged = shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin") or "munged"
        for machine in ("head", "login"):
            os.makedirs(os.path.join(cluster.spool(machine), "munge"), mode=0o755)
            path = os.path.join(cluster.etc(machine), "munge.key")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(key)
            cluster._spawn(
                f"munged-{machine}",
                machine,
                [munged, "--foreground", "--force", f"--socket={SOCKET}", "--key-file=/etc/muster/munge.key"]
                + [f"--pid-file={MUNGE_DIR}/munged.pid", f"--seed-file={MUNGE_DIR}/munged.seed"]
                + [f"--log-file={MUNGE_DIR}/munged.log"],
            )
            sock = os.path.join(cluster.spool(machine), "munge", "munge.socket.2")
            try:
                wait_for(functools.partial(os.path.exists, sock), 20, what=f"munged's socket on {machine}")
            except AssertionError:
                raise AssertionError(cluster.read_log(f"munged-{machine}")) from None
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.teardown()


def run_as(hosts: NetnsCluster, machine: str, uid: int, argv: list[str]):  # noqa: ANN201 - CompletedProcess
    return hosts.run(machine, ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv])


def test_a_user_on_the_login_host_submits_and_the_job_runs_as_that_user(hosts: NetnsCluster) -> None:
    assert not os.path.exists(os.path.join(hosts.etc("login"), "muster.key"))  # no muster secret there
    uid = ensure_user(USER)
    out = run_as(hosts, "login", uid, ["sbatch", "--parsable", "-o", "login-%j.out", "--wrap", "id -u; hostname"])
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())

    def ended() -> dict | None:
        job: dict = hosts.api("GET", f"/v1/jobs/{job_id}")["job"]
        return None if job["state"] in ("PENDING", "RUNNING") or job["completing"] else job

    job = wait_for(ended, 120, interval=0.1, what=f"job {job_id} to end")
    assert (job["state"], job["user"], job["uid"]) == ("COMPLETED", USER, uid), job
    with open(os.path.join(hosts.workdir, f"login-{job_id}.out")) as f:
        assert f.read() == f"{uid}\nnode1\n"
    listed = run_as(hosts, "login", uid, ["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i %u"])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == f"{job_id} {USER}\n"


def test_a_compute_node_without_munged_proves_its_users_with_the_agents_credential(hosts: NetnsCluster) -> None:
    uid = ensure_user(USER)
    out = run_as(hosts, "node1", uid, ["squeue", "-h", "-u", USER, "-o", "%u"])
    assert out.returncode == 0, out.stderr


def test_without_munged_the_login_host_cannot_prove_its_user(hosts: NetnsCluster) -> None:
    # the same login host pointed at a munged that is not there: nothing else proves the user
    uid = ensure_user(USER)
    conf = os.path.join(hosts.etc("login"), "nomunge.conf")
    with open(os.path.join(hosts.etc("login"), "muster.conf")) as f, open(conf, "w") as g:
        g.write(f.read() + "AuthInfo=socket=/nonexistent/munge.socket\n")
    out = run_as(hosts, "login", uid, ["env", "MUSTER_CONF=/etc/muster/nomunge.conf", "squeue", "-h"])
    assert out.returncode != 0
    assert "Authentication failure: no credential" in out.stderr
