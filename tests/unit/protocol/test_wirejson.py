from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.protocol.wirejson import dumps, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(values)
def test_wirejson_matches_the_json_package(value: object) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"))
    assert loads(dumps(value)) == value
    assert loads(" \n" + json.dumps(value, indent=2) + "\n") == value


@pytest.mark.parametrize("bad", ["", "{", "[1,]", "1 2", "nul"])
def test_malformed_json_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        loads(bad)


def test_commands_do_not_import_json_socket_or_typing() -> None:
    import subprocess
    import sys

    code = (
        "import sys, muster.cli.sbatch, muster.protocol.client;"
        "print(sorted(m for m in ('json', 'socket', 'typing', 're', 'enum') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
