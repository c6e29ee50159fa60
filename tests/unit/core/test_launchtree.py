"""The launch tree's split (``core.launchtree``): every node once, in order, at most
``width`` groups of nearly equal size, and a depth that grows with log(n)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.core.launchtree import depth, subtrees


def nodes(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def test_sixteen_nodes_in_a_tree_of_width_two_split_in_halves() -> None:
    assert subtrees(nodes(16), 2) == [nodes(16)[:8], nodes(16)[8:]]


def test_uneven_counts_put_the_larger_groups_first() -> None:
    assert [len(g) for g in subtrees(nodes(7), 3)] == [3, 2, 2]
    assert [len(g) for g in subtrees(nodes(64), 50)] == [2] * 14 + [1] * 36


def test_a_width_at_least_the_node_count_is_flat() -> None:
    assert subtrees(nodes(5), 50) == [[n] for n in nodes(5)]


def test_no_nodes_no_groups_and_a_width_below_one_is_a_chain() -> None:
    assert subtrees([], 4) == []
    assert subtrees(nodes(3), 0) == [nodes(3)]


@pytest.mark.parametrize(
    ("n", "width", "levels"),
    [(1, 50, 1), (50, 50, 1), (51, 50, 2), (16, 2, 4), (512, 50, 2), (512, 8, 3), (3, 1, 3)],
)
def test_the_tree_is_log_width_of_n_levels_deep(n: int, width: int, levels: int) -> None:
    assert depth(n, width) == levels


@given(st.integers(min_value=0, max_value=600), st.integers(min_value=1, max_value=80))
def test_every_node_once_in_order_in_at_most_width_nonempty_groups(n: int, width: int) -> None:
    groups = subtrees(list(range(n)), width)
    assert [x for g in groups for x in g] == list(range(n))
    assert len(groups) <= width
    assert all(groups)
    sizes = [len(g) for g in groups]
    assert not sizes or max(sizes) - min(sizes) <= 1


def walk(names: list[int], width: int) -> list[tuple[int, int]]:
    """(node, level) for every node a launch reaches, relaying as the agents do."""
    out = []

    def visit(group: list[int], level: int) -> None:
        out.append((group[0], level))
        for sub in subtrees(group[1:], width):
            visit(sub, level + 1)

    for group in subtrees(names, width):
        visit(group, 1)
    return out


@given(st.integers(min_value=1, max_value=600), st.integers(min_value=1, max_value=60))
def test_relaying_reaches_every_node_once_and_no_sender_has_more_than_width_children(n: int, width: int) -> None:
    reached = walk(list(range(n)), width)
    assert sorted(node for node, _ in reached) == list(range(n))
    assert max(level for _, level in reached) == depth(n, width)
