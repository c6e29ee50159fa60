"""Resource limits from the submit shell (issue 35 item 5): a job submitted under
``ulimit -n 1000 -s 16384`` runs its batch script and its srun steps' tasks with those soft
limits (PropagateResourceLimits=ALL, Slurm's default); ``--propagate=NONE`` gives the node's;
``--propagate=BOGUS`` is refused in Slurm's words; ``PropagateResourceLimitsExcept=NOFILE``
keeps the node's open-files limit; a limit above the node's hard limit is the node's."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

# The script and one srun task print the open-files and stack limits, soft then hard.
SCRIPT = (
    "#!/bin/bash\n"
    'echo "batch $(ulimit -Sn) $(ulimit -Ss) $(ulimit -Hn)"\n'
    "srun bash -c 'echo \"step $(ulimit -Sn) $(ulimit -Ss) $(ulimit -Hn)\"'\n"
)


def _node_limits() -> tuple[str, str, str]:
    """What a job gets without propagation: the agent's limits (the harness starts the
    agents from this process, so they are this process's)."""
    soft_n, hard_n = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_s = resource.getrlimit(resource.RLIMIT_STACK)[0]

    def words(v: int) -> str:
        return "unlimited" if v == resource.RLIM_INFINITY else str(v)

    return str(soft_n), words(soft_s // 1024 if soft_s != resource.RLIM_INFINITY else soft_s), words(hard_n)


def _submit(h: Harness, shell: str, *options: str) -> tuple[int, dict[str, list[str]]]:
    """Submit ``SCRIPT`` from ``bash -c 'ulimit ...; sbatch ...'`` as a test user; the job's
    lines by their first word."""
    uid = ensure_user("mustertest")
    out = h.run(["bash", "-c", f"{shell}; sbatch --parsable -o rl-%j.out {' '.join(options)}"], uid=uid, input=SCRIPT)
    assert out.returncode == 0, out.stderr
    job = int(out.stdout.strip().split(";")[0])
    done = h.wait_job(job)
    text = h.read(f"rl-{job}.out")
    assert done["state"] == "COMPLETED", (done, text)
    return job, {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.split()}


def test_the_script_and_a_steps_tasks_get_the_submit_shells_limits(cluster: Harness) -> None:
    _job, got = _submit(cluster, "ulimit -n 1000 -s 16384")
    node_hard = _node_limits()[2]
    # the soft limits the shell had; the hard limit is the node's (as under slurmd)
    assert got["batch"] == ["1000", "16384", node_hard], got
    assert got["step"] == ["1000", "16384", node_hard], got


def test_propagate_none_gives_the_nodes_limits(cluster: Harness) -> None:
    _job, got = _submit(cluster, "ulimit -n 1000 -s 16384", "--propagate=NONE")
    node = list(_node_limits())
    assert got["batch"] == node, got
    # srun in the job propagates the script's limits, which are the node's
    assert got["step"] == node, got


def test_propagate_names_only_those_limits(cluster: Harness) -> None:
    _job, got = _submit(cluster, "ulimit -n 1000 -s 16384", "--propagate=STACK")
    n, _s, hard = _node_limits()
    assert got["batch"] == [n, "16384", hard], got


def test_a_bogus_limit_name_is_refused_in_slurms_words(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "--propagate=BOGUS", "--wrap", "true"])
    assert out.returncode == 1
    assert out.stderr == "sbatch: error: --propagate=BOGUS is not valid.\n"
    out = cluster.run(["srun", "--propagate=NOFILE,BOGUS", "true"])
    assert out.returncode == 1
    assert "srun: error: --propagate=NOFILE,BOGUS is not valid." in out.stderr


def test_a_limit_above_the_nodes_hard_limit_keeps_the_nodes(cluster: Harness) -> None:
    # root's shell may raise its hard limit over the agent's; the node cannot give it
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or os.geteuid() != 0:
        pytest.skip("needs root and a finite open-files hard limit")
    out = cluster.run(
        ["bash", "-c", f"ulimit -n {hard + 1000}; sbatch --parsable -o rl-%j.out"],
        input="#!/bin/bash\necho batch $(ulimit -Sn) $(ulimit -Hn)\n",
    )
    assert out.returncode == 0, out.stderr
    job = int(out.stdout.strip())
    assert cluster.wait_job(job)["state"] == "COMPLETED"
    assert cluster.read(f"rl-{job}.out").split() == ["batch", str(soft), str(hard)]


@pytest.fixture(scope="module")
def except_nofile() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000),
        settings={"PropagateResourceLimitsExcept": "NOFILE"},
    )
    try:
        h.up()
        yield h
    finally:
        h.down()


def test_propagate_except_nofile_keeps_the_nodes_open_files_limit(except_nofile: Harness) -> None:
    h = except_nofile
    show = h.run(["scontrol", "show", "config"]).stdout
    assert "PropagateResourceLimitsExcept = NOFILE" in show, show
    _job, got = _submit(h, "ulimit -n 1000 -s 16384")
    n, s, hard = _node_limits()
    assert got["batch"] == [n, "16384", hard], got
    assert got["step"] == [n, "16384", hard], got
    # --propagate overrides the configuration for one job; srun in it decides for its
    # step by the configuration again (as Slurm's srun does), which keeps the node's
    _job, got = _submit(h, "ulimit -n 1000 -s 16384", "--propagate=NOFILE")
    assert got["batch"] == ["1000", s, hard] and got["step"] == [n, s, hard], got
