"""Issue 7: real Slurm clients, installed from PyPI (``make install`` installs the ``clients``
extra), run unmodified against a local muster cluster.

The clients call ``sbatch``, ``squeue``, ``scancel``, ``sacct``, ``scontrol`` and ``srun`` by
name, so every test runs with muster's commands first in ``PATH`` (``client_env``) and
checks that they, not some Slurm installed on the machine, are the ones found.

* submitit 1.5.4: a function's result; ``map_array`` with a throttle; a multi-task job's
  ranks; a ``Checkpointable`` job that hits its time limit, is requeued by itself and
  resumes under the same job id.
* dask-jobqueue 0.9.0: ``SLURMCluster`` scales to two workers, computes, and ``close()``
  cancels them.
* lightning-fabric 2.6: ``SLURMEnvironment`` inside an ``srun`` step of a 2-node job.

submitit's executor refuses to start without an ``srun`` in ``PATH`` even for jobs that do
not use it (``slurm_use_srun=False``); muster's own ``srun`` is the one it finds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from harness import BIN, Harness

pytestmark = pytest.mark.e2e

submitit = pytest.importorskip("submitit")

# The job functions below travel by value: the job's Python cannot import this test module.
import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def client_env(cluster: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """The test process's own environment as a user's shell on the cluster would have it:
    the clients spawn the commands from it."""
    for key in list(os.environ):
        if key.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SUBMITIT_")):
            monkeypatch.delenv(key)
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    for command in ("sbatch", "squeue", "scancel", "scontrol", "sacct", "srun"):
        found = shutil.which(command)
        assert found is not None and os.path.dirname(found) == BIN, f"{command} resolves to {found}"
    yield cluster


@pytest.fixture
def folder(cluster: Harness) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="client-", dir=cluster.workdir)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _executor(folder: str, use_srun: bool, **params: object) -> submitit.AutoExecutor:
    executor = submitit.AutoExecutor(folder=os.path.join(folder, "%j"), cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=1, cpus_per_task=1, slurm_use_srun=use_srun)
    executor.update_parameters(**params)
    return executor


def _sacct_state(job: submitit.Job, timeout: float = 30.0) -> str:
    """The state sacct reports, waiting out the moments while it still says RUNNING."""
    deadline = time.monotonic() + timeout
    while True:
        state = job.get_info(mode="force").get("State", "UNKNOWN")
        if state not in ("PENDING", "RUNNING", "COMPLETING", "UNKNOWN") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


# --- the job functions ------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def square_with_times(x: int) -> tuple[int, float, float, str]:
    start = time.time()
    time.sleep(1.0)  # sleep: the job's own work (the payload), a second long
    return x * x, start, time.time(), os.environ.get("SLURM_ARRAY_TASK_ID", "")


def ranks() -> dict[str, object]:
    env = submitit.JobEnvironment()
    return {
        "global_rank": env.global_rank,
        "local_rank": env.local_rank,
        "node": env.node,
        "num_tasks": env.num_tasks,
        "num_nodes": env.num_nodes,
        "job_id": env.job_id,
        "hostnames": list(env.hostnames),
    }


class Counter(submitit.helpers.Checkpointable):
    """Counts to ``total``, one step a second; a requeue resumes from the checkpoint."""

    def __init__(self) -> None:
        self.done = 0
        self.attempts: list[str] = []

    def __call__(self, total: int) -> dict[str, object]:
        self.attempts.append(os.environ.get("SLURM_RESTART_COUNT", "0"))
        while self.done < total:
            time.sleep(1.0)  # sleep: the job's own work (the payload), a second per step
            self.done += 1
        return {"done": self.done, "attempts": self.attempts, "job_id": os.environ["SLURM_JOB_ID"]}


# --- submitit -----------------------------------------------------------------------------------


def test_submitit_returns_a_function_result(client_env: Harness, folder: str) -> None:
    job = _executor(folder, use_srun=False).submit(add, 2, 3)
    assert job.result() == 5
    assert _sacct_state(job) == "COMPLETED"
    assert client_env.job(int(job.job_id))["state"] == "COMPLETED"


def test_submitit_through_srun_as_configured_by_default(client_env: Harness, folder: str) -> None:
    job = _executor(folder, use_srun=True).submit(add, 40, 2)
    assert job.result() == 42
    assert _sacct_state(job) == "COMPLETED"


def test_submitit_map_array_with_a_throttle(client_env: Harness, folder: str) -> None:
    executor = _executor(folder, use_srun=False, slurm_array_parallelism=3)
    jobs = executor.map_array(square_with_times, range(10))
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_{i}" for i in range(10)]
    results = [j.result() for j in jobs]
    assert [r[0] for r in results] == [i * i for i in range(10)]
    assert [r[3] for r in results] == [str(i) for i in range(10)]
    # never more than three tasks at once
    events = sorted([(r[1], 1) for r in results] + [(r[2], -1) for r in results])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 3
    assert {_sacct_state(j) for j in jobs} == {"COMPLETED"}
    # each task ran under its own job id, the array's id being the first task's
    first = int(array_id)
    assert [client_env.job(first + i)["array_task_id"] for i in range(10)] == list(range(10))


def test_submitit_multi_task_job_sees_its_ranks(client_env: Harness, folder: str) -> None:
    executor = _executor(folder, use_srun=True, nodes=2, tasks_per_node=2)
    job = executor.submit(ranks)
    results = job.results()
    assert len(results) == 4
    assert sorted(r["global_rank"] for r in results) == [0, 1, 2, 3]
    assert sorted((r["node"], r["local_rank"]) for r in results) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {(r["num_tasks"], r["num_nodes"], r["job_id"]) for r in results} == {(4, 2, job.job_id)}
    assert all(len(r["hostnames"]) == 2 for r in results)


HYDRA_APP = """\
import os, socket
import hydra

