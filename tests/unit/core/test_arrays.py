"""--array specifications, task ranges and A_i job references."""

from __future__ import annotations

import pytest

from muster.core.arrays import (
    ArraySpec,
    JobRef,
    format_ranges,
    parse_array,
    parse_job_ref,
)


@pytest.mark.parametrize(
    "text, indices, throttle",
    [
        ("0-9", tuple(range(10)), 0),
        ("1,3,5-7", (1, 3, 5, 6, 7), 0),
        ("0-15:4", (0, 4, 8, 12), 0),
        ("0-99%10", tuple(range(100)), 10),
        ("7", (7,), 0),
        ("3,1,3", (1, 3), 0),
    ],
)
def test_array_specifications(text: str, indices: tuple[int, ...], throttle: int) -> None:
    assert parse_array(text, 1001) == ArraySpec(indices, throttle)


@pytest.mark.parametrize(
    "text",
    ["", "a", "1-", "5-1", "0-10:0", "1:2", "1-3%x", "0-1001", "1001", "1-5%0", "1-5%00", "1-5%2147483648", "1-5%"],
)
def test_bad_array_specifications(text: str) -> None:
    with pytest.raises(ValueError, match="Invalid job array specification"):
        parse_array(text, 1001)


def test_the_largest_index_must_stay_below_max_array_size() -> None:
    assert parse_array("1000", 1001).indices == (1000,)
    with pytest.raises(ValueError):
        parse_array("1-5000", 1001)


def test_step_is_the_common_difference_or_one() -> None:
    assert parse_array("0-15:4", 1001).step == 4
    assert parse_array("1,3,5-7", 1001).step == 1
    assert parse_array("5", 1001).step == 1


def test_ranges_print_like_slurm() -> None:
    assert format_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert format_ranges([4]) == "4"
    assert format_ranges([]) == ""


@pytest.mark.parametrize(
    "text, ref",
    [
        ("123", JobRef(123)),
        ("123_7", JobRef(123, (7,))),
        ("123_[1-3]", JobRef(123, (1, 2, 3))),
        ("123_[1,5-6%2]", JobRef(123, (1, 5, 6))),
    ],
)
def test_job_references(text: str, ref: JobRef) -> None:
    assert parse_job_ref(text) == ref


@pytest.mark.parametrize("text", ["abc", "0", "12_", "12_x", "12_[3-1]", "12.0", "_3"])
def test_bad_job_references(text: str) -> None:
    with pytest.raises(ValueError):
        parse_job_ref(text)


def test_references_print_back() -> None:
    assert str(JobRef(5)) == "5"
    assert str(JobRef(5, (2,))) == "5_2"
    assert str(JobRef(5, (1, 2, 3, 9))) == "5_[1-3,9]"
