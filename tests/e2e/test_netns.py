"""Issue 15's multi-host check, rehearsed on one machine: a head node and three GPU nodes,
each in its own network namespace with its own host name and address (10.77.0.x on a
bridge, not 127.0.0.x on one loopback), set up by following docs/deploy.md (one config
everywhere, ``muster keygen --conf`` then the key and each node's certificate copied,
TLS on, the daemons started as the service units start them). The controller is reached
only over those links. tests/netns.py builds and removes the network.

* A 2-node DDP job (PyTorch, gloo) whose ranks meet over the links.
* A node unplugged mid-run (its link set down): the controller marks it DOWN after
  SlurmdTimeout, the job is requeued and resumes from its checkpoint on the other nodes;
  plugged back in, the node returns to service (ReturnToService=1) and the attempt it
  still ran is gone. With no spare node, the job waits for the unplugged one to return and
  resumes there.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import sys
import time
from collections.abc import Iterator

import pytest

from harness import ensure_user
from netns import HEAD_ADDR, NetnsCluster, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
USER = "musternet-user"
TIMEOUT = 5  # SlurmdTimeout: short, to see a failure soon


@pytest.fixture(scope="module")
def hosts() -> Iterator[NetnsCluster]:
    why = unavailable()
    if why and os.environ.get("MUSTER_TEST_REQUIRE_NETNS"):  # CI (.ci/run): a skip would hide it
        pytest.fail(f"MUSTER_TEST_REQUIRE_NETNS is set and network namespaces cannot be made: {why}")
    if why:
        pytest.skip(f"no network namespaces here: {why}")
    # requeue_delay: the requeued job is eligible again in 3 s (Slurm's default is 120 s)
    settings = {"SlurmdTimeout": str(TIMEOUT), "KillWait": "2", "SchedulerParameters": "requeue_delay=3"}
    cluster = NetnsCluster(3, settings=settings)
    try:
        cluster.create()
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.teardown()


def sbatch(hosts: NetnsCluster, *args: str, env: dict[str, str] | None = None) -> int:
    out = hosts.run("head", ["sbatch", "--parsable", *args], env=env)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def job(hosts: NetnsCluster, job_id: int) -> dict:
    return hosts.api("GET", f"/v1/jobs/{job_id}")["job"]


def wait_job(hosts: NetnsCluster, job_id: int, done: object = None, timeout: float = 240) -> dict:
    check = done or (lambda j: j["state"] not in ("PENDING", "RUNNING") and not j["completing"])
    deadline = time.monotonic() + timeout
    while True:
        j = job(hosts, job_id)
        if check(j):  # type: ignore[operator]
            return j
        assert time.monotonic() < deadline, f"job {job_id}: {j['state']} (restart {j['restart_count']}): {j}"
        time.sleep(0.2)


def wait_node(hosts: NetnsCluster, node: str, state: str, timeout: float) -> float:
    start = time.monotonic()
    while (now := time.monotonic()) - start < timeout:
        if hosts.node_states()[node]["state"] == state:
            return now - start
        time.sleep(0.1)
    raise AssertionError(f"{node} is {hosts.node_states()[node]['state']}, not {state}, after {timeout} s")


def listening(hosts: NetnsCluster, machine: str) -> set[tuple[str, int]]:
    """The TCP (IPv4 and IPv6) sockets listening on ``machine``, from its /proc/net."""
    out = hosts.run(machine, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
    found = set()
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # LISTEN
            addr, port = fields[1].split(":")
            raw = bytes.fromhex(addr)
            ip = socket.inet_ntop(socket.AF_INET, raw[::-1]) if len(raw) == 4 else addr
            found.add((ip, int(port, 16)))
    return found


def test_each_node_is_its_own_host_and_the_commands_work_from_any_of_them(hosts: NetnsCluster) -> None:
    # srun from the head node: its tasks run in the nodes' namespaces, output comes back.
    out = hosts.run("head", ["srun", "-N3", "-l", "sh", "-c", "echo $(hostname) $(ip -4 -o addr show eth0)"])
    assert out.returncode == 0, out.stderr
    for k in (1, 2, 3):
        assert re.search(rf"^\d: node{k} .*inet 10\.77\.0\.{10 + k}/24", out.stdout, re.M), out.stdout
    # a command on a compute node reaches the controller over TCP and TLS, with its agent's credential
    listing = hosts.run("node2", ["sinfo", "-h", "-N", "-o", "%N %T %o"])
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.split("\n")[:3] == ["node1 idle 10.77.0.11", "node2 idle 10.77.0.12", "node3 idle 10.77.0.13"]
    # an ordinary user submits on one node; the job runs as them; another node lists it
    uid = ensure_user(USER)
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    submitted = hosts.run(
        "node3", [*user, "sbatch", "--parsable", "-w", "node1", "-o", "who-%j.out", "--wrap", "id -un; hostname"]
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    assert wait_job(hosts, job_id, timeout=60)["state"] == "COMPLETED"
    assert pathlib.Path(hosts.workdir, f"who-{job_id}.out").read_text() == f"{USER}\nnode1\n"
    mine = hosts.run("node2", [*user, "squeue", "-h", "-t", "all", "-o", "%i %u %T"])
    assert mine.returncode == 0, mine.stderr
    assert f"{job_id} {USER} COMPLETED" in mine.stdout.splitlines()
    # the controller listens on its link's address (and its Unix socket), nowhere else
    assert listening(hosts, "head") == {(HEAD_ADDR, 6817)}
    assert listening(hosts, "node1") == {("10.77.0.11", 6818)}


def test_ddp_ranks_on_two_hosts_meet_over_the_links(hosts: NetnsCluster) -> None:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    ckpt = os.path.join(hosts.workdir, "ddp-ckpt")
    env = {"TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"), "PYTHON": sys.executable, "CKPT_DIR": ckpt}
    job_id = sbatch(
        hosts, "-N2", "--ntasks-per-node=2", "--gres=gpu:2", str(EXAMPLES / "train.sbatch"), "--steps", "10", env=env
    )
    done = wait_job(hosts, job_id)
    text = pathlib.Path(hosts.workdir, f"train-{job_id}.out").read_text()
    assert done["state"] == "COMPLETED", text
    starts = re.findall(r"\[rank (\d)\] world=4 local_rank=(\d) node=(\S+) backend=gloo .* master=(\S+)$", text, re.M)
    assert sorted(s[0] for s in starts) == ["0", "1", "2", "3"], text
    assert len({s[2] for s in starts}) == 2, "two hosts"
    assert {s[3].split(":")[0] for s in starts} == {hosts.addr[done["alloc"][0]["node"]]}, (
        "MASTER_ADDR: the first node's link"
    )
    assert len(re.findall(r"allreduce ok sum=6 expected=6", text)) == 4, text
    assert len(re.findall(r"done steps=10 .* replicas_agree=True", text)) == 4, text


def scontrol_update(hosts: NetnsCluster, nodes: str, state: str) -> None:
    out = hosts.run("head", ["scontrol", "update", f"NodeName={nodes}", f"State={state}", "Reason=rehearsal"])
    assert out.returncode == 0, out.stderr


def start_training(hosts: NetnsCluster, on: list[str], ckpt: str, steps: int) -> tuple[int, dict]:
    """A 2-node DDP job with --requeue placed on ``on`` (the other node drained while it
    starts), once it has written a checkpoint."""
    others = ",".join(n for n in hosts.nodes if n not in on)
    scontrol_update(hosts, others, "DRAIN")
    try:
        env = {"TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"), "PYTHON": sys.executable, "CKPT_DIR": ckpt}
        job_id = sbatch(
            hosts,
            *("-N2", "--ntasks-per-node=1", "--gres=gpu:1", str(EXAMPLES / "train.sbatch")),
            *("--steps", str(steps), "--ckpt-every", "5", "--sleep", "0.2"),
            env=env,
        )
        running = wait_job(hosts, job_id, lambda j: j["state"] == "RUNNING", timeout=60)
    finally:
        scontrol_update(hosts, others, "RESUME")
    assert [a["node"] for a in running["alloc"]] == on
    deadline = time.monotonic() + 300  # PyTorch's start-up is slow on a loaded machine
    while not os.path.exists(os.path.join(ckpt, "last.pt")):
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)
    return job_id, running


# Each test unplugs a node no other test has: a node that fails twice in a row is drained
# as a suspect (ctld.training), by design, which would change what the next test sees.
@pytest.mark.parametrize(
    ("on", "victim"),
    [(["node1", "node2"], "node2"), (["node1", "node3"], "node1")],
    ids=["a rank's node", "the first node, MASTER_ADDR's"],
)
def test_an_unplugged_node_goes_down_the_job_resumes_elsewhere_and_the_node_returns(
    hosts: NetnsCluster, on: list[str], victim: str
) -> None:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    steps = 60
    job_id, _running = start_training(hosts, on, os.path.join(hosts.workdir, f"resume-ckpt-{victim}"), steps)
    hosts.unplug(victim)
    down_after = wait_node(hosts, victim, "DOWN", timeout=TIMEOUT + 15)
    rerun = wait_job(hosts, job_id, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=60)
    assert victim not in [a["node"] for a in rerun["alloc"]]
    hosts.plug(victim)
    back_after = wait_node(hosts, victim, "IDLE", timeout=60)
    deadline = time.monotonic() + 30  # the attempt it ran while cut off is ended on its return
    while hosts.job_pids(victim, job_id):
        assert time.monotonic() < deadline, f"{victim} still runs the first attempt: {hosts.job_pids(victim, job_id)}"
        time.sleep(0.2)
    done = wait_job(hosts, job_id)
    text = pathlib.Path(hosts.workdir, f"train-{job_id}.out").read_text()
    assert done["state"] == "COMPLETED" and done["restart_count"] == 1, text
    resumed = re.search(r"resumed from step (\d+)", text)
    assert resumed and int(resumed.group(1)) > 0, text
    assert f"done steps={steps}" in text, text
    acct = hosts.run("head", ["sacct", "-D", "-X", "-j", str(job_id), "--parsable2", "--noheader", "-o", "State"])
    assert acct.stdout.split() == ["NODE_FAIL", "COMPLETED"], acct.stdout + acct.stderr
    print(f"{victim} DOWN {down_after:.1f} s after its link went down; IDLE {back_after:.1f} s after it came back")


def test_with_no_spare_node_the_job_waits_and_resumes_on_the_node_that_returns(hosts: NetnsCluster) -> None:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    ckpt = os.path.join(hosts.workdir, "return-ckpt")
    job_id, _running = start_training(hosts, ["node2", "node3"], ckpt, 40)
    scontrol_update(hosts, "node1", "DRAIN")  # no spare: the job needs both its nodes
    try:
        victim = "node3"
        hosts.unplug(victim)
        wait_node(hosts, victim, "DOWN", timeout=TIMEOUT + 15)
        waiting = wait_job(hosts, job_id, lambda j: j["restart_count"] == 1 and j["state"] == "PENDING", timeout=60)
        time.sleep(2)  # sleep: one node alone cannot run it: it must NOT start meanwhile
        assert job(hosts, job_id)["state"] == "PENDING", waiting
        hosts.plug(victim)
        rerun = wait_job(hosts, job_id, lambda j: j["state"] == "RUNNING", timeout=60)
        assert rerun["restart_count"] == 1 and [a["node"] for a in rerun["alloc"]] == ["node2", "node3"]
        done = wait_job(hosts, job_id)
        text = pathlib.Path(hosts.workdir, f"train-{job_id}.out").read_text()
        assert done["state"] == "COMPLETED", text
        resumed = re.search(r"resumed from step (\d+)", text)
        assert resumed and int(resumed.group(1)) > 0, text
        assert "done steps=40" in text, text
    finally:
        scontrol_update(hosts, "node1", "RESUME")