@hydra.main(version_base=None, config_path=None, config_name=None)
def main(cfg) -> float:
    print(f"x={cfg.x} array={os.environ['SLURM_ARRAY_TASK_ID']} on {socket.gethostname()}", flush=True)
    return float(cfg.x) * 2

if __name__ == "__main__":
    main()
"""


def test_hydras_submitit_launcher_sweeps_as_a_job_array(client_env: Harness, folder: str) -> None:
    """hydra-submitit-launcher 1.2.0: ``--multirun hydra/launcher=submitit_slurm`` submits one
    array (its folder ``.submitit/%j``, tasks through srun) and waits for every result."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with open(os.path.join(folder, "app.py"), "w") as f:
        f.write(HYDRA_APP)
    out = client_env.run(
        [
            sys.executable,
            "app.py",
            "--multirun",
            "hydra/launcher=submitit_slurm",
            "+x=1,2,3",
            "hydra.launcher.timeout_min=5",
            "hydra.sweep.dir=sweep",
        ],
        cwd=folder,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    logs = sorted(
        os.path.join(d, name)
        for d, _, names in os.walk(os.path.join(folder, "sweep", ".submitit"))
        for name in names
        if name.endswith("_0_log.out")
    )
    assert len(logs) == 3, logs
    printed = sorted(line for path in logs for line in open(path).read().splitlines() if line.startswith("x="))
    assert [line.split(" on ")[0] for line in printed] == ["x=1 array=0", "x=2 array=1", "x=3 array=2"]
    array_id = os.path.basename(os.path.dirname(logs[0])).split("_")[0]
    states = client_env.run(["sacct", "-X", "-n", "--parsable2", "-o", "JobID,State", "-j", array_id])
    assert sorted(states.stdout.split()) == [f"{array_id}_{i}|COMPLETED" for i in range(3)]


@pytest.mark.parametrize("use_srun", [False, True])
def test_submitit_checkpointable_job_is_requeued_at_its_limit_and_resumes(
    client_env: Harness, folder: str, use_srun: bool
) -> None:
    # One minute limit, USR2 50 s before it: the first attempt checkpoints after ~10 s and
    # requeues itself (scontrol requeue, then exit 255); the rerun finishes the count.
    executor = _executor(folder, use_srun=use_srun, timeout_min=1, slurm_signal_delay_s=50)
    job = executor.submit(Counter(), 14)
    result = job.result()
    assert result["done"] == 14
    assert result["attempts"] == ["0", "1"]  # the rerun started from the checkpoint
    assert result["job_id"] == job.job_id
    record = client_env.wait_job(int(job.job_id))  # the result is written before the job ends
    assert (record["state"], record["restart_count"]) == ("COMPLETED", 1)
    assert _sacct_state(job) == "COMPLETED"


def test_submitit_cancel(client_env: Harness, folder: str) -> None:
    job = _executor(folder, use_srun=False).submit(time.sleep, 120)
    client_env.wait_state(int(job.job_id), "RUNNING")
    job.cancel()
    assert client_env.wait_job(int(job.job_id))["state"] == "CANCELLED"
    assert job.done(force_check=True)
    assert _sacct_state(job).startswith("CANCELLED")


# --- dask-jobqueue ------------------------------------------------------------------------------


def test_dask_jobqueue_scales_computes_and_cancels(client_env: Harness, folder: str) -> None:
    dask_jobqueue = pytest.importorskip("dask_jobqueue")
    from distributed import Client

    cluster = dask_jobqueue.SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        walltime="00:10:00",
        log_directory=os.path.join(folder, "logs", "missing-yet"),
        scheduler_options={"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},
        worker_extra_args=["--host", "127.0.0.1"],
    )
    ids: list[int] = []
    try:
        assert "#SBATCH --cpus-per-task=1" in cluster.job_script()
        cluster.scale(2)
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=120)
            futures = client.map(lambda x: x * x, range(20))
            assert client.submit(sum, futures).result(timeout=60) == sum(i * i for i in range(20))
            ids = [int(job.job_id) for job in cluster.workers.values()]
            assert len(ids) == 2
            assert all(client_env.job(i)["state"] == "RUNNING" for i in ids)
    finally:
        cluster.close()
    for job_id in ids:
        assert client_env.wait_job(job_id)["state"] == "CANCELLED"


