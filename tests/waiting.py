"""Waiting on conditions in tests: ``wait_for``, the one poll loop (never a fixed sleep).

Standard library only, so unit tests import it too (``harness`` re-exports it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Call ``predicate`` until it returns something true, and return that; tests wait on
    conditions this way, never with a fixed sleep (tests/unit/test_architecture.py checks).

    Past ``timeout`` seconds: AssertionError saying what was awaited and the last value seen.
    An exception from ``predicate`` propagates (a broken check is not a slow condition).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r})")
        time.sleep(interval)  # sleep: wait_for's own poll interval


async def wait_until(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """``wait_for`` inside a running event loop: polls ``predicate`` between the loop's
    other work (``await asyncio.sleep``), with the same deadline and message."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r})")
        await asyncio.sleep(interval)  # sleep: wait_until's own poll interval
