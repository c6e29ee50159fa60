"""The controllers' election (ctld.lease) on a fake database with a manual clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from muster.core.clock import ManualClock
from muster.ctld.lease import (
    Elector,
    Lease,
    Verdict,
    active_verdict,
    poll_every,
    renew_every,
    standby_verdict,
)

TIMEOUT = 10.0


class FakeDb:
    """The lock and the row, as PostgreSQL keeps them, shared by the fake sessions."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.lock_owner: int | None = None
        self.row = Lease()
        self.next_pid = 100
        self.alive: set[int] = set()

    def session(self) -> int:
        self.next_pid += 1
        self.alive.add(self.next_pid)
        return self.next_pid

    def end(self, pid: int) -> None:
        """A session ends (its process was killed, or it was terminated): its lock frees."""
        self.alive.discard(pid)
        if self.lock_owner == pid:
            self.lock_owner = None


class FakeBackend:
    def __init__(self, db: FakeDb) -> None:
        self.db = db
        self.pid = db.session()

    def _check(self) -> None:
        if self.pid not in self.db.alive:
            raise ConnectionError("server closed the connection")

    def try_lock(self) -> bool:
        self._check()
        if self.db.lock_owner in (None, self.pid):
            self.db.lock_owner = self.pid
            return True
        return False

    def unlock(self) -> None:
        if self.db.lock_owner == self.pid:
            self.db.lock_owner = None

    def read(self) -> tuple[Lease, float]:
        self._check()
        return self.db.row, self.db.clock.now()

    def take(self, me: str, timeout: float) -> int:
        row = self.db.row
        self.db.row = replace(
            row,
            holder=me,
            epoch=row.epoch + 1,
            expires=self.db.clock.now() + timeout,
            lock_pid=self.pid,
            store_pid=0,
            takeover="" if row.takeover == me else row.takeover,
        )
        return self.db.row.epoch

    def renew(self, me: str, epoch: int, timeout: float) -> tuple[Lease | None, float]:
        self._check()
        row = self.db.row
        if row.epoch != epoch or row.holder != me:
            return None, self.db.clock.now()
        self.db.row = replace(row, expires=self.db.clock.now() + timeout)
        return self.db.row, self.db.clock.now()

    def note_store(self, epoch: int, pid: int) -> None:
        if self.db.row.epoch == epoch:
            self.db.row = replace(self.db.row, store_pid=pid)

    def terminate(self, pids: list[int]) -> None:
        for pid in pids:
            if pid != self.pid:
                self.db.end(pid)

    def ask_takeover(self, me: str) -> None:
        self.db.row = replace(self.db.row, takeover=me, takeover_at=self.db.clock.now())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def db(clock: ManualClock) -> FakeDb:
    return FakeDb(clock)


def pair(db: FakeDb) -> tuple[Elector, Elector]:
    return Elector(FakeBackend(db), "head1#0", TIMEOUT), Elector(FakeBackend(db), "head2#1", TIMEOUT)


def test_the_first_to_try_becomes_active_and_the_other_waits(db: FakeDb) -> None:
    primary, backup = pair(db)
    assert primary.poll() is Verdict.TAKE and primary.active and primary.epoch == 1
    assert backup.poll() is Verdict.WAIT and not backup.active
    assert db.row.holder == "head1#0"


def test_a_killed_active_controller_is_replaced_at_the_next_poll_with_a_new_epoch(db: FakeDb) -> None:
    primary, backup = pair(db)
    primary.poll()
    db.end(primary.backend.pid)  # type: ignore[attr-defined]  # kill -9: its session ends
    assert backup.poll() is Verdict.TAKE
    assert backup.epoch == 2 and db.row.holder == "head2#1"


def test_the_deposed_controller_learns_it_at_its_next_renewal(db: FakeDb, clock: ManualClock) -> None:
    primary, backup = pair(db)
    primary.poll()
    db.end(primary.backend.pid)  # type: ignore[attr-defined]  # its lock session alone was lost
    backup.poll()
    assert primary.renew() is Verdict.DEPOSED and not primary.active


