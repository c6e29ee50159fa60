"""Slurm's compact count lists (``2(x2),1``) have one writer: core.counts."""

from __future__ import annotations

import pytest

from muster.core.counts import format_counts


@pytest.mark.parametrize(
    ("counts", "text"),
    [
        ([], ""),
        ([4], "4"),
        ([2, 2], "2(x2)"),
        ([2, 2, 1], "2(x2),1"),
        ([1, 2, 2, 2, 1, 1], "1,2(x3),1(x2)"),
        ([8, 4, 8], "8,4,8"),  # runs are consecutive: equal values apart stay apart
    ],
)
def test_runs_are_written_once_with_their_length(counts: list[int], text: str) -> None:
    assert format_counts(counts) == text


def test_the_agent_and_salloc_write_it_with_the_same_function() -> None:
    from muster.agent import env
    from muster.cli import salloc

    assert env.format_counts is format_counts
    assert salloc.format_counts is format_counts
