"""Signal names and ``--signal=[{R|B}:]SIG[@TIME]``, as the agent and the controller read them.

* ``parse_signal("USR1")``, ``"SIGUSR1"``, ``"10"`` or ``10`` -> 10; ValueError otherwise.
* ``parse_signal_spec("B:USR1@30")`` -> ``SignalSpec(10, 30, batch_only=True)``; TIME
  defaults to 60 s as in Slurm. ``B`` sends the warning to the batch shell only; without it
  the warning goes to the job's tasks (the batch shell's other processes, and its steps).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

__all__ = ["DEFAULT_WARN_SECONDS", "SignalSpec", "parse_signal", "parse_signal_spec"]

DEFAULT_WARN_SECONDS = 60


@dataclass(frozen=True, slots=True)
class SignalSpec:
    signal: int
    seconds: int = DEFAULT_WARN_SECONDS
    batch_only: bool = False


def parse_signal(text: str | int) -> int:
    """``USR1``, ``SIGUSR1``, ``10`` -> 10. Raises ValueError on anything else."""
    if isinstance(text, int):
        number = text
    else:
        t = text.strip().upper()
        if t.isdigit():
            number = int(t)
        else:
            name = t if t.startswith("SIG") else f"SIG{t}"
            try:
                number = int(signal.Signals[name])
            except KeyError:
                raise ValueError(f"invalid signal {text!r}") from None
    if not 0 < number < signal.NSIG:
        raise ValueError(f"invalid signal {text!r}")
    return number


def parse_signal_spec(text: str | None) -> SignalSpec | None:
    if not text:
        return None
    flags, sep, rest = text.partition(":")
    if not sep:
        flags, rest = "", text
    if flags and set(flags.upper()) - {"B", "R"}:
        raise ValueError(f"invalid --signal specification {text!r}")
    name, at, secs = rest.partition("@")
    seconds = DEFAULT_WARN_SECONDS
    if at:
        if not secs.strip().isdigit():
            raise ValueError(f"invalid --signal specification {text!r}")
        seconds = int(secs)
    return SignalSpec(parse_signal(name), seconds, "B" in flags.upper())
