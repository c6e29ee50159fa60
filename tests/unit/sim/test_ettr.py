"""sim.ettr / sim.ettrcli: one training run's ETTR under a replayed failure mix."""

from __future__ import annotations

import json
import math

import pytest

from muster.sim import ettr
from muster.sim.ettr import LLAMA3_MIX, Category, Profile, Run, default_profiles, simulate
from muster.sim.main import main as sim_main

HANDLES = frozenset({"crash", "node", "hang"})


def _profile(mode: str = "replace", restart: float = 30.0, detect: float = 10.0, **kw: object) -> Profile:
    times = {"crash": detect, "node": detect, "hang": detect, "silent": 500.0}
    return Profile("p", mode, times, kw.pop("handles", HANDLES), restart, **kw)  # type: ignore[arg-type]


def test_llama3_mix_is_the_papers_counts() -> None:
    assert sum(c.count for c in LLAMA3_MIX) == 419
    # the paper's ~78 % hardware: everything but software and unplanned host maintenance
    hw = sum(c.count for c in LLAMA3_MIX if c.hardware and not c.name.startswith("host maintenance"))
    assert round(100 * hw / 419) == 77
    assert Run().total() == 419 and Run(days=27).total() in range(207, 213)


def test_same_seed_same_replay_and_every_profile_sees_the_same_interruptions() -> None:
    run = Run(spares=32)
    a = [simulate(run, p) for p in default_profiles()]
    b = [simulate(run, p) for p in default_profiles()]
    assert [r.describe() for r in a] == [r.describe() for r in b]
    assert len({tuple((i.at, i.category) for i in r.interruptions) for r in a}) == 1
    other = simulate(Run(spares=32, seed=2), default_profiles()[0])
    assert [i.at for i in other.interruptions] != [i.at for i in a[0].interruptions]


def test_no_failure_costs_only_checkpoint_stalls() -> None:
    run = Run(nodes=1, days=1, mix=(Category("x", 0, True, "crash"),), interval=98.0, cost=2.0)
    r = simulate(run, _profile())
    assert r.interruptions == []
    assert r.ettr == pytest.approx(0.98, abs=1e-4)


def test_one_interruption_by_hand() -> None:
    mix = (Category("gpu", 1, True, "crash"),)
    run = Run(nodes=2048, days=54, mix=mix, scale=1.0, interval=100.0, cost=0.0, spares=1)
    r = simulate(run, _profile(restart=30.0, detect=10.0))
    (i,) = r.interruptions
    assert i.automatic and i.down == pytest.approx(40.0)
    assert i.lost == pytest.approx(i.at % 100.0)
    assert r.ettr == pytest.approx((run.horizon - i.lost - 40.0) / run.horizon)
    assert r.productive + r.lost + r.checkpoint + r.down == pytest.approx(run.horizon)


def test_replace_beats_requeue_beats_slurm_defaults_and_meets_the_goal() -> None:
    replace, requeue, slurm = (simulate(Run(spares=32), p) for p in default_profiles())
    assert replace.ettr >= 0.97 and replace.median_down <= 120 and replace.automatic_share >= 0.8
    assert replace.ettr > requeue.ettr > slurm.ettr
    assert slurm.automatic_share < 0.5  # a GPU crash leaves Slurm's node up and the job FAILED


def test_an_empty_pool_waits_for_a_repair_and_is_not_automatic() -> None:
    mix = (Category("gpu", 1, True, "crash"),)
    run = Run(days=54, mix=mix, spares=0, repair=3600.0, interval=100.0, cost=0.0)
    (i,) = simulate(run, _profile(restart=30.0, detect=10.0)).interruptions
    assert not i.automatic and i.down == pytest.approx(10.0 + 3600.0 + 30.0)


def test_software_faults_restart_in_place_without_a_spare() -> None:
    mix = (Category("bug", 3, False, "crash"),)
    r = simulate(Run(days=54, mix=mix, spares=0, interval=100.0, cost=0.0), _profile(inplace=20.0))
    assert r.waited_for_node == 0 and all(i.automatic and i.down == pytest.approx(30.0) for i in r.interruptions)


def test_unhandled_and_silent_faults_wait_for_a_person() -> None:
    mix = (Category("gpu", 1, True, "crash"), Category("sdc", 1, True, "silent"))
    run = Run(days=54, mix=mix, spares=4, interval=100.0, cost=0.0)
    r = simulate(run, _profile(handles=frozenset({"node"}), manual=500.0))
    by = {i.category: i for i in r.interruptions}
    assert by["gpu"].down == pytest.approx(10.0 + 500.0 + 30.0) and not by["gpu"].automatic
    assert by["sdc"].down == pytest.approx(500.0 + 30.0) and not by["sdc"].automatic


def test_pool_sizing_is_monotonic_enough() -> None:
    got = ettr.pool_sizing(Run(), default_profiles()[0], [0, 16, 32])
    assert got[0][1].ettr < got[1][1].ettr <= got[2][1].ettr + 1e-9


def test_young_interval_by_default() -> None:
    run = Run(cost=2.0)
    assert run.checkpoint_interval() == pytest.approx(math.sqrt(2 * run.mtbf() * 2.0))


@pytest.mark.parametrize(
    ("kw", "word"),
    [({"spares": -1}, "spares"), ({"days": 0}, "days"), ({"nodes": 0}, "nodes"), ({"cost": -1}, "cost")],
)
def test_bad_run_is_refused(kw: dict[str, float], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        Run(**kw)  # type: ignore[arg-type]


def test_cli_prints_and_writes_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["ettr", "--days", "5", "--pool-sizing", "0,16", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [r["profile"] for r in doc["results"]] == [p.name for p in default_profiles()]
    assert doc["run"]["interruptions"] == Run(days=5).total()
    assert [e["spares"] for e in doc["pool_sizing"]] == [0, 16]
    assert "ETTR" in err and "faulty GPU" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spares", "-2"], "spares must be at least 0"),
        (["--checkpoint-interval", "0"], "--checkpoint-interval: must be above 0"),
        (["--repair-time", "soon"], "--repair-time: 'soon' is not a duration"),
        (["--pool-sizing", "4,x"], "--pool-sizing: 'x' is not a pool size"),
    ],
)
def test_cli_refuses_bad_values(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["ettr", *argv]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("spares", [0, 6, 40])
def test_the_run_adds_up_for_every_profile(seed: int, spares: int) -> None:
    run = Run(days=10, spares=spares, seed=seed, repair=12 * 3600.0)
    for p in default_profiles():
        r = simulate(run, p)
        assert r.productive + r.lost + r.checkpoint + r.down == pytest.approx(run.horizon)
        assert 0.0 <= r.ettr <= 1.0 and min(r.productive, r.lost, r.checkpoint) >= 0.0
        assert all(i.down >= 0 and i.lost >= 0 for i in r.interruptions)
        assert len(r.interruptions) == run.total()
