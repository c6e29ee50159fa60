"""How the daemons answer signals, as Slurm's daemons do (docs/operations.md, "Signals").

=========  ==========================================================================
SIGHUP     reconfigure: the daemon reads its configuration file again and applies it
           (musterctld: as ``scontrol reconfigure``; musterd: its Prolog, Epilog and
           health check; musterrestd: how it reaches the controller). A refused file is
           logged and the running configuration kept; the daemon stays up.
SIGUSR2    reopen the log file (``--log-file``) by name: logrotate moved it away.
SIGTERM,   a clean stop, within seconds: the listeners close, requests in flight get
SIGINT     ``STOP_GRACE`` seconds to finish and are then cut, the daemon's own stop runs.
=========  ==========================================================================

``early(daemon)`` is called first thing in a daemon's ``main``: from then on SIGHUP and
SIGUSR2 never kill it (their default action), even while it loads its state;
``install(loop, ...)`` puts the handlers above on the running event loop, where they
run between requests (no half-applied configuration); ``quiet(server)`` makes a uvicorn
server leave the signals to this module and stop within ``STOP_GRACE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

from muster.protocol.logjson import reopen_logs

__all__ = ["STOP_GRACE", "early", "install", "quiet", "reopen"]

STOP_GRACE = 1  # seconds a request in flight has to finish once a stop is asked (uvicorn takes an int)


def reopen(daemon: str) -> None:
    """SIGUSR2: reopen the log files; a failure is logged to the file still open."""
    log = logging.getLogger(daemon)
    try:
        paths = reopen_logs()
    except OSError as exc:
        log.error("SIGUSR2: cannot reopen the log file: %s: %s", exc.filename, exc.strerror)
        return
    if paths:
        log.info("SIGUSR2: log file %s reopened", ", ".join(paths))
    else:
        log.info("SIGUSR2: no log file to reopen (logging to stderr)")


def early(daemon: str) -> None:
    """Before the event loop runs: SIGHUP is logged and ignored (nothing to reconfigure
    yet: the file is being read), SIGUSR2 reopens the log files."""
    log = logging.getLogger(daemon)
    signal.signal(signal.SIGHUP, lambda *_: log.info("SIGHUP while starting: the configuration is being read"))
    signal.signal(signal.SIGUSR2, lambda *_: reopen(daemon))


def install(
    loop: asyncio.AbstractEventLoop,
    daemon: str,
    *,
    reconfigure: Callable[[], None],
    stop: Callable[[], None],
    terminate: bool = True,
) -> None:
    """The handlers on ``loop``; ``terminate=False`` leaves SIGTERM and SIGINT as they are
    (a daemon that wires them itself)."""
    log = logging.getLogger(daemon)

    def hup() -> None:
        log.info("SIGHUP: reconfiguring")
        try:
            reconfigure()
        except Exception:  # the daemon stays up whatever the file says
            log.exception("SIGHUP: reconfigure failed; the running configuration is kept")

    def term(sig: signal.Signals) -> None:
        log.info("%s: stopping", sig.name)
        stop()

    loop.add_signal_handler(signal.SIGHUP, hup)
    loop.add_signal_handler(signal.SIGUSR2, reopen, daemon)
    if terminate:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, term, sig)


@contextlib.contextmanager
def _no_capture() -> Iterator[None]:
    yield


def quiet(server: Any, grace: float = STOP_GRACE) -> Any:
    """``server`` (a ``uvicorn.Server``) neither takes SIGTERM/SIGINT for itself (this
    module's handlers set its ``should_exit``) nor waits more than ``grace`` seconds for
    requests in flight once stopping: a kept-alive idle connection is closed at once, a
    request still running (a client that sent half a body, a long poll) is cut."""
    server.capture_signals = _no_capture
    server.config.timeout_graceful_shutdown = grace
    return server
