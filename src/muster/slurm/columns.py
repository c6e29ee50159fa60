"""Columns the Slurm way: the one engine every table-printing command uses.

A command owns its *field table* (what a name or letter means and how to compute it from
a row); this module owns the rest, so a width or justification rule lives in one place:

* ``%`` letters (squeue ``-o``, sinfo ``-o``, sprio ``-o``, ``squeue -s -o``):
  :func:`parse_format` splits ``%[.|-][#|width]letter`` with literal text between fields;
  :func:`letter_columns` turns the pieces into :class:`Column` s through the command's
  table. ``%.18i`` is right-justified in 18 columns, ``%10j`` left-justified; values
  longer than the width are cut unless the field says not to (node lists); width 0
  prints the value as it is; ``%#P`` (width -1) is sized by :func:`render` to the longest
  value, never under the command's minimum.
* ``-O`` names (squeue, sinfo): :func:`named_columns` reads ``Name[:[.]width[suffix]]``,
  20 columns wide unless told.
* ``print_fields`` names (sacct ``--format``, sacctmgr ``format=``, sshare ``-o``):
  :func:`field_list` reads ``Name[%width]`` (a given width right-justifies, a negative one
  left-justifies) and :class:`Printer` writes them fixed-width, cut with ``+``, or
  ``|``-separated with ``-p``/``-P``.

Nothing here does I/O or imports more than the language itself: commands start fast.
"""

from muster.core.errors import CommandError

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

# Format widths (squeue -o %20i, sacct -o jobid%30, ...) are capped: a wider field than any
# screen is a typo, and a 20-digit one would otherwise fail deep in str.ljust.
MAX_FIELD_WIDTH = 4096

# An -O column with no width given.
NAMED_WIDTH = 20


def fit(text: str, width: int, right: bool, cut: bool = True) -> str:
    """Slurm's column rule: pad to ``width`` (right-justified with ``right``), and with
    ``cut`` truncate longer values to ``width``; width 0 prints the value as is."""
    if width <= 0:
        return text
    if cut and len(text) > width:
        text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def field_width(digits: str) -> int:
    """A format field's width from its digits; 0 when there are none (or not ASCII ones)."""
    if not (digits.isascii() and digits.isdigit()):
        return 0
    return min(int(digits[:8]), MAX_FIELD_WIDTH)


def parse_format(fmt: str) -> list[tuple[str, str | None, int, bool]]:
    """Split a Slurm ``%`` format into (literal, field letter, width, right) pieces.

    ``%.18i`` is right-justified in 18 columns, ``%-10j`` and ``%10j`` left-justified;
    ``%%`` is a percent sign. A trailing literal is a piece with letter None. A ``#``
    width (sinfo's ``%#P``) is reported as width -1 for the command to size.
    """
    pieces: list[tuple[str, str | None, int, bool]] = []
    literal: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        ch = fmt[i]
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            literal.append("%")
            i += 2
            continue
        i += 1
        right = False
        width = 0
        if i < n and fmt[i] == ".":
            right = True
            i += 1
        elif i < n and fmt[i] == "-":
            i += 1
        if i < n and fmt[i] == "#":
            width = -1
            i += 1
        else:
            start = i
            while i < n and fmt[i].isdigit():
                i += 1
            if i > start:
                width = field_width(fmt[start:i])
        if i >= n:
            break
        pieces.append(("".join(literal), fmt[i], width, right))
        literal = []
        i += 1
    if literal:
        pieces.append(("".join(literal), None, 0, False))
    return pieces


# --- % letters and -O names: columns fitted to a width -----------------------------------------


