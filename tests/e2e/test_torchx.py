"""torchx 0.7.0, unmodified, against a local muster cluster: a 2x2 DDP app (``dist.ddp``),
then ``torchx status``, ``log``, ``list`` and ``cancel``.

torchx writes every app as a heterogeneous job, one component per replica, and starts
each replica's ``torchrun`` with ``--rdzv_backend=c10d
--rdzv_endpoint=$SLURM_JOB_NODELIST_HET_GROUP_0:29500``: the replica whose host name is
that node hosts the rendezvous store and the other one connects to that name. On
emulated nodes this works because each node's jobs see the node's own host name and the
cluster's names resolve (``agent.nodeident``, as root). The nodes here have 2 CPUs, so
the two replicas (2 CPUs each) land on two different nodes.

``make install`` puts torchx in ``.venv/torchx`` (it pins urllib3 below 1.27, which the
venv's test tools cannot share); the test skips where that directory is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.e2e

TORCHX = os.path.join(sys.prefix, "torchx")

TRAIN = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * dist.get_rank()
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.uname().nodename} sum {t.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def world() -> Iterator[Harness]:
    if not os.path.exists(os.path.join(TORCHX, "torchx")):
        pytest.skip(f"torchx is not installed in {TORCHX} (make install puts it there)")
    if os.geteuid() != 0:
        pytest.skip("emulated nodes have their own host names only when the agents run as root")
    h = Harness(ClusterShape(nodes=3, gpus_per_node=0, cpus_per_node=2, mem_per_node=8000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def torchx(h: Harness, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(PYTHONPATH=TORCHX)
    return h.run([sys.executable, os.path.join(TORCHX, "bin", "torchx"), *args], env=env, timeout=timeout)


def state_of(h: Harness, handle: str) -> str:
    out = torchx(h, "status", handle)
    found = re.search(r"State: (\w+)", out.stdout + out.stderr)
    return found.group(1) if found else f"? {out.stdout}{out.stderr}"


def wait_state(h: Harness, handle: str, states: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while (state := state_of(h, handle)) not in states:
        assert time.monotonic() < deadline, f"{handle} still {state}"
        time.sleep(2)
    return state


def run_app(h: Harness, *args: str) -> str:
    out = torchx(h, "run", "-s", "slurm", *args)
    assert out.returncode == 0, out.stderr
    handles = re.findall(r"^slurm://\S+$", out.stdout, re.M)
    assert handles, out.stdout + out.stderr
    return handles[0]


def test_a_2x2_ddp_app_runs_across_two_nodes_and_torchx_reads_it_back(world: Harness) -> None:
    with open(os.path.join(world.workdir, "train.py"), "w") as f:
        f.write(TRAIN)
    handle = run_app(world, "dist.ddp", "-j", "2x2", "--script", "train.py")
    assert wait_state(world, handle, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=400) == "SUCCEEDED"

    log = torchx(world, "log", "--streams", "stdout", handle)
    assert log.returncode == 0, log.stderr
    ranks = re.findall(r"rank (\d) of 4 on (\S+) sum 6", log.stdout)
    assert sorted(int(rank) for rank, _ in ranks) == [0, 1, 2, 3], log.stdout
    hosts = {host for _, host in ranks}
    assert len(hosts) == 2 and hosts <= {"node1", "node2", "node3"}, log.stdout

    listed = torchx(world, "list", "-s", "slurm")
    assert re.search(rf"^{re.escape(handle)}\s+SUCCEEDED", listed.stdout, re.M), listed.stdout + listed.stderr


def test_torchx_cancel_stops_a_running_app(world: Harness) -> None:
    handle = run_app(world, "utils.sh", "sleep", "600")
    wait_state(world, handle, {"RUNNING"}, timeout=60)
    out = torchx(world, "cancel", handle)
    assert out.returncode == 0, out.stderr
    # ``torchx status`` of a cancelled app fails on real Slurm as here: torchx 0.7.0 reads
    # sacct's State column, which says "CANCELLED by <uid>" as Slurm's does, and asserts on
    # it. ``torchx list`` reads ``sacct --json``'s state.current instead.
    job = handle.rsplit("/", 1)[1]
    state = world.wait_job(int(job))["state"]
    assert state == "CANCELLED"
    sacct = world.run(["sacct", "-X", "--parsable2", "-n", "-o", "State", "-j", job])
    assert sacct.stdout.strip() == f"CANCELLED by {os.geteuid()}"
    listed = torchx(world, "list", "-s", "slurm")
    assert re.search(rf"^{re.escape(handle)}\s+CANCELLED", listed.stdout, re.M), listed.stdout + listed.stderr
