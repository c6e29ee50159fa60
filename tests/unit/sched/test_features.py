"""--constraint expressions."""

from __future__ import annotations

import pytest

from muster.sched.features import FeatureError, parse_constraint


@pytest.mark.parametrize(
    "expr, features, matches",
    [
        ("ib", {"ib"}, True),
        ("ib", {"eth"}, False),
        ("ib&nvlink", {"ib", "nvlink"}, True),
        ("ib&nvlink", {"ib"}, False),
        ("ib,nvlink", {"ib"}, False),
        ("ib|nvlink", {"nvlink"}, True),
        ("a&b|c", {"c"}, True),
        ("a&(b|c)", {"a", "c"}, True),
        ("a&(b|c)", {"c"}, False),
        ("[rack1|rack2]", {"rack2"}, True),
    ],
)
def test_constraints_match_node_features(expr: str, features: set[str], matches: bool) -> None:
    assert parse_constraint(expr).matches(frozenset(features)) is matches


@pytest.mark.parametrize("expr", ["", "&", "a&", "a|", "(a", "a)", "ib*2", "a b"])
def test_malformed_constraints_are_rejected(expr: str) -> None:
    with pytest.raises(FeatureError):
        parse_constraint(expr)