class Column:
    """One output column: a literal prefix, then a value fitted to a width, then a suffix.

    ``value`` is a function of the row (None for a column of literal text only); ``key``
    is the letter or name the column was asked by, for commands whose rows depend on
    which fields are shown (sinfo groups nodes by them). Width -1 means "as wide as the
    longest value" (:func:`render` sizes it).
    """

    __slots__ = ("prefix", "header", "value", "width", "right", "cut", "suffix", "key")

    def __init__(
        self,
        prefix: str,
        header: str,
        value: object,
        width: int,
        right: bool,
        cut: bool,
        suffix: str = "",
        key: str | None = None,
    ) -> None:
        self.prefix = prefix
        self.header = header
        self.value = value
        self.width = width
        self.right = right
        self.cut = cut
        self.suffix = suffix
        self.key = key


def letter_columns(fmt: str, lookup: object, unknown: str, sized: bool = False) -> list[Column]:
    """``-o``: a ``%`` format through the command's table. ``lookup(letter)`` gives
    ``(header, value, cut)`` or None, which raises CommandError with ``unknown`` (a
    ``str.format`` template given the letter). Without ``sized`` a ``%#`` width prints
    the value as it is; with it, the column is sized to its longest value."""
    cols: list[Column] = []
    for literal, letter, width, right in parse_format(fmt):
        if letter is None:
            cols.append(Column(literal, "", None, 0, False, False))
            continue
        field = lookup(letter)  # type: ignore[operator]
        if field is None:
            raise CommandError(unknown.format(letter))
        header, value, cut = field
        cols.append(Column(literal, header, value, width if sized else max(width, 0), right, cut, key=letter))
    return cols


def named_columns(spec: str, lookup: object, unknown: str, separator: str = "") -> list[Column]:
    """``-O``: comma-separated ``Name[:[.]width[suffix]]`` items, :data:`NAMED_WIDTH`
    columns wide unless told, names case-blind. ``lookup(name)`` (lower case) gives
    ``(header, value, cut)`` or None (CommandError with ``unknown`` given the name);
    ``separator`` goes between columns (sinfo puts a space there, squeue nothing)."""
    cols: list[Column] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, colon, size = item.partition(":")
        key = name.lower()
        width, right, suffix = NAMED_WIDTH, False, ""
        if colon:
            if size.startswith("."):
                right, size = True, size[1:]
            digits = ""
            while size and size[0].isdigit():
                digits, size = digits + size[0], size[1:]
            width = field_width(digits)
            suffix = size
        field = lookup(key)  # type: ignore[operator]
        if field is None:
            raise CommandError(unknown.format(name))
        header, value, cut = field
        prefix = separator if cols else ""
        cols.append(Column(prefix, header, value, width, right, cut and width > 0, suffix, key))
    return cols


def _sized(cols: list[Column], rows: list["Any"], least: int) -> list[Column]:
    """The columns with each ``#`` width replaced by the longest value's (at least ``least``)."""
    out = []
    for c in cols:
        if c.width < 0 and c.value is not None:
            longest = max([least] + [len(c.value(r)) for r in rows])  # type: ignore[operator]
            c = Column(c.prefix, c.header, c.value, longest, c.right, c.cut, c.suffix, c.key)
        out.append(c)
    return out


def _row_format(cols: list[Column]) -> tuple[str, list["Any"]]:
    """A row as one ``%`` format and the value functions that fill it: a queue can be
    thousands of rows and this is the inner loop, so each line is one formatting in C.
    ``%W.Ws`` cuts to W and right-justifies (``%-W.Ws`` left), as ``fit`` would."""
    parts, values = [], []
    for c in cols:
        prefix = c.prefix.replace("%", "%%")
        if c.value is None:
            parts.append(prefix)  # a literal column: its prefix alone
            continue
        w = c.width
        spec = "%s" if w <= 0 else f"%{'' if c.right else '-'}{w}{f'.{w}' if c.cut else ''}s"
        parts.append(prefix + spec + c.suffix.replace("%", "%%"))
        values.append(c.value)
    return "".join(parts), values


