"""Replay protection that survives restarts: a nonce cache plus a persisted floor.

A signed message carries its signing time ``ts`` and a random nonce. A receiver accepts it
only when all of these hold:

1. ``ts`` is within ``window`` seconds of the receiver's clock (a stale capture is useless);
2. ``ts >= floor``, where ``floor`` was read from the receiver's state directory when it
   started (the *replay floor*);
3. the nonce is not in the in-memory cache of nonces accepted since the receiver started.

Before it accepts a message whose ``ts`` reaches the persisted ``limit``, the receiver
writes a new limit ``ts + step`` to its state file (atomically, fsync'ed) and only then
accepts. Hence **every message an incarnation accepted has ``ts < limit``**, and the limit
on disk is never behind. The next incarnation reads that limit as its floor (rule 2), so
it refuses every message the previous ones could have accepted, whatever the clocks did;
within one incarnation rule 3 refuses a second delivery. Together: a captured message is
accepted at most once, ever, by this receiver (other receivers refuse it because messages
are bound to their receiver, see ``signing``).

The cost is one small write every ``step`` seconds at most, and a gap of at most ``step``
seconds after a restart during which honest senders' messages, signed before the floor,
are refused with a ``StaleMessage`` that names the floor: the senders re-sign at the floor
(``httpd.SignedClient`` does so once) and are accepted.

The floor at start is never below the receiver's own clock at start: messages signed
before it are refused, also when the state file is missing, unreadable, or could not be
written lately (a full or read-only disk: then messages are still accepted, once each,
and the failure is logged, so that a full disk never cuts the daemons off from each other).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

MAX_SKEW = 300.0  # seconds a signature stays valid; nonces are remembered this long
FLOOR_STEP = 2.0  # how far ahead of the newest accepted message the persisted limit runs

__all__ = ["FLOOR_STEP", "MAX_SKEW", "ReplayGuard", "SignatureError", "StaleMessage"]


class SignatureError(Exception):
    """A message that must not be accepted; ``str()`` says why."""


class StaleMessage(SignatureError):
    """Signed before this receiver's replay floor (``floor``): possibly a replay."""

    def __init__(self, message: str, floor: float) -> None:
        super().__init__(message)
        self.floor = floor


class ReplayGuard:
    """Refuses messages outside the time window, before the floor, or seen before.

    ``path`` (optional) is the file holding the persisted limit; without it the guard
    protects one incarnation only (tests, tools). ``now`` is the receiver's clock at
    start, the floor when ``path`` does not exist yet.
    """

    def __init__(
        self,
        window: float = MAX_SKEW,
        path: str | None = None,
        now: float | None = None,
        step: float = FLOOR_STEP,
    ) -> None:
        self.window = window
        self.path = path
        self.step = step
        self._seen: dict[str, float] = {}
        self.floor = 0.0
        if path is not None:
            # Never below the receiver's own clock at start: a message signed before this
            # incarnation began is refused even if the last limit could not be written (a
            # full or read-only disk); the stored limit covers a clock set back meanwhile.
            stored = _read_floor(path)
            self.floor = max(stored if stored is not None else 0.0, float(now or 0.0))
        self.limit = self.floor
        self._write_failed_at: float | None = None

    def check(self, nonce: str, ts: float, now: float) -> None:
        """Accept (and remember) a message, or raise ``SignatureError`` saying why not."""
        if abs(now - ts) > self.window:
            raise SignatureError("message timestamp outside the allowed window (check clocks)")
        if ts < self.floor:
            raise StaleMessage(f"message signed before this daemon's replay floor {self.floor:.3f}", self.floor)
        if len(self._seen) > 10_000:
            cutoff = now - 2 * self.window
            self._seen = {n: t for n, t in self._seen.items() if t >= cutoff}
        if nonce in self._seen:
            raise SignatureError("replayed message")
        self.advance(ts)
        self._seen[nonce] = now

    def admit(self, ts: float) -> None:
        """For messages whose single use is enforced elsewhere (step grants): refuse one
        issued before the floor, and raise the persisted limit past it."""
        if ts < self.floor:
            raise StaleMessage(f"credential issued before this daemon's replay floor {self.floor:.3f}", self.floor)
        self.advance(ts)

    def advance(self, ts: float) -> None:
        """Make sure the persisted limit is above ``ts`` before ``ts`` is accepted."""
        if self.path is None or ts < self.limit:
            return
        new = ts + self.step
        try:
            _write_floor(self.path, new)
        except OSError as e:
            # A full or read-only disk must not cut the daemons off from each other (a
            # controller that refused every heartbeat would soon call every node dead).
            # The message is new to this incarnation (the nonce cache), and a restart
            # starts the floor at its own clock; so it is accepted, and said so.
            if self._write_failed_at is None or ts - self._write_failed_at > 60:
                log.error(
                    "cannot record the replay floor in %s (%s); relying on the clock at the next start",
                    self.path,
                    e.strerror or e,
                )
                self._write_failed_at = ts
            return
        self.limit = new


def _read_floor(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    try:
        return float(text)
    except ValueError:  # cannot happen with atomic writes; treated as missing
        return None


def _write_floor(path: str, value: float) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{value:.3f}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
