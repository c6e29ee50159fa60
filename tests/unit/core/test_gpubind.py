"""``--gpu-bind``: Slurm's forms parsed, and which GPUs each local task of a node sees."""

from __future__ import annotations

import pytest

from muster.core.gpubind import GpuBind, GpuBindError, parse_gpu_bind, task_gpus, verbose_line


def test_the_default_shows_every_task_all_of_the_steps_gpus_on_its_node() -> None:
    assert task_gpus(None, [0, 1], 2) == [[0, 1], [0, 1]]
    assert task_gpus("", [4, 5, 6, 7], 4) == [[4, 5, 6, 7]] * 4


def test_gpus_per_task_binds_per_task_unless_none_is_asked() -> None:
    assert task_gpus(None, [0, 1, 2, 3], 2, gpus_per_task=2) == [[0, 1], [2, 3]]
    assert task_gpus("none", [0, 1, 2, 3], 2, gpus_per_task=2) == [[0, 1, 2, 3]] * 2


def test_closest_is_every_gpu_as_muster_knows_no_socket_affinity() -> None:
    assert task_gpus("closest", [0, 1], 2) == [[0, 1], [0, 1]]


def test_single_deals_tasks_onto_gpus_in_blocks() -> None:
    assert task_gpus("single:1", [0, 1], 2) == [[0], [1]]
    assert task_gpus("single:2", [0, 1], 4) == [[0], [0], [1], [1]]
    assert task_gpus("single:1", [2, 3], 3) == [[2], [3], [2]]  # round again past the last


def test_per_task_gives_consecutive_gpus() -> None:
    assert task_gpus("per_task:1", [0, 1], 2) == [[0], [1]]
    assert task_gpus("per_task:2", [0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert task_gpus("per_task:2", [0, 1, 2], 2) == [[0, 1], [2, 0]]


def test_map_gpu_counts_the_steps_gpus_on_the_node_and_is_reused() -> None:
    assert task_gpus("map_gpu:1,0", [0, 1], 2) == [[1], [0]]
    assert task_gpus("map_gpu:1,0", [4, 6], 2) == [[6], [4]]  # step-relative ids
    assert task_gpus("map_gpu:0*2,1*2", [0, 1], 4) == [[0], [0], [1], [1]]
    assert task_gpus("map_gpu:1", [0, 1], 3) == [[1], [1], [1]]


def test_mask_gpu_takes_hexadecimal_masks() -> None:
    assert task_gpus("mask_gpu:0x2,0x1", [0, 1], 2) == [[1], [0]]
    assert task_gpus("mask_gpu:3", [0, 1], 2) == [[0, 1], [0, 1]]
    assert task_gpus("mask_gpu:0xf*1,f0", list(range(8)), 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_map_or_mask_past_the_steps_gpus_is_refused() -> None:
    with pytest.raises(GpuBindError, match="map_gpu names GPU 2"):
        task_gpus("map_gpu:2", [0, 1], 1)
    with pytest.raises(GpuBindError, match="mask_gpu names GPU 3"):
        task_gpus("mask_gpu:0x8", [0, 1], 1)


def test_verbose_prefix_is_kept_apart() -> None:
    assert parse_gpu_bind("verbose,single:1") == GpuBind(kind="single", count=1, verbose=True)
    assert parse_gpu_bind("verbose") == GpuBind(verbose=True)
    assert task_gpus("verbose,map_gpu:1,0", [0, 1], 2) == [[1], [0]]
    assert parse_gpu_bind("NONE").kind == "none"


@pytest.mark.parametrize(
    "bad",
    [
        "bogus",
        "single",
        "single:0",
        "single:x",
        "per_task:",
        "map_gpu:",
        "map_gpu:a",
        "map_gpu:0,,1",
        "map_gpu:0*0",
        "mask_gpu:0",
        "mask_gpu:0xg",
        "none:1",
        "closest:2",
        "verbose,bogus",
    ],
)
def test_bad_forms_get_slurms_error(bad: str) -> None:
    with pytest.raises(GpuBindError) as info:
        parse_gpu_bind(bad)
    assert str(info.value) == f"Invalid --gpu-bind argument: {bad}"


def test_an_older_srun_s_bare_word_still_binds() -> None:
    # srun before Slurm's forms sent only the word before ':' (and stored steps hold it)
    assert task_gpus("single", [0, 1], 2) == [[0], [1]]
    assert task_gpus("map_gpu", [0, 1], 2, gpus_per_task=1) == [[0], [1]]


def test_no_gpus_means_no_binding() -> None:
    assert task_gpus("map_gpu:3", [], 2) == [[], []]


def test_verbose_line_names_the_task_and_step_gpus() -> None:
    assert verbose_line([0, 1], [1], 1) == (
        "gpu-bind: usable_gres=0x2; bit_alloc=0x3; local_inx=1; global_list=1; local_list=1"
    )