def test_a_hung_controller_keeps_its_lock_until_its_lease_expires_then_is_ended(db: FakeDb, clock: ManualClock) -> None:
    primary, backup = pair(db)
    primary.poll()
    primary.backend.note_store(1, db.session())
    store_pid = db.row.store_pid
    clock.advance(TIMEOUT - 1)
    assert backup.poll() is Verdict.WAIT  # silent, but not yet for SlurmctldTimeout
    clock.advance(2)
    assert backup.poll() is Verdict.TERMINATE  # its sessions are ended ...
    assert store_pid not in db.alive and db.lock_owner is None
    assert backup.poll() is Verdict.TAKE  # ... and the lock is free at the next poll
    assert backup.epoch == 2


def test_renewals_keep_the_lease_past_the_timeout(db: FakeDb, clock: ManualClock) -> None:
    primary, backup = pair(db)
    primary.poll()
    for _ in range(10):
        clock.advance(renew_every(TIMEOUT))
        assert primary.renew() is Verdict.KEEP
        assert backup.poll() is Verdict.WAIT


def test_takeover_hands_over_and_the_old_active_does_not_take_it_back(db: FakeDb, clock: ManualClock) -> None:
    primary, backup = pair(db)
    primary.poll()
    backup.backend.ask_takeover(backup.me)
    assert primary.renew() is Verdict.HAND_OVER and not primary.active
    assert primary.poll() is not Verdict.TAKE  # the request is for the backup
    assert backup.poll() is Verdict.TAKE
    assert db.row.takeover == ""  # answered
    assert primary.poll() is Verdict.WAIT


def test_a_stale_takeover_request_is_not_waited_for(db: FakeDb, clock: ManualClock) -> None:
    primary, backup = pair(db)
    backup.backend.ask_takeover(backup.me)
    clock.advance(TIMEOUT + 1)
    assert primary.poll() is Verdict.TAKE


def test_a_lost_database_while_active_steps_down() -> None:
    clock = ManualClock()
    db = FakeDb(clock)
    primary, _ = pair(db)
    primary.poll()
    db.alive.clear()
    assert primary.renew() is Verdict.DEPOSED and not primary.active


@pytest.mark.parametrize(
    ("lease", "got", "now", "verdict"),
    [
        (Lease(), True, 0.0, Verdict.TAKE),
        (Lease(holder="a", expires=50.0), False, 40.0, Verdict.WAIT),
        (Lease(holder="a", expires=50.0), False, 51.0, Verdict.TERMINATE),
        (Lease(holder="me", expires=50.0), False, 51.0, Verdict.WAIT),
        (Lease(takeover="c", takeover_at=45.0), True, 50.0, Verdict.YIELD),
        (Lease(takeover="me", takeover_at=45.0), True, 50.0, Verdict.TAKE),
    ],
)
def test_standby_verdicts(lease: Lease, got: bool, now: float, verdict: Verdict) -> None:
    assert standby_verdict(lease, "me", got, now, TIMEOUT) is verdict


def test_active_verdicts() -> None:
    mine = Lease(holder="me", epoch=3, expires=100.0)
    assert active_verdict(mine, "me", 3, 90.0, TIMEOUT) is Verdict.KEEP
    assert active_verdict(mine, "me", 2, 90.0, TIMEOUT) is Verdict.DEPOSED
    assert active_verdict(None, "me", 3, 90.0, TIMEOUT) is Verdict.DEPOSED
    assert active_verdict(replace(mine, takeover="b", takeover_at=85.0), "me", 3, 90.0, TIMEOUT) is Verdict.HAND_OVER


def test_intervals_fit_inside_the_timeout() -> None:
    for timeout in (1.0, 5.0, 120.0):
        assert renew_every(timeout) < timeout and poll_every(timeout) < timeout


def test_a_poll_that_fails_after_taking_the_lock_forgets_it(db: FakeDb) -> None:
    """The session may be gone with the lock: the next poll must take the lock again, not
    bump the epoch on a new session that holds nothing."""
    primary, backup = pair(db)
    backend = primary.backend
    real_read = backend.read

    def read_fails() -> tuple[Lease, float]:
        db.end(backend.pid)  # type: ignore[attr-defined]  # the session dies mid-poll ...
        backend.pid = db.session()  # type: ignore[attr-defined]  # ... the next call opens one
        raise ConnectionError("server closed the connection")

    backend.read = read_fails  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        primary.poll()
    backend.read = real_read  # type: ignore[method-assign]
    assert backup.poll() is Verdict.TAKE  # the lock was free: the backup has it
    assert primary.poll() is not Verdict.TAKE and not primary.active
