"""Advance reservations: held nodes, windows, repeating windows, who may use them."""

from __future__ import annotations

from muster.core.states import Reason
from muster.sched.reservations import windows
from muster.sched.snapshot import ReservationView
from muster.sched.testing import SchedHarness, job

HOUR, DAY = 3600, 86400


def with_reservation(start: float, end: float, **kw: object) -> SchedHarness:
    h = SchedHarness().gpu_nodes(4, gpus=8)
    h.reserve(ReservationView("team", start, end, ("gpu3", "gpu4"), **kw))  # type: ignore[arg-type]
    return h


def test_a_job_in_a_reservation_runs_only_on_its_nodes() -> None:
    h = with_reservation(0, DAY, users=("alice",))
    j = h.submit(job().user("alice").reservation("team").nodes(2).gpus(8).time("1:00:00"))
    d = h.schedule(at=10)
    assert sorted(a.node for a in d.starts[0].alloc) == ["gpu3", "gpu4"]
    assert h.started(d) == [j]


def test_a_job_waits_with_reason_reservation_until_its_window_opens() -> None:
    h = with_reservation(HOUR, DAY, users=("alice",))
    j = h.submit(job().user("alice").reservation("team").gpus(8).time("1:00:00"))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.RESERVATION
    assert d.plans[j].start_time == HOUR
    assert h.started(h.schedule(at=HOUR)) == [j]


def test_a_job_in_a_reservation_must_end_before_the_window_ends() -> None:
    h = with_reservation(0, HOUR, users=("alice",))
    j = h.submit(job().user("alice").reservation("team").gpus(8).time("2:00:00"))
    d = h.schedule(at=0)
    assert j not in h.started(d) and j not in d.plans


def test_other_jobs_may_use_reserved_nodes_only_if_they_end_before_the_window() -> None:
    h = with_reservation(HOUR, DAY, users=("alice",))
    h.run_job(job().nodes(2).gpus(8).time("1:00:00"))  # takes gpu1, gpu2
    fits = h.submit(job().gpus(8).time("59:00"), at=1)
    too_long = h.submit(job().gpus(8).time("1:00:01"), at=2)
    d = h.schedule(at=60)
    assert h.started(d) == [fits]
    assert d.starts[0].alloc[0].node in ("gpu3", "gpu4")
    assert too_long not in h.started(d)
    # gpu1/gpu2 free up at 1 h; the reserved nodes stay off limits for the day
    assert d.plans[too_long].start_time == HOUR
    assert d.plans[too_long].nodes[0] in ("gpu1", "gpu2")


def test_a_job_without_a_time_limit_never_lands_on_nodes_reserved_later() -> None:
    h = with_reservation(DAY, 2 * DAY, users=("alice",))
    jobs = [h.submit(job().gpus(8), at=i) for i in range(4)]
    d = h.schedule(at=10)
    placed = sorted(a.node for s in d.starts for a in s.alloc)
    assert placed == ["gpu1", "gpu2"]
    assert set(h.started(d)) == set(jobs[:2])


def test_maint_reservations_block_like_any_other_with_req_node_not_avail() -> None:
    h = with_reservation(0, HOUR, flags=("MAINT", "IGNORE_JOBS"))
    j = h.submit(job().nodes(3).gpus(8).time("10:00"))
    d = h.schedule(at=0)
    assert j not in h.started(d)
    assert d.plans[j].start_time == HOUR
    assert d.reasons[j] is Reason.REQ_NODE_NOT_AVAIL


def test_a_job_kept_out_by_an_ordinary_reservation_waits_for_resources() -> None:
    h = with_reservation(0, HOUR, users=("alice",))
    j = h.submit(job().nodes(3).gpus(8).time("10:00"))
    assert h.schedule(at=0).reasons[j] is Reason.RESOURCES


def test_a_user_not_in_the_reservation_cannot_use_it() -> None:
    h = with_reservation(0, DAY, users=("alice",))
    j = h.submit(job().user("mallory").reservation("team"))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.RESERVATION
    assert j not in h.started(d)


def test_an_account_in_the_reservation_may_use_it() -> None:
    h = with_reservation(0, DAY, accounts=("physics",))
    j = h.submit(job().user("bob", "physics").reservation("team").time("1:00:00"))
    assert h.started(h.schedule(at=0)) == [j]


def test_a_missing_reservation_can_never_be_used() -> None:
    h = SchedHarness().gpu_nodes(1)
    j = h.submit(job().reservation("gone"))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.RESERVATION and j in d.never


def test_daily_windows_repeat_every_day() -> None:
    r = ReservationView("nightly", 22 * HOUR, 24 * HOUR, ("n1",), flags=("DAILY",))
    assert windows(r, 0, 3 * DAY) == [
        (22 * HOUR, 24 * HOUR),
        (DAY + 22 * HOUR, 2 * DAY),
        (2 * DAY + 22 * HOUR, 3 * DAY),
    ]
    # from the middle of day 5 on: the first window still open is day 5's
    assert windows(r, 5 * DAY + 23 * HOUR, 6 * DAY)[0] == (5 * DAY + 22 * HOUR, 6 * DAY)


def test_weekly_windows_repeat_every_week_and_one_off_windows_expire() -> None:
    r = ReservationView("weekly", 0, HOUR, ("n1",), flags=("WEEKLY",))
    assert windows(r, 0, 15 * DAY) == [
        (0, HOUR),
        (7 * DAY, 7 * DAY + HOUR),
        (14 * DAY, 14 * DAY + HOUR),
    ]
    once = ReservationView("once", 0, HOUR, ("n1",))
    assert windows(once, 2 * HOUR, DAY) == []


def test_a_daily_reservation_keeps_long_jobs_off_its_nodes_every_day() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    h.reserve(ReservationView("nightly", 22 * HOUR, 24 * HOUR, ("gpu1",), flags=("DAILY",)))
    short = h.submit(job().gpus(8).time("2:00:00"))
    d = h.schedule(at=DAY + 10 * HOUR)  # day 2, 10:00: free until 22:00
    assert h.started(d) == [short]
    h.finish(short)
    long = h.submit(job().gpus(8).time("23:00:00"), at=DAY + 12 * HOUR)
    d = h.schedule(at=DAY + 12 * HOUR)
    assert long not in h.started(d)
    assert long not in d.plans  # 23 h never fits between two nightly windows
