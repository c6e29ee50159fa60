"""Hostlist expressions: expansion, compression, and that one undoes the other."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.core.hostlist import MAX_HOSTS, HostlistError, compress, expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node1", ["node1"]),
        ("gpu[01-04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
        ("node[1-3,7],login1", ["node1", "node2", "node3", "node7", "login1"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("a, b ,c", ["a", "b", "c"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
        ("node[ 1-2 , 4 ]", ["node1", "node2", "node4"]),
        ("127.0.0.[1-3]", ["127.0.0.1", "127.0.0.2", "127.0.0.3"]),
        ("[17001-17002]", ["17001", "17002"]),
        ("node[3]", ["node3"]),
        ("n1,n1", ["n1", "n1"]),
    ],
)
def test_expand_follows_slurm_syntax(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("node[1-3", "unbalanced '['"),
        ("node1-3]", "unbalanced ']'"),
        ("node[[1-3]]", "nested '['"),
        ("node[5-3]", "reversed range '5-3'"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node[]", "empty range"),
        ("node[1,,2]", "empty range"),
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        ("node[1-2000000]", f"more than {MAX_HOSTS} hosts"),
        ("a[1-2000]b[1-2000]", f"more than {MAX_HOSTS} hosts"),
    ],
)
def test_expand_rejects_malformed_input_with_a_reason(expr: str, fragment: str) -> None:
    with pytest.raises(HostlistError, match=fragment.replace("[", r"\[")):
        expand(expr)


def test_hostlist_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        expand("x[")


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        ([], ""),
        (["node1"], "node1"),
        (["gpu01", "gpu02", "gpu03", "gpu04"], "gpu[01-04]"),
        (["node5", "node1", "node2"], "node[1-2,5]"),
        (["node1", "login1", "node2"], "node[1-2],login1"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["gpu09", "gpu10"], "gpu[09-10]"),
        (["node1", "node1", "node2"], "node[1-2]"),
        (["login", "node1"], "login,node1"),
        (["n01", "n1", "n2"], "n[01,1-2]"),
        (["n001", "n002", "n010"], "n[001-002,010]"),
    ],
)
def test_compress_writes_slurm_style_ranges(names: list[str], expr: str) -> None:
    assert compress(names) == expr


def test_compress_accepts_any_iterable() -> None:
    assert compress(f"n{i}" for i in range(3)) == "n[0-2]"


def test_round_trip_of_a_cluster_list() -> None:
    expr = "gpu[01-16],cpu[1-4,9],login1"
    assert compress(expand(expr)) == expr


_prefix = st.text(alphabet="abxyz07-.", min_size=0, max_size=4)
_digits = st.text(alphabet="0123456789", min_size=1, max_size=4)
_name = st.one_of(
    st.builds(lambda p, d: p + d, _prefix, _digits),
    st.text(alphabet="abcxyz", min_size=1, max_size=5),
).filter(bool)


@given(st.lists(_name, max_size=30))
def test_compress_then_expand_gives_the_same_set(names: list[str]) -> None:
    expr = compress(names)
    assert set(expand(expr) if expr else []) == set(names)
    assert len(expand(expr) if expr else []) == len(set(names))


@given(st.lists(_name, min_size=1, max_size=30))
def test_compress_is_stable_under_round_trips(names: list[str]) -> None:
    once = compress(names)
    assert compress(expand(once)) == once


def _compress_by_pattern(names: list[str]) -> str:
    """``compress`` as it was written with a regular expression: the oracle."""
    import re

    from muster.core.hostlist import _ranges

    groups: dict[str, set[tuple[int, str]]] = {}
    order: dict[tuple[bool, str], None] = {}
    for name in names:
        m = re.match(r"(?s)(.*?)(\d+)\Z", name)
        if m is None:
            order[(False, name)] = None
            continue
        groups.setdefault(m.group(1), set()).add((int(m.group(2)), m.group(2)))
        order[(True, m.group(1))] = None
    parts = []
    for grouped, key in order:
        members = sorted(groups[key]) if grouped else []
        if not grouped:
            parts.append(key)
        elif len(members) == 1:
            parts.append(key + members[0][1])
        else:
            parts.append(f"{key}[{_ranges(members)}]")
    return ",".join(parts)


@given(st.lists(st.text(alphabet="ab-_.\n01\uff19\u06637", max_size=6), max_size=6))
def test_compress_splits_names_at_their_trailing_digits_as_the_pattern_did(names: list[str]) -> None:
    assert compress(names) == _compress_by_pattern(names)
