"""``--cpu-bind`` parsed, and how a job's CPUs on a node are shared out among its tasks."""

from __future__ import annotations

import pytest

from muster.core.cpubind import (
    CpuBind,
    CpuBindError,
    mask_text,
    parse_cpu_bind,
    pick_least_used,
    task_cpu_sets,
)


@pytest.mark.parametrize(
    ("text", "kind", "lists", "verbose"),
    [
        (None, "auto", (), False),
        ("", "auto", (), False),
        ("none", "none", (), False),
        ("verbose,cores", "task", (), True),
        ("v,threads", "task", (), True),
        ("rank", "task", (), False),
        ("verbose,quiet,sockets", "job", (), False),
        ("map_cpu:3,1", "map", ((3,), (1,)), False),
        ("verbose,map_cpu:0*2,5", "map", ((0,), (0,), (5,)), True),
        ("mask_cpu:0x3,C", "mask", ((0, 1), (2, 3)), False),
    ],
)
def test_parse(text: str | None, kind: str, lists: tuple[tuple[int, ...], ...], verbose: bool) -> None:
    assert parse_cpu_bind(text) == CpuBind(kind, lists, verbose)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cors", 'unrecognized --cpu-bind argument "cors"'),
        ("map_cpu:a", 'bad CPU id "a"'),
        ("map_cpu:", 'bad CPU id ""'),
        ("mask_cpu:0x0", 'bad CPU mask "0x0"'),
        ("mask_cpu:zz", 'bad CPU mask "zz"'),
        ("map_ldom:0", "not supported"),
    ],
)
def test_bad_values_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CpuBindError, match=message):
        parse_cpu_bind(text)


def test_masks_print_as_slurm_does() -> None:
    assert mask_text([0]) == "0x1"
    assert mask_text([0, 1, 4]) == "0x13"


def test_least_used_cpus_are_picked_first_in_pool_order() -> None:
    assert pick_least_used([0, 1, 2, 3], {0: 1, 2: 1}, 2) == [1, 3]
    assert pick_least_used([0, 1, 2, 3], {}, 9) == [0, 1, 2, 3]
    assert pick_least_used([4, 5], {4: 2, 5: 1}, 1) == [5]
    assert pick_least_used([], {}, 1) == []


def test_tasks_get_cpus_of_their_own_then_share_when_there_are_too_few() -> None:
    usage: dict[int, int] = {}
    assert task_cpu_sets(CpuBind("task"), [2, 3, 4, 5], [2, 2], usage) == [(2, 3), (4, 5)]
    # a second step of the job: every CPU is held once, so it starts over from the first
    assert task_cpu_sets(CpuBind("task"), [2, 3, 4, 5], [1], usage) == [(2,)]
    assert task_cpu_sets(CpuBind("task"), [0, 1], [1, 1, 1], {}) == [(0,), (1,), (0,)]


def test_an_absent_option_follows_the_default_and_none_binds_nothing() -> None:
    assert task_cpu_sets(CpuBind(), [0, 1], [1, 1], {}) is None
    assert task_cpu_sets(CpuBind(), [0, 1], [1, 1], {}, default="task") == [(0,), (1,)]
    assert task_cpu_sets(CpuBind("none"), [0, 1], [1], {}, default="task") is None
    assert task_cpu_sets(CpuBind("job"), [1, 0], [1, 1], {}) == [(0, 1), (0, 1)]


def test_maps_and_masks_stay_inside_the_jobs_cpus() -> None:
    bind = parse_cpu_bind("map_cpu:1,3")
    assert task_cpu_sets(bind, [0, 1, 2, 3], [1, 1, 1], {}) == [(1,), (3,), (1,)]
    assert task_cpu_sets(bind, [0, 1], [1, 1], {}) == [(1,), (0, 1)]  # 3 is not the job's
    mask = parse_cpu_bind("mask_cpu:0x6")
    assert task_cpu_sets(mask, [0, 1, 2, 3], [1], {}) == [(1, 2)]
