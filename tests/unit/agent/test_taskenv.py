"""A step task's environment matches what Slurm 22.05 gave the same tasks (tests/fixtures/slurm-22.05),
plus the PyTorch variables."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.agent.env import EnvContext
from muster.agent.taskenv import task_environment
from muster.core.steps import NodeShare, StepLayout, StepRequest, master_port, plan_step

REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "slurm-22.05"
CTX = EnvContext(
    node="node1", cluster="anchor", conf_path="/etc/slurm/slurm.conf", ctld_addr="127.0.0.1", ctld_port=6817
)
# Variables the reference shows that only the child knows (its pid).
CHILD_ONLY = {"SLURM_TASK_PID"}


def read_reference(name: str) -> dict[str, str]:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference capture {path} not available")
    out = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def grant_for(request: StepRequest, job_id: int) -> dict[str, Any]:
    """``srun -N2 --ntasks-per-node=2 ...`` as root on the reference cluster (job 48/49)."""
    layout = plan_step(request, [NodeShare("node1", 2, (0, 1)), NodeShare("node2", 2, (0, 1))])
    assert isinstance(layout, StepLayout)
    return {
        "job_id": job_id,
        "attempt": 0,
        "step_id": 0,
        "uid": 0,
        "gid": 0,
        "user": "root",
        "job": {
            "name": "bash",
            "partition": "gpu",
            "account": "root",
            "qos": "normal",
            "submit_host": "vm",
            "workdir": "/var/lib/slurm-anchor/work",
            "nodes": ["node1", "node2"],
            "cpus": [2, 2],
            "restart_count": 0,
        },
        "step": {
            "nodes": layout.nodes,
            "addrs": ["127.0.0.2", "127.0.0.3"],
            "tasks": layout.tasks,
            "cpus": layout.cpus,
            "gpus": layout.gpus,
            "task_gpus": layout.task_gpus,
            "distribution": "block",
            "cpus_per_task": 1,
            "ntasks_per_node": request.ntasks_per_node,
            "gpus_per_task": request.gpus_per_task,
            "master_port": master_port(job_id, 0),
        },
    }


def env_of(grant: dict[str, Any], task: int) -> dict[str, str]:
    node = "node1" if task < 2 else "node2"
    ctx = EnvContext(node=node, cluster=CTX.cluster, conf_path=CTX.conf_path, ctld_addr="127.0.0.1", ctld_port=6817)
    launch = {"launch_host": "127.0.0.1", "srun_port": 41383, "umask": "0022"}
    return task_environment({"HOME": "/root", "SLURM_PRIO_PROCESS": "0"}, grant, node, task % 2, ctx, launch)


def slurm_part(env: dict[str, str]) -> dict[str, str]:
    keep = ("SLURM", "CUDA_", "GPU_", "ROCR_", "ZE_")
    return {k: v for k, v in env.items() if k.startswith(keep)}


@pytest.mark.parametrize("task", [0, 1, 2, 3])
def test_srun_task_variables_are_slurms(task: int) -> None:
    ref = read_reference(f"env_srun_task{task}.txt")
    grant = grant_for(StepRequest(ntasks_per_node=2, gpus_per_node=2), 48)  # Slurm's default binding
    ours = slurm_part(env_of(grant, task))
    assert set(ours) == set(ref) - CHILD_ONLY
    different = {k: (ours[k], ref[k]) for k in ours if ours[k] != ref[k]}
    # Ports and addresses are the run's own; everything else is the same text.
    assert set(different) <= {"SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT"}, different


@pytest.mark.parametrize("task", [0, 1, 2, 3])
def test_gpus_per_task_binds_each_task_like_slurm(task: int) -> None:
    ref = read_reference(f"env_srun_gpus-per-task1_task{task}.txt")
    grant = grant_for(StepRequest(ntasks_per_node=2, gpus_per_task=1), 49)
    ours = slurm_part(env_of(grant, task))
    assert set(ours) == set(ref) - CHILD_ONLY
    for key in (
        "CUDA_VISIBLE_DEVICES",
        "SLURM_STEP_GPUS",
        "SLURM_GPUS_ON_NODE",
        "SLURMD_TRES_BIND",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_GTIDS",
        "SLURMD_NODENAME",
    ):
        assert ours[key] == ref[key], key


def test_every_task_sees_all_of_its_nodes_step_gpus_by_default_as_in_slurm() -> None:
    grant = grant_for(StepRequest(ntasks_per_node=2, gpus_per_node=2), 48)
    envs = [env_of(grant, t) for t in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1"] * 4
    assert [e["SLURM_STEP_GPUS"] for e in envs] == ["0,1"] * 4
    assert not any("SLURMD_TRES_BIND" in e for e in envs)


@pytest.mark.parametrize(
    ("bind", "seen"),
    [
        ("single:1", ["0", "1"]),
        ("map_gpu:1,0", ["1", "0"]),
        ("mask_gpu:0x2,0x1", ["1", "0"]),
        ("per_task:1", ["0", "1"]),
        ("verbose,none", ["0,1", "0,1"]),
    ],
)
def test_gpu_bind_sets_each_tasks_gpu_variables(bind: str, seen: list[str]) -> None:
    grant = grant_for(StepRequest(ntasks_per_node=2, gpus_per_node=2, gpu_bind=bind), 48)
    grant["step"]["gpu_bind"] = bind
    envs = [env_of(grant, t) for t in range(2)]
    for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_STEP_GPUS"):
        assert [e[var] for e in envs] == seen, var
    assert {e["SLURM_GPUS_ON_NODE"] for e in envs} == {"2"}
    assert {e["SLURMD_TRES_BIND"] for e in envs} == {f"gpu:{bind}"}


def test_pytorch_finds_its_peers_from_the_environment() -> None:
    grant = grant_for(StepRequest(ntasks_per_node=2), 48)
    envs = [env_of(grant, t) for t in range(4)]
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.2"}  # the first node's address
    assert {e["MASTER_PORT"] for e in envs} == {str(master_port(48, 0))}
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}


def test_the_pytorch_variables_can_be_left_out_and_a_users_master_is_kept() -> None:
    grant = grant_for(StepRequest(ntasks_per_node=2), 48)
    off = task_environment({}, grant, "node1", 0, CTX, {"torch_env": False})
    assert "RANK" not in off and "MASTER_ADDR" not in off
    mine = task_environment({"MASTER_ADDR": "head", "MASTER_PORT": "1234", "RANK": "9"}, grant, "node1", 1, CTX)
    assert (mine["MASTER_ADDR"], mine["MASTER_PORT"], mine["RANK"]) == ("head", "1234", "1")


def test_step_variables_replace_inherited_ones_and_the_batch_tag_is_dropped() -> None:
    grant = grant_for(StepRequest(ntasks=1), 48)
    base = {"SLURM_NTASKS": "4", "SLURM_STEP_ID": "3", "MUSTER_JOB_TAG": "x.48.0", "SLURM_JOB_GPUS": "0,1"}
    env = task_environment(base, grant, "node1", 0, CTX)
    assert env["SLURM_NTASKS"] == "1" and env["SLURM_STEP_ID"] == "0"
    assert "MUSTER_JOB_TAG" not in env and env["MUSTER_JOB_ID"] == "48"
    assert env["SLURM_JOB_GPUS"] == "0,1"  # the batch script's own, inherited as in Slurm


def test_preserve_env_keeps_the_allocations_counts_and_nothing_else() -> None:
    grant = grant_for(StepRequest(ntasks=1), 48)
    launch = {"preserve_env": {"SLURM_NNODES": "3", "SLURM_NTASKS": "6", "SLURM_PROCID": "9"}}
    env = task_environment({}, grant, "node1", 0, CTX, launch)
    assert env["SLURM_NNODES"] == "3" and env["SLURM_NTASKS"] == "6"
    assert env["SLURM_PROCID"] == "0"  # only the counts are srun's to keep
    assert task_environment({}, grant, "node1", 0, CTX)["SLURM_NTASKS"] == "1"
