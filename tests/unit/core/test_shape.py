"""compute_shape: --mincpus and --overcommit change what each node must give."""

from __future__ import annotations

from muster.core.job import JobSpec, compute_shape


def test_mincpus_raises_the_per_node_cpu_count_and_never_lowers_it() -> None:
    assert compute_shape(JobSpec(min_cpus=8), 32).cpus_per_node == 8
    assert compute_shape(JobSpec(ntasks=4, cpus_per_task=4, min_cpus=2), 32).cpus_per_node == 16


def test_overcommit_counts_cpus_for_one_task_per_node() -> None:
    plain = compute_shape(JobSpec(ntasks=33), 32)
    assert (plain.nodes, plain.cpus_per_node) == (2, 17)  # 33 tasks need a second node
    over = compute_shape(JobSpec(ntasks=33, overcommit=True), 32)
    assert (over.nodes, over.ntasks, over.cpus_per_node) == (1, 33, 1)
    spread = compute_shape(JobSpec(ntasks=8, min_nodes=2, cpus_per_task=2, overcommit=True), 32)
    assert (spread.nodes, spread.cpus_per_node) == (2, 2)


def test_overcommit_does_not_shrink_an_exclusive_request() -> None:
    shape = compute_shape(JobSpec(ntasks=4, min_nodes=1, exclusive=True, overcommit=True), 32)
    assert shape.cpus_per_node == 4
