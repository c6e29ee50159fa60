"""``--constraint`` expressions over node Features.

Grammar (``&`` binds tighter than ``|``; Slurm's brackets are read as parentheses)::

    expr   := term ("|" term)*
    term   := factor (("&" | ",") factor)*
    factor := NAME | "(" expr ")" | "[" expr "]"

An expression is kept in disjunctive normal form: a tuple of clauses, each a frozenset
of features that must all be present; a node matches when one clause is a subset of its
features. Slurm's counted features (``ib*2``) are not supported and are rejected, like
any other syntax error, with ``FeatureError``.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["Constraint", "FeatureError", "parse_constraint"]

_TOKEN_RE = re.compile(r"\s*(?:([A-Za-z0-9_.:+\-]+)|([&|,()\[\]]))")


class FeatureError(ValueError):
    """A constraint that does not parse."""


class Constraint:
    """A parsed constraint: ``matches(features)``."""

    __slots__ = ("clauses", "text")

    def __init__(self, clauses: tuple[frozenset[str], ...], text: str) -> None:
        self.clauses = clauses
        self.text = text

    def matches(self, features: frozenset[str]) -> bool:
        return any(clause <= features for clause in self.clauses)

    @property
    def names(self) -> frozenset[str]:
        return frozenset().union(*self.clauses)

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"


@lru_cache(maxsize=1024)
def parse_constraint(text: str) -> Constraint:
    tokens = _tokens(text)
    pos, clauses = _expr(tokens, 0, text)
    if pos != len(tokens):
        raise FeatureError(f"Invalid feature specification: {text}")
    return Constraint(clauses, text)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        m = _TOKEN_RE.match(stripped, pos)
        if m is None:
            raise FeatureError(f"Invalid feature specification: {text}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    if not out:
        raise FeatureError(f"Invalid feature specification: {text}")
    return out


_Clauses = tuple[frozenset[str], ...]


def _expr(tokens: list[str], pos: int, text: str) -> tuple[int, _Clauses]:
    pos, clauses = _term(tokens, pos, text)
    while pos < len(tokens) and tokens[pos] == "|":
        pos, more = _term(tokens, pos + 1, text)
        clauses = clauses + more
    return pos, clauses


def _term(tokens: list[str], pos: int, text: str) -> tuple[int, _Clauses]:
    pos, clauses = _factor(tokens, pos, text)
    while pos < len(tokens) and tokens[pos] in ("&", ","):
        pos, right = _factor(tokens, pos + 1, text)
        clauses = tuple(a | b for a in clauses for b in right)  # AND distributes over OR
    return pos, clauses


def _factor(tokens: list[str], pos: int, text: str) -> tuple[int, _Clauses]:
    if pos >= len(tokens):
        raise FeatureError(f"Invalid feature specification: {text}")
    tok = tokens[pos]
    if tok in ("(", "["):
        close = ")" if tok == "(" else "]"
        pos, clauses = _expr(tokens, pos + 1, text)
        if pos >= len(tokens) or tokens[pos] != close:
            raise FeatureError(f"Invalid feature specification: {text}")
        return pos + 1, clauses
    if tok in ("&", "|", ",", ")", "]"):
        raise FeatureError(f"Invalid feature specification: {text}")
    return pos + 1, (frozenset((tok,)),)
