"""A heterogeneous job's batch script: ``SLURM_HET_SIZE`` and each component's variables
with its ``_HET_GROUP_<k>`` suffix; the plain names describe component 0."""

from __future__ import annotations

from typing import Any

from muster.agent.env import EnvContext, batch_environment

CTX = EnvContext(node="n1", cluster="c", conf_path="/etc/slurm/slurm.conf")


def _component(job_id: int, offset: int, nodes: list[str], gpus: list[int], name: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "het_job_id": 40,
        "het_job_offset": offset,
        "user": "u",
        "uid": 1000,
        "gid": 1000,
        "partition": "main",
        "start_time": 1_700_000_000.0,
        "time_limit": 600,
        "spec": {"name": name, "workdir": "/w", "environment": {"SECRET": "x"}, "cpus_per_task": 1},
        "shape": {"nodes": len(nodes), "cpus_per_node": 2, "ntasks": len(nodes)},
        "alloc": [{"node": n, "cpus": 2, "mem": 100, "gpu_ids": list(gpus)} for n in nodes],
    }


def test_each_component_is_described_with_its_group_suffix() -> None:
    leader = _component(40, 0, ["n1"], [0], "role-0")
    other = _component(41, 1, ["n2", "n3"], [2, 3], "role-1")
    job = dict(leader)
    job["het_components"] = [leader, other]
    env = batch_environment(job, CTX)
    assert env["SLURM_HET_SIZE"] == "2"
    assert env["SLURM_JOB_ID"] == "40" and env["SLURM_JOB_NODELIST"] == "n1"
    assert env["SLURM_JOB_ID_HET_GROUP_0"] == "40"
    assert env["SLURM_JOB_ID_HET_GROUP_1"] == "41"
    assert env["SLURM_JOB_NODELIST_HET_GROUP_0"] == "n1"
    assert env["SLURM_JOB_NODELIST_HET_GROUP_1"] == "n[2-3]"
    assert env["SLURM_JOB_NUM_NODES_HET_GROUP_1"] == "2"
    assert env["SLURM_JOB_NAME_HET_GROUP_1"] == "role-1"
    assert env["SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1"] == "2(x2)"
    assert env["SLURM_JOB_GPUS_HET_GROUP_0"] == "0"
    assert env["SLURM_JOB_GPUS_HET_GROUP_1"] == "2,3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # the script's own node, component 0
    assert not any(k.endswith("_HET_GROUP_1") and k.startswith("SECRET") for k in env)


def test_an_ordinary_job_has_no_het_variables() -> None:
    env = batch_environment(_component(5, 0, ["n1"], [], "plain") | {"het_job_id": None}, CTX)
    assert "SLURM_HET_SIZE" not in env
    assert not any("_HET_GROUP_" in k for k in env)
