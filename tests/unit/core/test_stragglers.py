"""The straggler detector (core.stragglers): robust, needs evidence, hysteresis both ways."""

from __future__ import annotations

import pytest

from muster.core.stragglers import Pace, Rules, Watch, flagged, judge, node_pace, text

RULES = Rules(slower=0.20, clear=0.10, sustain=60.0, min_samples=5, min_nodes=3, mad_k=3.0)


def paces(*medians: float, samples: int = 9) -> dict[str, Pace]:
    return {f"n{i}": Pace(m, samples) for i, m in enumerate(medians)}


def run(series: list[tuple[float, dict[str, Pace]]]) -> dict[str, Watch]:
    watches: dict[str, Watch] = {}
    for now, p in series:
        watches = judge(p, watches, now, RULES)
    return watches


def test_a_node_34_percent_slower_for_the_sustain_window_is_flagged_with_its_evidence() -> None:
    p = paces(1.0, 1.02, 0.98, 1.34)
    w = run([(t, p) for t in range(0, 61, 10)])
    got = flagged(w)
    assert list(got) == ["n3"]
    assert got["n3"].flagged == 60
    assert got["n3"].peers == pytest.approx(1.0)
    assert got["n3"].slower == pytest.approx(0.34)
    assert text(got) == "n3(+34%)"


def test_not_before_the_sustain_window() -> None:
    p = paces(1.0, 1.0, 1.0, 1.5)
    assert flagged(run([(t, p) for t in range(0, 60, 10)])) == {}


def test_one_slow_judgement_resets_the_window() -> None:
    slow, even = paces(1.0, 1.0, 1.0, 1.5), paces(1.0, 1.0, 1.0, 1.0)
    series = [(0, slow), (20, slow), (40, even), (50, slow), (80, slow)]
    w = run(series)
    assert flagged(w) == {}
    assert w["n3"].slow_since == 50
    assert flagged(run([*series, (110, slow)])) != {}


def test_equal_nodes_and_small_differences_are_never_flagged() -> None:
    assert flagged(run([(t, paces(1.0, 1.0, 1.0, 1.0)) for t in range(0, 600, 10)])) == {}
    assert flagged(run([(t, paces(1.0, 1.05, 0.97, 1.15)) for t in range(0, 600, 10)])) == {}


def test_unequal_peers_raise_the_bar_mad() -> None:
    # peers spread widely: 25 % above their median is within their own noise
    p = paces(0.7, 1.0, 1.3, 0.8, 1.25)
    assert flagged(run([(t, p) for t in range(0, 600, 10)])) == {}


def test_too_few_samples_or_nodes_judge_nothing() -> None:
    assert flagged(run([(t, paces(1.0, 1.0, 2.0, samples=4)) for t in range(0, 600, 10)])) == {}
    assert flagged(run([(t, paces(1.0, 2.0)) for t in range(0, 600, 10)])) == {}


def test_cleared_only_after_sustained_recovery() -> None:
    slow, even = paces(1.0, 1.0, 1.0, 1.5), paces(1.0, 1.0, 1.0, 1.05)
    series = [(t, slow) for t in range(0, 61, 10)]
    assert flagged(run(series))
    # still 15 % slower: above the clear level, stays flagged
    mid = paces(1.0, 1.0, 1.0, 1.15)
    assert flagged(run([*series, *[(t, mid) for t in range(70, 300, 10)]]))
    # fast again, but not yet for the window
    assert flagged(run([*series, *[(t, even) for t in range(70, 121, 10)]]))
    assert flagged(run([*series, *[(t, even) for t in range(70, 131, 10)]])) == {}


def test_a_flagged_node_without_fresh_pace_stays_flagged_and_gone_nodes_are_dropped() -> None:
    series = [(t, paces(1.0, 1.0, 1.0, 1.5)) for t in range(0, 61, 10)]
    w = run(series)
    w = judge({"n3": Pace(1.5, 2), "n0": Pace(1.0, 9)}, w, 70, RULES)
    assert set(w) == {"n0", "n3"} and flagged(w).keys() == {"n3"}


def test_node_pace_is_the_slowest_rank_with_enough_samples() -> None:
    ranks = {"0": [10, 100.0, 1.0, 9], "1": [10, 100.0, 1.4, 9], "2": [10, 100.0, 3.0, 2], "x": "junk"}
    assert node_pace(ranks, min_samples=5) == Pace(1.4, 9, "1")
    assert node_pace({}, 1) is None
    assert node_pace({"0": [1, 1.0, 0.0, 9]}) is None


def test_watch_round_trips_through_a_list_and_junk_is_fresh() -> None:
    w = Watch(1.0, None, 61.0, 0.34, 1.34, 1.0)
    assert Watch.from_list(w.to_list()) == w
    assert Watch.from_list("junk") == Watch()
    assert Watch.from_list([True, 1, 2, 3, 4, 5]).slow_since is None


def test_rules_are_checked() -> None:
    with pytest.raises(ValueError):
        Rules(slower=0.1, clear=0.2)
    with pytest.raises(ValueError):
        Rules(min_nodes=1)


def test_a_large_job_is_judged_against_all_its_nodes_and_fast() -> None:
    """Beyond EXACT_UP_TO nodes the reference is computed once: a 1,000-node job with two
    slow nodes among noisy peers flags exactly those two."""
    import random

    rng = random.Random(7)
    p = {f"n{i}": Pace(rng.gauss(1.0, 0.02), 9) for i in range(1000)}
    p["n17"], p["n900"] = Pace(1.25, 9), Pace(1.6, 9)
    got = flagged(run([(t, p) for t in range(0, 61, 10)]))
    assert list(got) == ["n17", "n900"]
    assert got["n900"].slower == pytest.approx(0.6, abs=0.02)
