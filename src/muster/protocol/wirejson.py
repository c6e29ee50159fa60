"""JSON for the commands' hot path without importing the ``json`` package.

``import json`` pulls in ``re`` (through its pure-Python decoder and scanner), which costs
several milliseconds at every command start; a command answers in about that much in
total. The C accelerator ``_json`` that ``json`` itself uses does all the work: this module
only gives it the few settings the ``json`` package would. Output and input are identical
to ``json.dumps(obj, separators=(",", ":"))`` and ``json.loads(text)`` for the values the
API exchanges; where ``_json`` is missing (another interpreter) it falls back to ``json``.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

TYPE_CHECKING = False  # typing itself is not imported on the commands' hot path
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

_json: "ModuleType | None"
try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None


class _ScanContext:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


_WS = " \t\n\r"


def _default(obj: object) -> object:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


if _json is not None:
    _context: "Any" = _ScanContext()  # duck-typed: the attributes a JSONDecoder has
    _scan = _json.make_scanner(_context)
    _encode = _json.make_encoder(None, _default, _json.encode_basestring_ascii, None, ":", ",", False, False, True)

    def dumps(obj: object) -> str:
        return "".join(_encode(obj, 0))

    def loads(text: str | bytes) -> object:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        start = len(text) - len(text.lstrip(_WS))
        try:
            value, end = _scan(text, start)
        except StopIteration as e:
            raise ValueError(f"Expecting value at char {e.value}") from None
        if text[end:].strip(_WS):
            raise ValueError(f"Extra data at char {end}")
        return value

else:  # pragma: no cover
    import json as _std

    def dumps(obj: object) -> str:
        return _std.dumps(obj, separators=(",", ":"))

    def loads(text: str | bytes) -> object:
        return _std.loads(text)
