"""When a requeued job may start again: ``SchedulerParameters=requeue_delay=N`` (Slurm
25.11's key, seconds), else ``AuthInfo=cred_expire=N`` (what sets the delay in Slurm 22.05,
which has no ``requeue_delay``), else 120 seconds (both releases' default); and whether
``--requeue=expedite`` is honoured (``SlurmctldParameters=enable_expedited_requeue``).

Pure (the parameter lists read by ``core.confkeys.split_params``): the controller (``ctld.state``) and ``scontrol show config``
(``cli.showconfig``) read the same values.
"""

from __future__ import annotations

from muster.core.confkeys import split_params

__all__ = ["DEFAULT_DELAY", "expedited_requeue_enabled", "requeue_delay", "stated"]

DEFAULT_DELAY = 120
_MOST = 365 * 86400


def _items(raw: str | None) -> dict[str, str]:
    """The parameter list by key, keys in lower case."""
    return {key.lower(): value for key, value in split_params(raw).items()}


def _seconds(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw} is not an integer") from None
    if not 0 <= value <= _MOST:
        raise ValueError(f"{name}={raw} is out of range (0-{_MOST})")
    return value


def stated(scheduler_parameters: str | None) -> bool:
    """Whether ``SchedulerParameters`` names ``requeue_delay``."""
    return "requeue_delay" in _items(scheduler_parameters)


def requeue_delay(scheduler_parameters: str | None, auth_info: str | None = None) -> int:
    """Seconds a requeued job (not an expedited one) waits before it is eligible again.
    Raises ``ValueError`` naming the bad value."""
    sched = _items(scheduler_parameters)
    if "requeue_delay" in sched:
        return _seconds("SchedulerParameters: requeue_delay", sched["requeue_delay"])
    auth = _items(auth_info)
    if "cred_expire" in auth:
        return _seconds("AuthInfo: cred_expire", auth["cred_expire"])
    return DEFAULT_DELAY


def expedited_requeue_enabled(slurmctld_parameters: str | None) -> bool:
    """``SlurmctldParameters=enable_expedited_requeue``: without it a job's own
    ``--requeue=expedite`` is an ordinary requeue (Slurm 25.11's sbatch(1))."""
    return "enable_expedited_requeue" in _items(slurmctld_parameters)