def render(rows: list["Any"], cols: list[Column], header: bool = True, least: int = 0) -> list[str]:
    """The lines of a table: a header line (the columns' headers, fitted and always cut)
    unless ``header`` is false, then one line per row. ``least`` is the narrowest a
    ``#``-sized column may be."""
    if any(c.width < 0 for c in cols):
        cols = _sized(cols, rows, least)
    lines = []
    if header:
        lines.append(
            "".join(
                c.prefix + (fit(c.header, c.width, c.right) if c.value is not None else "") + c.suffix for c in cols
            )
        )
    fmt, values = _row_format(cols)
    if not values:
        return lines + [fmt % ()] * len(rows)
    lines.extend(map(fmt.__mod__, zip(*[list(map(v, rows)) for v in values], strict=True)))
    return lines


# --- print_fields names: sacct, sacctmgr, sshare, sreport ----------------------------------------


def field_list(text: str, table: dict[str, "Any"], unknown: str, squeeze: bool = False) -> list[tuple["Any", ...]]:
    """``Name[%width],...`` -> ``(header, width, value)`` per item, from ``table``
    (lower-case name -> ``(header, default width, value)``). A given width right-justifies,
    a negative one left-justifies; empty items are skipped. An unknown name, or a width
    that is not a number, raises CommandError with ``unknown`` (a template given the name
    or the item). ``squeeze`` drops spaces inside names (sacctmgr's ``format=``)."""
    cols = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, width = item.partition("%")
        key = name.lower().replace(" ", "") if squeeze else name.lower()
        found = table.get(key)
        if found is None:
            raise CommandError(unknown.format(name))
        header, w, fn = found
        if width:
            try:
                w = min(int(width), MAX_FIELD_WIDTH)
            except ValueError:
                raise CommandError(unknown.format(item)) from None
        cols.append((header, w, fn))
    return cols


def cell(value: str, width: int) -> str:
    """One fixed-width value: cut with ``+``, right-justified (left for negative width)."""
    w = abs(width)
    if len(value) > w:
        value = value[: w - 1] + "+" if w > 0 else value
    return value.ljust(w) if width < 0 else value.rjust(w)


class Printer:
    """Rows of columns as Slurm's ``print_fields`` writes them: each value padded to its
    width and cut with ``+``, then a space; a header and a dashed line unless told not
    to; with ``parsable`` values joined by ``delimiter`` (and ended by it with
    ``trailing``, as ``-p`` does, not ``-P``)."""

    __slots__ = ("parsable", "delimiter", "trailing", "header")

    def __init__(
        self, parsable: bool = False, trailing: bool = False, delimiter: str = "|", header: bool = True
    ) -> None:
        self.parsable = parsable
        self.trailing = trailing
        self.delimiter = delimiter
        self.header = header

    def lines(self, columns: list[tuple[str, int]], rows: list[list[str]]) -> list[str]:
        out: list[str] = []
        if self.parsable:
            end = self.delimiter if self.trailing else ""
            if self.header:
                out.append(self.delimiter.join(name for name, _ in columns) + end)
            out += [self.delimiter.join(row) + end for row in rows]
            return out
        if self.header:
            out.append("".join(cell(name, w) + " " for name, w in columns))
            out.append("".join("-" * abs(w) + " " for _, w in columns))
        for row in rows:
            out.append("".join(cell(v, w) + " " for v, (_, w) in zip(row, columns, strict=False)))
        return out


def null_text(value: object) -> str:
    """``(null)`` for a missing value (None, empty text or list), as Slurm prints it."""
    if value is None or value == "" or value == []:
        return "(null)"
    return str(value)


_TIMEFMT: "ModuleType | None" = None


def timefmt() -> "ModuleType":
    """muster.core.timetext (timefmt's formatting half), imported on first use (commands
    that print no times skip it)."""
    global _TIMEFMT
    if _TIMEFMT is None:
        from muster.core import timetext as module

        _TIMEFMT = module
    return _TIMEFMT