# --- lightning ----------------------------------------------------------------------------------

LIGHTNING_TASK = """
import json, os
from lightning_fabric.plugins.environments import SLURMEnvironment
assert SLURMEnvironment.detect()
env = SLURMEnvironment()
print(json.dumps({
    "world_size": env.world_size(), "global_rank": env.global_rank(),
    "local_rank": env.local_rank(), "node_rank": env.node_rank(),
    "main_address": env.main_address, "main_port": env.main_port,
    "nodelist": os.environ["SLURM_NODELIST"], "job_id": os.environ["SLURM_JOB_ID"],
}), flush=True)
"""


def test_lightning_slurm_environment_inside_an_srun_step(client_env: Harness, folder: str) -> None:
    pytest.importorskip("lightning_fabric")
    from lightning_fabric.plugins.environments import SLURMEnvironment

    task = os.path.join(folder, "task.py")
    with open(task, "w") as f:
        f.write(LIGHTNING_TASK)
    script = os.path.join(folder, "train.sh")
    with open(script, "w") as f:
        # no -n: srun takes the layout from the allocation
        f.write(f"#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2 -J train\nsrun {sys.executable} {task}\n")
    job_id = client_env.sbatch("-o", os.path.join(folder, "out-%j.txt"), script)
    assert client_env.wait_job(job_id, timeout=120)["state"] == "COMPLETED"
    rows = [
        json.loads(line)
        for line in client_env.read(os.path.join(folder, f"out-{job_id}.txt")).splitlines()
        if line.startswith("{")
    ]
    assert len(rows) == 4
    assert {r["world_size"] for r in rows} == {4}
    assert sorted(r["global_rank"] for r in rows) == [0, 1, 2, 3]
    assert sorted((r["node_rank"], r["local_rank"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {r["job_id"] for r in rows} == {str(job_id)}
    # one main address and port for all ranks: the first node of the allocation
    assert len({(r["main_address"], r["main_port"]) for r in rows}) == 1
    first_node = SLURMEnvironment.resolve_root_node_address(rows[0]["nodelist"])
    addr = {n["name"]: n["addr"] for n in client_env.cluster.api("GET", "/v1/nodes")["nodes"]}
    # SLURMEnvironment reads MASTER_ADDR when set (muster's tasks get the node's address)
    assert rows[0]["main_address"] in (first_node, addr[first_node])
