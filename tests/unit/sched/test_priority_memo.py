"""The priority memo (issue 40): the terms of the multifactor formula that do not move
with time, kept from pass to pass, give the priorities of the formula computed afresh for
every job, to the bit, while time passes, fair-share usage changes, jobs are updated and
nodes join."""

from __future__ import annotations

import random

import pytest

from muster.core.job import Job
from muster.sched import SchedConfig
from muster.sched.cycle import schedule
from muster.sched.memo import PassMemo
from muster.sched.priority import PriorityMemo, PriorityPolicy
from muster.sched.testing import SchedHarness, job

DAY = 86400.0
USERS = ("alice", "bob", "carol", "dave")
ACCOUNTS = (None, "physics", "vision")


def _config(rng: random.Random) -> SchedConfig:
    return SchedConfig(
        priority_type="priority/multifactor",
        weight_age=rng.choice((0, 1000, 7777)),
        weight_fairshare=rng.choice((0, 10000, 3333)),
        weight_job_size=rng.choice((0, 1000, 12345)),
        weight_partition=rng.choice((0, 1000)),
        weight_qos=rng.choice((0, 500)),
        max_age=rng.choice((0, 3600, 7 * 86400)),
        favor_small=rng.random() < 0.3,
    )


def _queue(rng: random.Random, config: SchedConfig) -> SchedHarness:
    h = SchedHarness(config).gpu_nodes(6, gpus=8).gpu_nodes(2, gpus=0, cpus=128, prefix="cpu")
    h.partition("main", priority_job_factor=rng.choice((1, 3)))
    h.qos_priority.update({"high": 100, "low": 10})
    for who in USERS:
        h.fairshare[who] = rng.random()
        for acct in ACCOUNTS[1:]:
            if rng.random() < 0.5:
                h.fairshare[f"{acct}|{who}"] = rng.random()
    h.fairshare["physics"] = rng.random()
    for _ in range(120):
        b = job().gpus(rng.choice((1, 2, 8))).nodes(rng.choice((1, 1, 2, 5))).cpus(rng.choice((1, 8, 32)))
        b = b.user(rng.choice(USERS), rng.choice(ACCOUNTS)).time("1:00:00").nice(rng.choice((0, 0, 5, -3)))
        if rng.random() < 0.3:
            b = b.qos(rng.choice(("high", "low", "none")))
        if rng.random() < 0.05:
            b = b.held()
        h.submit(b, at=rng.uniform(0, 3 * DAY))
    return h


def _change(rng: random.Random, h: SchedHarness) -> None:
    """What happens between passes: usage moves fair-share, jobs are updated or become
    eligible, a node joins."""
    jobs = list(h.pending.values())
    for _ in range(5):
        j: Job = rng.choice(jobs)
        what = rng.randrange(5)
        if what == 0:
            j.spec.account = rng.choice(ACCOUNTS)  # scontrol update account=
        elif what == 1:
            j.shape.nodes = rng.choice((1, 2, 3))  # scontrol update numnodes=
        elif what == 2:
            j.spec.nice = rng.choice((0, 10))
        elif what == 3:
            j.eligible_time = rng.uniform(0, 4 * DAY)
        else:
            j.spec.qos = rng.choice((None, "high"))
    if rng.random() < 0.5:
        who = rng.choice(USERS)
        h.fairshare[who] = rng.random()  # a usage update
    if rng.random() < 0.2:
        h.gpu_nodes(1, gpus=8, prefix="new")


@pytest.mark.parametrize("seed", range(10))
def test_memo_priorities_are_the_formula_afresh_over_many_passes(seed: int) -> None:
    rng = random.Random(seed)
    config = _config(rng)
    h = _queue(rng, config)
    memo = PriorityMemo()
    now = 3 * DAY
    for _ in range(12):
        snap = h.snapshot()
        policy = PriorityPolicy(snap, now, config)
        parts = [(j.partition,) for j in snap.pending]
        fresh = [policy.priority(j, p) for j, p in zip(snap.pending, parts, strict=True)]
        assert PriorityPolicy(snap, now, config).priorities(snap.pending, parts, memo) == fresh
        _change(rng, h)
        now += rng.choice((1.0, 60.0, 3600.0, DAY))


@pytest.mark.parametrize("seed", range(4))
def test_a_pass_with_a_memo_decides_as_one_without(seed: int) -> None:
    rng = random.Random(100 + seed)
    config = _config(rng)
    h = _queue(rng, config)
    memo = PassMemo()
    now = 3 * DAY
    for _ in range(6):
        snap = h.snapshot()
        with_memo = schedule(snap, now, config, memo=memo)
        afresh = schedule(h.snapshot(), now, config)
        assert with_memo.priorities == afresh.priorities
        assert [s.job_id for s in with_memo.starts] == [s.job_id for s in afresh.starts]
        assert with_memo.plans == afresh.plans
        _change(rng, h)
        now += rng.choice((60.0, 3600.0))
