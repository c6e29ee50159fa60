"""Placement: best fit, whole nodes kept free, contiguous runs, weights, GPU indices."""

from __future__ import annotations

from muster.sched.testing import SchedHarness, job, node


def placed(h: SchedHarness, at: float = 0) -> dict[int, list[str]]:
    d = h.schedule(at=at)
    return {s.job_id: [a.node for a in s.alloc] for s in d.starts}


def test_a_small_gpu_job_fills_a_partly_used_node_before_an_idle_one() -> None:
    h = SchedHarness().gpu_nodes(3, gpus=8)
    h.run_job(job().nodelist("gpu2").gpus(6).time("1:00:00"))
    j = h.submit(job().gpus(2), at=1)
    assert placed(h, 1)[j] == ["gpu2"]


def test_a_cpu_only_job_keeps_off_free_gpus() -> None:
    h = SchedHarness().gpu_nodes(2, gpus=8)
    h.add_node(node("cpu1").cpus(64))
    j = h.submit(job().cpus(4))
    assert placed(h)[j] == ["cpu1"]


def test_a_multi_node_job_takes_a_contiguous_run_of_nodes() -> None:
    h = SchedHarness().gpu_nodes(6, gpus=8)
    h.run_job(job().nodelist("gpu2").gpus(1).time("1:00:00"))
    j = h.submit(job().nodes(3).gpus(8), at=1)
    assert placed(h, 1)[j] == ["gpu3", "gpu4", "gpu5"]


def test_lower_weight_nodes_are_used_first() -> None:
    h = SchedHarness()
    h.add_node(node("heavy").gpus(8).weight(10))
    h.add_node(node("light").gpus(8).weight(1))
    j = h.submit(job().gpus(1))
    assert placed(h)[j] == ["light"]


def test_gpus_are_the_lowest_free_indices() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    h.run_job(job().gpus(3).time("1:00:00"))
    j = h.submit(job().gpus(2), at=1)
    d = h.schedule(at=1)
    (s,) = [s for s in d.starts if s.job_id == j]
    assert s.alloc[0].gpu_ids == [3, 4]


def test_nodelist_nodes_are_always_part_of_the_allocation() -> None:
    h = SchedHarness().gpu_nodes(4, gpus=8)
    j = h.submit(job().nodes(2).nodelist("gpu4"))
    assert sorted(placed(h)[j]) == ["gpu1", "gpu4"]


def test_memory_and_cpus_are_given_as_asked() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8, cpus=16, mem=1000)
    a = h.submit(job().cpus(10).mem(600))
    b = h.submit(job().cpus(10).mem(300))
    c = h.submit(job().cpus(6).mem(400))
    d = h.schedule(at=0)
    assert h.started(d) == [a, c]
    assert d.reasons[b].value == "Resources"


def test_a_multi_node_job_stays_under_one_leaf_switch_when_one_can_hold_it() -> None:
    h = SchedHarness()
    for i, sw in enumerate(["s1", "s1", "s1", "s2", "s2", "s3", "s3", "s3", "s3"]):
        h.add_node(node(f"n{i + 1}").gpus(8).switch(sw))
    two = h.submit(job().nodes(2).gpus(8))
    three = h.submit(job().nodes(3).gpus(8))
    placed_now = placed(h)
    assert placed_now[two] == ["n4", "n5"]  # the smallest switch that holds it
    assert placed_now[three] == ["n1", "n2", "n3"]


def test_a_job_larger_than_any_switch_takes_the_biggest_switches_first() -> None:
    h = SchedHarness()
    for i, sw in enumerate(["s1", "s2", "s2", "s3", "s3", "s3"]):
        h.add_node(node(f"n{i + 1}").gpus(8).switch(sw))
    j = h.submit(job().nodes(5).gpus(8))
    assert sorted(placed(h)[j]) == ["n2", "n3", "n4", "n5", "n6"]
