"""core.nodeconf: the settings of a per-node Key=Value file that apply to one node."""

from __future__ import annotations

import pytest

from muster.core.nodeconf import NodeConfError, node_settings

TEXT = """\
# every node
BasePath=/var/tmp/jc  Dirs=/tmp
NodeName=gpu[1-2] BasePath=/scratch/jc   # these two differ
NodeName=cpu1 Dirs=/tmp,/dev/shm
"""


def test_a_nodes_own_line_wins_over_the_lines_for_every_node() -> None:
    assert node_settings(TEXT, "gpu2") == {"basepath": ("/scratch/jc", 3), "dirs": ("/tmp", 2)}
    assert node_settings(TEXT, "cpu1") == {"basepath": ("/var/tmp/jc", 2), "dirs": ("/tmp,/dev/shm", 4)}
    assert node_settings(TEXT, "other") == {"basepath": ("/var/tmp/jc", 2), "dirs": ("/tmp", 2)}


def test_keys_are_case_insensitive_and_values_may_be_quoted_where_the_file_allows() -> None:
    text = 'RunTimeRun="crun run --bundle %b %n.%u.%j"\n'
    assert node_settings(text, "n1", quoted=True) == {"runtimerun": ("crun run --bundle %b %n.%u.%j", 1)}
    assert node_settings("DIRS=/tmp\n", "n1") == {"dirs": ("/tmp", 1)}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("BasePath=/x\nbogus\n", 2, "expected Key=Value, not 'bogus'"),
        ("NodeName=n[1-3 BasePath=/x\n", 1, "bad NodeName"),
    ],
)
def test_a_bad_line_is_named_by_its_number(text: str, line: int, message: str) -> None:
    with pytest.raises(NodeConfError) as caught:
        node_settings(text, "n1")
    assert caught.value.line == line and message in str(caught.value)


def test_an_unbalanced_quote_is_an_error_where_values_may_be_quoted() -> None:
    with pytest.raises(NodeConfError) as caught:
        node_settings('RunTimeRun="crun run\n', "n1", quoted=True)
    assert caught.value.line == 1
