"""``--mail-type``: the events a job's owner asked to be mailed about, with Slurm's names.

``parse`` reads the option's text (``BEGIN,END``, ``ALL``, ``NONE``) into the list a
``JobSpec`` keeps (canonical names, ``ALL`` expanded, in this module's order); ``check``
validates a list that came through the API. Pure and standard library only: the commands
read their options through here (``core.optionvalues``).
"""

from __future__ import annotations

# Slurm's mail types, in the order a parsed list keeps them.
BEGIN = "BEGIN"
END = "END"
FAIL = "FAIL"
REQUEUE = "REQUEUE"
INVALID_DEPEND = "INVALID_DEPEND"
STAGE_OUT = "STAGE_OUT"
TIME_LIMIT = "TIME_LIMIT"
TIME_LIMIT_90 = "TIME_LIMIT_90"
TIME_LIMIT_80 = "TIME_LIMIT_80"
TIME_LIMIT_50 = "TIME_LIMIT_50"
ARRAY_TASKS = "ARRAY_TASKS"

TYPES = (
    BEGIN,
    END,
    FAIL,
    REQUEUE,
    INVALID_DEPEND,
    STAGE_OUT,
    TIME_LIMIT,
    TIME_LIMIT_90,
    TIME_LIMIT_80,
    TIME_LIMIT_50,
    ARRAY_TASKS,
)
# ``ALL``: as Slurm 22.05 defines it (the time-limit warnings and ARRAY_TASKS are not in it).
ALL = (BEGIN, END, FAIL, INVALID_DEPEND, REQUEUE, STAGE_OUT)
# The warnings before the time limit: mail type -> the share of the limit that fires it.
TIME_SHARES = {TIME_LIMIT_50: 0.5, TIME_LIMIT_80: 0.8, TIME_LIMIT_90: 0.9}


class MailTypeError(ValueError):
    """A mail type Slurm does not know; ``str()`` names it as sbatch's error does."""


def parse(text: str) -> list[str]:
    """``--mail-type`` text -> the canonical list (``NONE``: empty). Case-insensitive, as
    Slurm reads it; an unknown word raises ``MailTypeError``."""
    chosen: set[str] = set()
    words = [w.strip().upper() for w in text.split(",")]
    if not any(words):
        raise MailTypeError(f"--mail-type={text} invalid")
    for word in words:
        if word == "NONE":
            chosen.clear()
        elif word == "ALL":
            chosen.update(ALL)
        elif word in TYPES:
            chosen.add(word)
        else:
            raise MailTypeError(f"--mail-type={text} invalid")
    return [t for t in TYPES if t in chosen]


def check_user(text: str) -> str:
    """``--mail-user``: one recipient (a user name or an address), handed to MailProg as an
    argument: it must not look like an option nor carry blanks or control characters."""
    if not text or text.startswith("-") or any(c.isspace() or not c.isprintable() for c in text):
        raise MailTypeError(f"--mail-user={text!r} invalid: one user name or address, not starting with '-'")
    return text


def check(types: list[str]) -> list[str]:
    """A list from the API: each a known type (``ALL`` and ``NONE`` read as ``parse`` reads
    them); returns the canonical list."""
    return parse(",".join(types)) if types else []
