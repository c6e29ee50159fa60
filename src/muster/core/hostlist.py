"""Slurm hostlist expressions: ``gpu[01-04]``, ``node[1-3,7],login1``, ``a[1-2]b[3-4]``.

Contracts:

* ``expand`` keeps the order written and keeps duplicates (callers that need a set dedupe);
  several bracket groups in one name expand as a cartesian product, leftmost group slowest.
* A range takes its zero-padding width from its low bound: ``[08-10]`` gives ``08 09 10``,
  ``[8-10]`` gives ``8 9 10``.
* ``compress`` is the inverse up to order: ``set(expand(compress(names))) == set(names)``.
  It dedupes, keeps prefixes in order of first appearance and sorts numerically within one.
* Malformed input raises ``HostlistError`` naming what is wrong; nothing is half-expanded.
"""

# No ``from __future__ import annotations``: sinfo and scontrol import this module, and
# ``__future__`` would cost them ~0.1 ms; names only a type checker reads are quoted.

from muster.core.errors import InvalidRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # spares CLI start-up the import
    from collections.abc import Iterable

__all__ = ["HostlistError", "MAX_HOSTS", "compress", "expand"]

# A typo such as node[1-1000000000] must fail fast rather than exhaust memory.
MAX_HOSTS = 1 << 20

# Patterns are kept as strings and compiled on first use (re caches compiled patterns):
# compiling them at import would cost each CLI start-up a few milliseconds.
_RANGE_RE = r"^(\d+)(?:-(\d+))?$"


class HostlistError(InvalidRequest, ValueError):
    """A hostlist expression that cannot be expanded."""


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression into host names, in written order.

    Raises ``HostlistError`` for an empty expression or item, unbalanced or nested brackets,
    a non-numeric or reversed range, or more than ``MAX_HOSTS`` names.
    """
    if not expr or not expr.strip():
        raise HostlistError("Invalid hostlist: empty expression")
    names: list[str] = []
    for item in _split_top_level(expr):
        item = item.strip()
        if not item:
            raise HostlistError(f"Invalid hostlist {expr!r}: empty host name")
        names.extend(_expand_item(item, expr))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"Invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
    return names


_ASCII_DIGITS = "0123456789"


def compress(names: "Iterable[str]") -> str:
    """Render host names as a compact Slurm hostlist (``node[1-2,5],login1``).

    Names that end in digits are grouped by the text before those digits; a group of one
    host is written plainly (``node1``), never with brackets. Empty input gives ``""``.
    """
    # prefix -> {(number, digits as written)}; dict order records first appearance.
    groups: dict[str, set[tuple[int, str]]] = {}
    plain: dict[str, None] = {}
    order: dict[tuple[bool, str], None] = {}
    for name in names:
        cut = len(name.rstrip(_ASCII_DIGITS))  # the common case at C speed, then the rest
        while cut and name[cut - 1].isdecimal():  # what the regular expression \d matches
            cut -= 1
        if cut == len(name):
            plain[name] = None
            order[(False, name)] = None
            continue
        prefix, digits = name[:cut], name[cut:]
        groups.setdefault(prefix, set()).add((int(digits), digits))
        order[(True, prefix)] = None
    parts = []
    for is_group, key in order:
        if not is_group:
            parts.append(key)
            continue
        members = sorted(groups[key])
        if len(members) == 1:
            parts.append(key + members[0][1])
        else:
            parts.append(f"{key}[{_ranges(members)}]")
    return ",".join(parts)


def _ranges(members: list[tuple[int, str]]) -> str:
    """``[(1,'1'), (2,'2'), (5,'5')]`` -> ``1-2,5``; each run keeps one padding width."""
    runs: list[tuple[str, str, int, int]] = []  # (lo text, hi text, hi number, width)
    for number, digits in members:
        if runs:
            lo_text, _, hi, width = runs[-1]
            # A run may only grow by numbers that its low bound's width renders exactly,
            # otherwise expand() would print a different name than the one given.
            if number == hi + 1 and f"{number:0{width}d}" == digits:
                runs[-1] = (lo_text, digits, number, width)
                continue
        padded = len(digits) > 1 and digits[0] == "0"
        runs.append((digits, digits, number, len(digits) if padded else 0))
    return ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi, _, _ in runs)


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that sit outside brackets, checking brackets balance."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise HostlistError(f"Invalid hostlist {expr!r}: nested '['")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"Invalid hostlist {expr!r}: unbalanced ']'")
            depth = 0
        elif ch == "," and not depth:
            items.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"Invalid hostlist {expr!r}: unbalanced '['")
    items.append(expr[start:])
    return items


def _expand_item(item: str, expr: str) -> list[str]:
    """Expand one comma-free item, bracket groups multiplied left to right."""
    results = [""]
    pos = 0
    while pos < len(item):
        open_at = item.find("[", pos)
        if open_at < 0:
            literal, pos = item[pos:], len(item)
            choices = [literal]
        else:
            close_at = item.index("]", open_at)  # balance was checked by the splitter
            literal = item[pos:open_at]
            choices = [literal + n for n in _expand_ranges(item[open_at + 1 : close_at], expr)]
            pos = close_at + 1
        if len(results) * len(choices) > MAX_HOSTS:
            raise HostlistError(f"Invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        results = [r + c for r in results for c in choices]
    return results


def _expand_ranges(body: str, expr: str) -> list[str]:
    """``01-03,7`` -> ``['01', '02', '03', '7']``."""
    import re  # on first use: it costs a command's start-up milliseconds

    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        m = re.compile(_RANGE_RE).match(part)
        if m is None:
            what = "empty range" if not part else f"bad range {part!r}"
            raise HostlistError(f"Invalid hostlist {expr!r}: {what}")
        lo_text, hi_text = m.group(1), m.group(2)
        if hi_text is None:
            out.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(f"Invalid hostlist {expr!r}: reversed range {part!r}")
        if hi - lo + 1 + len(out) > MAX_HOSTS:
            raise HostlistError(f"Invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        width = len(lo_text)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out
