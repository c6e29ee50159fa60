"""The batch environment matches what Slurm 22.05 gave the same job (tests/fixtures/slurm-22.05)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.agent.env import EnvContext, batch_environment, format_counts, tasks_per_node

REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "slurm-22.05"

# `sbatch -N2 --ntasks-per-node=2 --gres=gpu:2 -J envprobe` as root on the reference cluster.
ENVPROBE: dict[str, Any] = {
    "job_id": 50,
    "user": "root",
    "uid": 0,
    "group": "root",
    "gid": 0,
    "partition": "gpu",
    "account": "root",
    "submit_host": "vm",
    "start_time": 1_700_000_000.0,
    "time_limit": 600,
    "restart_count": 0,
    "spec": {
        "name": "envprobe",
        "workdir": "/var/lib/slurm-anchor/work",
        "environment": {"HOME": "/root", "SLURM_JOB_ID": "1", "LANG": "C.UTF-8"},
        "min_nodes": 2,
        "ntasks_per_node": 2,
        "cpus_per_task": 1,
        "gpus_per_node": 2,
    },
    "shape": {"nodes": 2, "cpus_per_node": 2, "mem_per_node": 2000, "gpus_per_node": 2, "ntasks": 4},
    "alloc": [
        {"node": "node1", "cpus": 2, "mem": 2000, "gpu_ids": [0, 1]},
        {"node": "node2", "cpus": 2, "mem": 2000, "gpu_ids": [0, 1]},
    ],
}
CTX = EnvContext(
    node="node1",
    cluster="anchor",
    conf_path="/etc/slurm/slurm.conf",
    ctld_addr="127.0.0.1",
    ctld_port=6817,
    def_mem_per_cpu=1000,
)
ONLY_IN_THE_CHILD = {"SLURM_TASK_PID"}  # the launcher adds it once the pid is known


def _reference(name: str) -> dict[str, str]:
    path = REFERENCE / name
    text = path.read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_batch_script_gets_every_variable_slurm_gave_it_with_the_same_value() -> None:
    ref = _reference("env_sbatch_batchscript.txt")
    env = batch_environment(ENVPROBE, CTX)
    missing = sorted(set(ref) - set(env) - ONLY_IN_THE_CHILD)
    assert not missing
    different = {k: (env[k], ref[k]) for k in ref if k in env and env[k] != ref[k]}
    assert not different


def test_the_batch_script_gets_musters_and_newer_slurms_variables_too() -> None:
    env = batch_environment(ENVPROBE, CTX)
    assert env["ENVIRONMENT"] == "BATCH"
    assert env["MUSTER_JOB_ID"] == "50"
    assert env["SLURM_JOB_START_TIME"] == "1700000000"
    assert env["SLURM_JOB_END_TIME"] == "1700000600"


def test_the_submitting_shells_environment_is_kept_but_slurm_variables_win() -> None:
    env = batch_environment(ENVPROBE, CTX)
    assert env["LANG"] == "C.UTF-8" and env["HOME"] == "/root"
    assert env["SLURM_JOB_ID"] == "50"


def test_an_exported_nothing_still_gets_a_usable_login_environment() -> None:
    job = {**ENVPROBE, "spec": {**ENVPROBE["spec"], "environment": {}}}
    ctx = EnvContext(node="node1", cluster="c", conf_path="/c", user_home="/home/a", user_shell="/bin/bash")
    env = batch_environment(job, ctx)
    assert env["PATH"] and env["HOME"] == "/home/a" and env["SHELL"] == "/bin/bash"
    assert env["USER"] == env["LOGNAME"] == "root"


def test_the_second_node_gets_its_own_node_id() -> None:
    env = batch_environment(ENVPROBE, EnvContext(node="node2", cluster="anchor", conf_path="/c"))
    assert env["SLURM_NODEID"] == "1" and env["SLURMD_NODENAME"] == "node2"


def test_a_job_without_gpus_sets_no_gpu_variables() -> None:
    job = {**ENVPROBE, "alloc": [{"node": "node1", "cpus": 4, "mem": 100, "gpu_ids": []}]}
    env = batch_environment(job, CTX)
    assert not {"CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"} & set(env)


def test_restart_count_appears_only_after_a_requeue() -> None:
    assert "SLURM_RESTART_COUNT" not in batch_environment(ENVPROBE, CTX)
    assert batch_environment({**ENVPROBE, "restart_count": 1}, CTX)["SLURM_RESTART_COUNT"] == "1"


@pytest.mark.parametrize(("mode", "value"), [("append", "a"), ("truncate", "t"), (None, None)])
def test_open_mode_is_told_to_the_batch_script_as_slurm_tells_it(mode: str | None, value: str | None) -> None:
    env = batch_environment({**ENVPROBE, "spec": {**ENVPROBE["spec"], "open_mode": mode}}, CTX)
    assert env.get("SLURM_OPEN_MODE") == value


def test_srun_in_the_batch_script_opens_its_files_as_the_job_asked() -> None:
    from muster.cli import srun

    for mode, expected in (("append", "append"), ("truncate", "truncate")):
        env = batch_environment({**ENVPROBE, "spec": {**ENVPROBE["spec"], "open_mode": mode}}, CTX)
        run = srun.build(["true"], env, "/tmp")
        assert not isinstance(run, str) and run.open_mode == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"mem_per_node": 4096}, {"SLURM_MEM_PER_NODE": "4096"}),
        ({"mem_per_cpu": 500}, {"SLURM_MEM_PER_CPU": "500"}),
        ({"mem_per_gpu": 8000}, {"SLURM_MEM_PER_GPU": "8000"}),
        ({}, {"SLURM_MEM_PER_CPU": "1000"}),  # DefMemPerCPU
    ],
)
def test_memory_is_named_the_way_it_was_asked_for(spec: dict[str, int], expected: dict[str, str]) -> None:
    job = {**ENVPROBE, "spec": {**ENVPROBE["spec"], **spec}}
    env = batch_environment(job, CTX)
    assert {k: v for k, v in env.items() if k.startswith("SLURM_MEM_")} == expected


def test_array_tasks_get_the_array_variables() -> None:
    job = {
        **ENVPROBE,
        "job_id": 61,
        "array_job_id": 60,
        "array_task_id": 1,
        "array_task_count": 3,
        "array_task_min": 0,
        "array_task_max": 2,
        "array_task_step": 1,
    }
    env = batch_environment(job, CTX)
    assert (env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"], env["SLURM_ARRAY_TASK_COUNT"]) == ("60", "1", "3")
    assert (env["SLURM_ARRAY_TASK_MIN"], env["SLURM_ARRAY_TASK_MAX"], env["SLURM_ARRAY_TASK_STEP"]) == ("0", "2", "1")


def test_cpus_per_task_and_ntasks_per_node_appear_only_when_asked_for() -> None:
    plain = {**ENVPROBE, "spec": {**ENVPROBE["spec"], "ntasks_per_node": None}}
    env = batch_environment(plain, CTX)
    assert "SLURM_NTASKS_PER_NODE" not in env and "SLURM_CPUS_PER_TASK" not in env
    threaded = {**ENVPROBE, "spec": {**ENVPROBE["spec"], "cpus_per_task": 4}}
    assert batch_environment(threaded, CTX)["SLURM_CPUS_PER_TASK"] == "4"


@pytest.mark.parametrize(
    ("counts", "text"),
    [([2, 2], "2(x2)"), ([3, 1], "3,1"), ([2, 2, 1], "2(x2),1"), ([8], "8"), ([1, 2, 2, 2], "1,2(x3)"), ([], "")],
)
def test_counts_use_slurms_run_length_form(counts: list[int], text: str) -> None:
    assert format_counts(counts) == text


@pytest.mark.parametrize(
    ("ntasks", "cpus", "cpt", "per_node", "expected"),
    [
        (4, [2, 2], 1, 2, [2, 2]),
        (3, [2, 2], 1, 2, [2, 1]),
        (4, [32, 32], 1, None, [3, 1]),  # block: fill the first node
        (4, [2, 2], 1, None, [2, 2]),
        (2, [4, 4], 2, None, [1, 1]),
        (5, [1, 1], 1, None, [3, 2]),  # overcommitted: round-robin the rest
    ],
)
def test_tasks_are_laid_out_in_blocks(
    ntasks: int, cpus: list[int], cpt: int, per_node: int | None, expected: list[int]
) -> None:
    assert tasks_per_node(ntasks, cpus, cpt, per_node) == expected
