"""The free text a user gives a job and others read back: a job's name and comment, a
step's name.

These come back in ``squeue``/``sacct``/``scontrol`` output that other users' scripts parse
line by line (``squeue -h``, ``sacct --parsable2``). A newline, carriage return or other
control character in a name would let one user forge rows in those parsers, so such text
is refused at the front door (submission, ``scontrol update``, step creation) with an error
naming the field and the character, and the state is left unchanged. Tabs are control
characters too; every other character (spaces, ``|``, any printable Unicode) is kept as
given, as Slurm keeps it.
"""

from __future__ import annotations

import unicodedata

from muster.core.errors import InvalidRequest

__all__ = ["check_label", "unprintable_at"]

# Control characters (C0, DEL, C1) and Unicode's line and paragraph separators: every
# character that ``str.splitlines`` or a terminal could take for the end of a row.
_REFUSED_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def unprintable_at(text: str) -> int | None:
    """The index of the first character that may not appear in a label, or None."""
    if text.isprintable():  # the common case, in C
        return None
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return i
    return None


def check_label(what: str, text: str | None) -> None:
    """Refuse ``text`` (a job's ``what``: "job name", "comment"...) when it holds a control
    character: ``InvalidRequest("Invalid job name: control character '\\n' at position 4")``."""
    if not text:
        return
    i = unprintable_at(text)
    if i is not None:
        raise InvalidRequest(f"Invalid {what}: control character {ascii(text[i])} at position {i + 1}")
