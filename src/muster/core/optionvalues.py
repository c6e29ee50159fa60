"""Option values: Slurm's grammar and messages for the values of job options (counts,
``--nodes``, ``--time``, ``--mem``, ``--gpus``, node lists, ``--signal``, ``--array``).

Each parser takes the text as given and returns the value in the units a JobSpec uses
(seconds, MB), or raises ``OptionValueError`` whose ``str()`` is what Slurm prints after
``<prog>: error:`` and whose ``rc`` is Slurm's exit status for it (255, ``RC_BAD_OPTION``,
for a malformed value; 1 for one Slurm rejects after parsing). Parsers name the option
the way Slurm's message does.

The one home of these rules for every front door: the commands (``slurm.options``) and any
other (a REST submit) read option text through here. Standard library only at import
time (the commands start fast); ``core`` modules are imported where a parser needs them.
"""

from __future__ import annotations

# Exit status Slurm's commands use for a malformed option value (``exit(-1)``).
RC_BAD_OPTION = 255


class OptionValueError(Exception):
    """An option whose value is wrong; ``str()`` is the text after ``<prog>: error: ``."""

    def __init__(self, message: str, rc: int = RC_BAD_OPTION) -> None:
        super().__init__(message)
        self.rc = rc


# Slurm keeps counts in 32-bit signed integers: a larger one is not a number it can hold.
MAX_COUNT = 2**31 - 1


def _count_value(text: str) -> int | None:
    """A whole number from 1 to MAX_COUNT in ASCII digits; None otherwise."""
    digits = text[1:] if text.startswith("+") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 10:
        return None
    n = int(digits)
    return n if 0 < n <= MAX_COUNT else None


def parse_count(value: str, what: str) -> int:
    """Slurm's rule for counts: a whole number above zero (and below 2**31)."""
    n = _count_value(value.strip())
    if n is None:
        raise OptionValueError(f'Invalid numeric value "{value}" for {what}.')
    return n


def parse_nodes(value: str) -> tuple[int, int | None]:
    """``-N``: ``4`` or ``2-4``. A single count is both the minimum and the maximum; an
    empty minimum (``-N-3``, Slurm's reading of it) is one node."""
    lo_text, dash, hi_text = value.strip().partition("-")
    if dash and not lo_text.strip() and hi_text.strip():
        lo_text = "1"
    counts = []
    for part in (lo_text, hi_text) if dash else (lo_text,):
        n = _count_value(part) if not part.startswith("+") else None
        if n is None:
            raise OptionValueError(f'"{value}" is not a valid node count')
        counts.append(n)
    lo = counts[0]
    hi = counts[1] if dash else lo
    if hi < lo:
        raise OptionValueError(f"Maximum node count {hi} is less than minimum node count {lo}")
    return lo, hi


def parse_time_option(value: str, option: str = "--time") -> int | None:
    """A time limit in seconds; None for UNLIMITED and for 0 (Slurm: no limit)."""
    from muster.core.timefmt import MAX_TIME_LIMIT, TimeFormatError, parse_time_limit

    try:
        seconds = parse_time_limit(value)
    except TimeFormatError:
        raise OptionValueError(f"Invalid {option} specification") from None
    if seconds is not None and seconds > MAX_TIME_LIMIT:
        raise OptionValueError("Invalid time limit specification")
    return seconds or None


def parse_mem_option(value: str, option: str) -> int:
    from muster.core.resources import parse_mem_mb

    try:
        return parse_mem_mb(value)
    except ValueError:
        raise OptionValueError(f"Invalid {option} specification") from None


def parse_gpus_option(value: str, option: str) -> tuple[str | None, int]:
    from muster.core.resources import parse_gpus

    try:
        gtype, count = parse_gpus(value)
    except ValueError:
        raise OptionValueError(f"Invalid {option} specification") from None
    if count < 0:
        raise OptionValueError(f"Invalid {option} specification")
    return gtype, count


def parse_hostnames_option(value: str, option: str) -> list[str]:
    """``-w``/``-x``: a hostlist expression, or a file of names when it contains a ``/``."""
    from muster.core.hostlist import HostlistError, expand

    text = value.strip()
    if "/" in text:
        try:
            with open(text) as f:
                text = ",".join(f.read().split())
        except OSError:
            raise OptionValueError(f"Invalid {option} specification: cannot read {value}") from None
    if not text:
        return []
    try:
        names = expand(text)
    except HostlistError as e:
        raise OptionValueError(f"Invalid {option} specification: {e}") from None
    return list(dict.fromkeys(names))


_SIGNAL_NAMES = frozenset(
    "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT "
    "STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split()
)


def parse_signal_name(text: str) -> str | None:
    """A signal as ``USR1``/``SIGUSR1``/``10``: its name without ``SIG``, or its number as
    text; None when it is not a signal."""
    sig = text.strip()
    if sig.isdigit():
        return sig if 0 < int(sig) < 65 else None
    name = sig.upper().removeprefix("SIG")
    return name if name in _SIGNAL_NAMES else None


def parse_signal_option(value: str) -> str:
    """``--signal=[{R|B}:]SIG[@SECONDS]``; returned as written once it is known to be valid."""
    body = value.strip()
    flags, colon, rest = body.partition(":")
    if colon and flags and set(flags.upper()) <= set("RB"):
        body = rest
    sig, at, when = body.partition("@")
    ok = parse_signal_name(sig) is not None
    if at and not (when.isdigit() and int(when) <= 65535):
        ok = False
    if not ok:
        raise OptionValueError("Invalid --signal specification")
    return value.strip()


def parse_mail_type(value: str) -> list[str]:
    """``--mail-type``: Slurm's names, comma-separated (``core.mailtypes``)."""
    from muster.core import mailtypes

    try:
        return mailtypes.parse(value)
    except mailtypes.MailTypeError as e:
        raise OptionValueError(str(e)) from None


def parse_array_option(value: str) -> str:
    """``--array=0-15``, ``1,3,5-7``, ``0-20:2``, ``...%4``; checked here, expanded by the controller."""
    body, pct, limit = value.strip().partition("%")
    ok = bool(body) and (not pct or (limit.isdigit() and 0 < int(limit) < 2**31))  # %0 never runs a task
    for part in body.split(","):
        rng, colon, step = part.partition(":")
        lo, dash, hi = rng.partition("-")
        if (
            not lo.isdigit()
            or (dash and not hi.isdigit())
            or (colon and not (dash and step.isdigit() and int(step) > 0))
        ):
            ok = False
        elif dash and int(hi) < int(lo):
            ok = False
    if not ok:
        raise OptionValueError("Invalid job array specification", rc=1)
    return value.strip()
