"""Fair-share: decayed usage and the Fair Tree ranking, by hand-computed cases."""

from __future__ import annotations

import math

import pytest

from muster.sched.fairshare import Node, Standing, Usage, factor_table, fair_tree, fairshare_of


def test_usage_halves_every_half_life() -> None:
    u = Usage(100.0, as_of=0.0)
    u.values["a"] = {"billing": 80.0}
    u.decay_to(100.0)
    assert u.get("a") == pytest.approx(40.0)
    u.decay_to(300.0)
    assert u.get("a") == pytest.approx(10.0)


def test_a_charge_integrates_the_decay_exactly_whatever_the_update_steps() -> None:
    once = Usage(3600.0, as_of=0.0)
    once.decay_to(7200.0)
    once.charge(["a"], {"billing": 2.0}, 0.0, 7200.0)
    stepped = Usage(3600.0, as_of=0.0)
    for t in range(600, 7201, 600):
        stepped.decay_to(float(t))
        stepped.charge(["a"], {"billing": 2.0}, t - 600.0, float(t))
    expected = 2.0 * 3600.0 / math.log(2) * (1 - 2.0**-2)
    assert once.get("a") == pytest.approx(expected)
    assert stepped.get("a") == pytest.approx(expected)


def test_a_reset_forgets_usage_and_charges_only_what_ran_after_it() -> None:
    u = Usage(0, as_of=0.0)
    u.decay_to(100.0)
    u.charge(["a"], {"billing": 1.0}, 0.0, 100.0)
    u.reset(60.0)
    assert u.get("a") == 0.0
    u.charge(["a"], {"billing": 1.0}, 0.0, 100.0)  # a job running since 0: only 60..100 counts
    assert u.get("a") == 40.0


def test_without_decay_usage_is_plain_tres_seconds() -> None:
    u = Usage(0, as_of=0.0)
    u.decay_to(50.0)
    u.charge(["a", "root"], {"billing": 8.0, "gres/gpu": 8.0}, 10.0, 50.0)
    assert u.get("a") == 320.0 and u.get("root", "gres/gpu") == 320.0


def _tree(edges: dict[str, list[tuple[str, bool, int]]]):  # noqa: ANN202
    return lambda key: [Node(k, is_user, shares) for k, is_user, shares in edges.get(key, [])]


def test_fair_tree_ranks_the_users_of_the_account_that_used_less_first() -> None:
    children = _tree(
        {
            "root|": [("A|", False, 1), ("B|", False, 1)],
            "A|": [("A|alice", True, 1)],
            "B|": [("B|bob", True, 1), ("B|carol", True, 1)],
        }
    )
    usage = {"A|": 900.0, "A|alice": 900.0, "B|": 100.0, "B|bob": 100.0, "B|carol": 0.0}
    s = fair_tree("root|", children, lambda k: usage.get(k, 0.0))
    # B is under-served (S/U = 0.5/0.1); inside B carol (no usage) comes before bob.
    assert s["B|carol"].factor == pytest.approx(1.0)
    assert s["B|bob"].factor == pytest.approx(2 / 3)
    assert s["A|alice"].factor == pytest.approx(1 / 3)
    assert s["A|"].level_fs == pytest.approx(0.5 / 0.9)
    assert math.isinf(s["B|carol"].level_fs)


def test_equal_standing_gives_equal_rank_and_no_shares_gives_zero() -> None:
    children = _tree(
        {
            "root|": [("A|", False, 1), ("B|", False, 1), ("C|", False, 0)],
            "A|": [("A|u1", True, 1)],
            "B|": [("B|u2", True, 1)],
            "C|": [("C|u3", True, 1)],
        }
    )
    s = fair_tree("root|", children, lambda k: 0.0)
    assert s["A|u1"].factor == s["B|u2"].factor == pytest.approx(1.0)
    assert s["C|u3"].factor == 0.0 or s["C|"].norm_shares == 0.0


def _standing(factor: float | None) -> Standing:
    return Standing(0.5, 0.0, 0.0, 1.0, factor)


def test_factor_table_keys_associations_then_users_that_agree_then_accounts() -> None:
    table = factor_table(
        {
            "root": _standing(None),
            "a": _standing(None),
            "a|ann": _standing(1.0),
            "a|bob": _standing(0.5),
            "b|bob": _standing(0.25),
        }
    )
    assert table["a|ann"] == 1.0 and table["ann"] == 1.0  # one association: the user's too
    assert "bob" not in table  # two that disagree: no user entry...
    assert table["b"] == 0.25 and table["a"] == 0.5  # ...the accounts' averages instead
    assert fairshare_of(table, "bob", "b", 0.5) == 0.25
    assert fairshare_of(table, "bob", None, 0.5) == 0.5
    assert fairshare_of(table, "ann", "gone", 0.5) == 1.0
    assert fairshare_of(table, "cat", "a", 0.5) == 0.5
