"""The simulated machine and how trace jobs ask for it."""

from __future__ import annotations

import pytest

from muster.core.config import parse_config
from muster.sim.cluster import (
    ClusterError,
    cluster_from_config,
    shape_for,
    spec_for,
    uniform_cluster,
)

KTH = {"maxprocs": "100", "maxnodes": "100"}


def test_an_swf_trace_defaults_to_a_pool_of_its_processors() -> None:
    c = uniform_cluster("procs", KTH)
    assert [(n.cpus, n.gpus) for n in c.nodes] == [(100, 0)]
    assert c.capacity("procs") == 100 and "processor pool" in c.description


@pytest.mark.parametrize(
    ("nodes", "cpus", "expected"),
    [(100, 1, (100, 1)), (None, 4, (25, 4)), (10, None, (10, 10)), (None, 3, (34, 3))],
)
def test_a_node_shape_can_be_given(nodes: int | None, cpus: int | None, expected: tuple[int, int]) -> None:
    c = uniform_cluster("procs", KTH, nodes, cpus)
    assert (len(c.nodes), c.nodes[0].cpus) == expected


def test_a_processor_job_asks_like_sbatch_n() -> None:
    nodes = uniform_cluster("procs", KTH, 100, 1)
    shape = shape_for(spec_for(56, "procs", nodes), nodes)
    assert (shape.nodes, shape.cpus_per_node) == (56, 1)
    pool = uniform_cluster("procs", KTH)
    shape = shape_for(spec_for(56, "procs", pool), pool)
    assert (shape.nodes, shape.cpus_per_node) == (1, 56)
    fours = uniform_cluster("procs", KTH, 25, 4)
    shape = shape_for(spec_for(10, "procs", fours), fours)
    assert (shape.nodes, shape.cpus_per_node) == (3, 4)  # -n 10 on 4-CPU nodes, as compute_shape packs


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_node"),
    [(1, 1, 1), (4, 1, 4), (8, 1, 8), (16, 2, 8), (64, 8, 8), (12, 2, 6)],
)
def test_a_gpu_job_fills_nodes_of_eight(gpus: int, nodes: int, per_node: int) -> None:
    c = uniform_cluster("gpus", nodes=64)
    shape = shape_for(spec_for(gpus, "gpus", c), c)
    assert (shape.nodes, shape.gpus_per_node, shape.cpus_per_node) == (nodes, per_node, per_node)
    assert c.capacity("gpus") == 512


def test_jobs_larger_than_the_machine_do_not_fit() -> None:
    c = uniform_cluster("gpus", nodes=2, gpus_per_node=8)
    assert c.fits(shape_for(spec_for(16, "gpus", c), c))
    assert not c.fits(shape_for(spec_for(32, "gpus", c), c))


@pytest.mark.parametrize(
    ("unit", "header", "kw", "message"),
    [
        ("gpus", {}, {}, "give --nodes N"),
        ("procs", {}, {}, "neither MaxProcs nor MaxNodes"),
        ("procs", KTH, {"nodes": 0}, "--nodes must be a positive number"),
        ("procs", KTH, {"cpus_per_node": -1}, "--cpus-per-node must be a positive number"),
        ("gpus", {}, {"nodes": 2, "gpus_per_node": 0}, "at least 1"),
    ],
)
def test_a_cluster_that_cannot_be_built_says_why(
    unit: str, header: dict[str, str], kw: dict[str, int], message: str
) -> None:
    with pytest.raises(ClusterError, match=message):
        uniform_cluster(unit, header, **kw)


def test_a_cluster_can_come_from_a_slurm_conf() -> None:
    conf = parse_config(
        "NodeName=gpu[1-4] CPUs=64 RealMemory=512000 Gres=gpu:a100:8\n"
        "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE\n",
        "sim.conf",
    )
    c = cluster_from_config(conf)
    assert [n.name for n in c.nodes] == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert c.capacity("gpus") == 32 and c.default_partition == "main"
    assert c.nodes[0].free_gpu_ids == list(range(8))


def test_a_conf_cluster_keeps_drained_nodes_out_and_applies_def_mem_per_cpu() -> None:
    conf = parse_config(
        "DefMemPerCPU=100\n"
        "NodeName=c[1-2] CPUs=4 RealMemory=1000\nNodeName=c3 CPUs=4 RealMemory=1000 State=DRAIN\n"
        "PartitionName=p Nodes=ALL Default=YES\n",
        "sim.conf",
    )
    c = cluster_from_config(conf)
    assert [n.available for n in c.nodes] == [True, True, False]
    shape = shape_for(spec_for(6, "procs", c), c)
    assert (shape.nodes, shape.cpus_per_node, shape.mem_per_node) == (2, 3, 300)
    assert c.fits(shape) and not c.fits(shape_for(spec_for(12, "procs", c), c))
