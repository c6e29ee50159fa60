"""Which controller is active: an election on the shared PostgreSQL store, no consensus of our own.

Two facts decide it, both kept by PostgreSQL:

* a session advisory lock, held by the active controller on a connection of its own: when
  that process dies its session ends and the lock frees at once;
* a lease row ``(holder, epoch, expires, lock_pid, store_pid, takeover, takeover_at)``,
  renewed by the active controller every ``renew_every`` seconds. Its ``expires`` tells a
  standby that an active controller still holding the lock has stopped working (stopped,
  hung, cut off from its clients but not from the database): past ``SlurmctldTimeout`` of
  silence the standby ends that controller's database sessions, which frees the lock.

Whoever takes the lock bumps ``epoch``. Every transaction of the store checks the epoch it
was elected with (``PgStore.fence``): a deposed controller can commit nothing more, so no
acknowledged change is lost to it and none is made twice.

This module holds the rules (pure functions of the row and the database's clock, tested with
a fake backend) and ``Elector``, which applies them through a ``LeaseBackend``
(``ctld.lease_pg`` is the PostgreSQL one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

STANDBY_MESSAGE = "Slurm backup controller in standby mode"


@dataclass(frozen=True, slots=True)
class Lease:
    """The lease row as read, with the database's clock at the time (``now``)."""

    holder: str = ""
    epoch: int = 0
    expires: float = 0.0
    lock_pid: int = 0
    store_pid: int = 0
    takeover: str = ""
    takeover_at: float = 0.0


class Verdict(StrEnum):
    WAIT = "wait"  # a standby stays one
    TAKE = "take"  # a standby becomes active (it holds the lock)
    YIELD = "yield"  # a standby got the lock but another was asked to take over: let go
    TERMINATE = "terminate"  # the active controller holds the lock but renews no more
    KEEP = "keep"  # the active controller stays active
    DEPOSED = "deposed"  # someone else took over: stop at once
    HAND_OVER = "hand_over"  # scontrol takeover asked a backup to take over: step down


def takeover_pending(lease: Lease, me: str, now: float, timeout: float) -> bool:
    """Another controller was asked to take over, recently enough to be waited for."""
    return bool(lease.takeover) and lease.takeover != me and now - lease.takeover_at < timeout


def standby_verdict(lease: Lease, me: str, got_lock: bool, now: float, timeout: float) -> Verdict:
    """What a standby does after trying the lock once."""
    if takeover_pending(lease, me, now, timeout):
        return Verdict.YIELD if got_lock else Verdict.WAIT
    if got_lock:
        return Verdict.TAKE
    if lease.holder and lease.holder != me and now > lease.expires:
        return Verdict.TERMINATE
    return Verdict.WAIT


def active_verdict(lease: Lease | None, me: str, epoch: int, now: float, timeout: float) -> Verdict:
    """What the active controller does after renewing (``lease`` None: the renewal matched
    no row of its epoch, so someone else holds the lease now)."""
    if lease is None or lease.epoch != epoch or lease.holder != me:
        return Verdict.DEPOSED
    if takeover_pending(lease, me, now, timeout):
        return Verdict.HAND_OVER
    return Verdict.KEEP


def renew_every(timeout: float) -> float:
    """How often the active controller renews: several times per lease."""
    return max(0.2, min(timeout / 4.0, 5.0))


def poll_every(timeout: float) -> float:
    """How often a standby tries the lock: a killed controller is replaced this fast."""
    return max(0.1, min(timeout / 8.0, 1.0))


class LeaseBackend(Protocol):
    """Where the lock and the row live (``ctld.lease_pg.PgLease``; a fake in tests)."""

    def try_lock(self) -> bool: ...

    def unlock(self) -> None: ...

    def read(self) -> tuple[Lease, float]: ...

    def take(self, me: str, timeout: float) -> int: ...

    def renew(self, me: str, epoch: int, timeout: float) -> tuple[Lease | None, float]: ...

    def note_store(self, epoch: int, pid: int) -> None: ...

    def terminate(self, pids: list[int]) -> None: ...

    def ask_takeover(self, me: str) -> None: ...


class Elector:
    """One controller's side of the election: ``poll`` while standby, ``renew`` while active.

    Both return the verdict they acted on; the caller (``ctld.standby``) starts serving on
    ``TAKE`` and stops on ``DEPOSED`` or ``HAND_OVER``. A backend error while active is
    ``DEPOSED`` too: the lock's session may be gone, and the fence refuses commits anyway.
    """

    def __init__(self, backend: LeaseBackend, me: str, timeout: float) -> None:
        self.backend = backend
        self.me = me
        self.timeout = timeout
        self.epoch = 0
        self.active = False
        self._locked = False

    def poll(self) -> Verdict:
        try:
            return self._poll()
        except Exception:
            self._locked = False  # a failed call may have cost the session, and the lock with it
            raise

    def _poll(self) -> Verdict:
        got = self._locked or self.backend.try_lock()
        self._locked = got
        lease, now = self.backend.read()
        verdict = standby_verdict(lease, self.me, got, now, self.timeout)
        if verdict is Verdict.YIELD:
            self.backend.unlock()
            self._locked = False
        elif verdict is Verdict.TERMINATE:
            self.backend.terminate([p for p in (lease.lock_pid, lease.store_pid) if p])
        elif verdict is Verdict.TAKE:
            # The previous holder's store session, should it linger (a hung process), must
            # not hold the row the epoch bump needs, nor commit after it.
            if lease.store_pid:
                self.backend.terminate([lease.store_pid])
            self.epoch = self.backend.take(self.me, self.timeout)
            self.active = True
        return verdict

    def renew(self) -> Verdict:
        try:
            lease, now = self.backend.renew(self.me, self.epoch, self.timeout)
        except Exception:
            lease, now = None, 0.0
        verdict = active_verdict(lease, self.me, self.epoch, now, self.timeout)
        if verdict is not Verdict.KEEP:
            self.step_down()
        return verdict

    def step_down(self) -> None:
        self.active = False
        if self._locked:
            try:
                self.backend.unlock()
            except Exception:  # noqa: S110 - the session may be gone, and the lock with it
                pass
        self._locked = False
