"""A private /tmp per job (JobContainerType=job_container/tmpfs, job_container.conf's
BasePath/AutoBasePath/Dirs): what a job writes to /tmp is seen by its own steps, not by
another job running beside it on the same node, not in the machine's /tmp, and is gone
after the job. Needs root (mount namespaces)."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from harness import Harness, ensure_user, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


def _wait(cond, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    wait_for(cond, timeout, what=what)


def _install_under_private_dirs() -> str | None:
    """Where this checkout's commands live under /tmp or /dev/shm (a CI clone may), a job
    whose /tmp is its own cannot run them: its ``srun`` is hidden by the job's /tmp, as any
    software installed there would be under Slurm's job_container/tmpfs."""
    import muster

    for path in (sys.prefix, os.path.dirname(muster.__file__)):
        if os.path.realpath(path).startswith(("/tmp/", "/dev/shm/")):
            return path
    return None


def _skip_if_srun_is_hidden() -> None:
    hidden = _install_under_private_dirs()
    if hidden is not None:
        pytest.skip(f"the job's srun is installed under {hidden}, which the job's private /tmp hides")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Harness, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces)")
    # Not under /tmp: the job's working directory and output files must stay reachable
    # once its /tmp is its own (as under Slurm).
    h = Harness(
        ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000),
        root=tempfile.mkdtemp(prefix="muster-jc-", dir="/var/tmp"),
        settings={"JobContainerType": "job_container/tmpfs"},
    )
    h.cluster.create(h.shape, h.settings)
    base = os.path.join(h.root, "jobtmp")
    with open(os.path.join(os.path.dirname(h.cluster.conf_path), "job_container.conf"), "w") as f:
        f.write(f"AutoBasePath=true\nBasePath={base}/%n\nDirs=/tmp,/dev/shm\n")
    try:
        h.up()
        yield h, base
    finally:
        h.down()


def test_a_jobs_tmp_is_its_own_and_gone_after_it(cluster: tuple[Harness, str]) -> None:
    _skip_if_srun_is_hidden()
    h, root = cluster
    base = os.path.join(root, "node1")
    uid = ensure_user("mustertest")
    marker = f"muster-private-{os.getpid()}-{time.monotonic_ns()}"
    writer = (
        "#!/bin/bash\n"
        f"echo secret > /tmp/{marker}\n"
        f"echo shm > /dev/shm/{marker}\n"
        f"srun cat /tmp/{marker} /dev/shm/{marker}\n"  # the job's step sees the job's /tmp
        f"touch {h.workdir}/{marker}.written\n"
        f"while [ ! -e {h.workdir}/{marker}.checked ]; do sleep 0.05; done\n"
    )
    job_a = h.sbatch("-w", "node1", "-o", "a-%j.out", uid=uid, input=writer)
    _wait(lambda: os.path.exists(os.path.join(h.workdir, f"{marker}.written")), "job A to write its /tmp")
    # backed by the job's directory under BasePath, never by the machine's /tmp
    assert os.path.exists(os.path.join(base, str(job_a), "_tmp", marker))
    assert not os.path.exists(f"/tmp/{marker}") and not os.path.exists(f"/dev/shm/{marker}")

    reader = f"#!/bin/bash\nls /tmp/{marker} /dev/shm/{marker} 2>&1\necho mine > /tmp/{marker}\ncat /tmp/{marker}\n"
    job_b = h.sbatch("-w", "node1", "-o", "b-%j.out", uid=uid, input=reader)
    assert h.wait_job(job_b)["state"] == "COMPLETED"
    b_out = h.read(f"b-{job_b}.out")
    assert b_out.count("No such file or directory") == 2 and b_out.endswith("mine\n"), b_out

    with open(os.path.join(h.workdir, f"{marker}.checked"), "w"):
        pass
    assert h.wait_job(job_a)["state"] == "COMPLETED"
    assert h.read(f"a-{job_a}.out") == "secret\nshm\n"
    # both jobs' directories are removed at their end
    _wait(lambda: not os.path.exists(os.path.join(base, str(job_a))), "job A's private /tmp to be removed")
    _wait(lambda: not os.path.exists(os.path.join(base, str(job_b))), "job B's private /tmp to be removed")
    assert not os.path.exists(f"/tmp/{marker}")


def test_a_jobs_private_tmp_goes_from_every_node_it_ran_on(cluster: tuple[Harness, str]) -> None:
    _skip_if_srun_is_hidden()
    h, root = cluster
    show = h.run(["scontrol", "show", "config"]).stdout
    assert re.search(r"^JobContainerType +=\s+job_container/tmpfs$", show, re.M), show
    uid = ensure_user("mustertest")
    flag = os.path.join(h.workdir, f"release-{os.getpid()}-{time.monotonic_ns()}")
    script = (
        "#!/bin/bash\n"
        "srun -N2 -n2 bash -c 'echo $SLURMD_NODENAME > /tmp/where; cat /tmp/where'\n"
        f"while [ ! -e {flag} ]; do sleep 0.05; done\n"
    )
    job = h.sbatch("-N2", "-o", "n-%j.out", uid=uid, input=script)
    for node in ("node1", "node2"):  # each node's tasks wrote their node's directory
        where = os.path.join(root, node, str(job), "_tmp", "where")
        _wait(lambda where=where: os.path.exists(where), f"{node}'s task to write its /tmp")
        with open(where) as f:
            assert f.read() == f"{node}\n"
    with open(flag, "w"):
        pass
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert sorted(h.read(f"n-{job}.out").split()) == ["node1", "node2"]
    for node in ("node1", "node2"):  # the batch host at the script's end, the other at the job's
        _wait(lambda node=node: not os.path.exists(os.path.join(root, node, str(job))), f"{node}'s directory to go")


def test_an_sruns_own_allocation_gets_a_private_tmp_too(cluster: tuple[Harness, str]) -> None:
    h, root = cluster
    uid = ensure_user("mustertest")
    out = h.run(["srun", "-w", "node2", "bash", "-c", "echo $SLURM_JOB_ID > /tmp/id; ls -A /tmp; cat /tmp/id"], uid=uid)
    assert out.returncode == 0, out.stderr
    listing, job = out.stdout.split()
    assert listing == "id"  # nothing but what the job wrote: a /tmp of its own
    _wait(lambda: not os.path.exists(os.path.join(root, "node2", job)), "the allocation's directory to go")
