"""sattach's command line and its --layout text, as sattach(1) and Slurm 22.05 give them,
and the watch it carries: signed under its own purpose, never a step grant."""

from __future__ import annotations

import pytest

from muster.cli.sattach import HELP, USAGE, Request, layout_text, main, parse_args
from muster.protocol.stepcred import GrantError, sign_grant, sign_watch, verify_grant, verify_watch

KEY = b"k" * 32


def test_options_of_the_man_page() -> None:
    req = parse_args(["--input-filter=1", "--output-filter", "2", "--error-filter=0", "-l", "-Q", "12.3"])
    assert isinstance(req, Request)
    assert (req.job_id, req.step_id) == (12, 3)
    assert (req.input_filter, req.output_filter, req.error_filter) == (1, 2, 0)
    assert req.label and req.quiet and not req.layout
    assert parse_args(["--layout", "4.0"]).layout  # type: ignore[union-attr]


def test_help_usage_version() -> None:
    assert parse_args(["--usage", "1.0"]) == USAGE == "Usage: sattach [options] <jobid.stepid>\n"
    assert parse_args(["-h"]) == HELP
    assert str(parse_args(["-V"])).startswith("slurm ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "sattach: error: too many parameters"),
        (["1.0", "2.0"], "sattach: error: too many parameters"),
        (["12"], "sattach: error: Failed to parse stepid from command line options"),
        (["12.batch"], "sattach: error: Failed to parse stepid from command line options"),
    ],
)
def test_no_single_step_is_an_error_and_the_usage_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert err.strip() == message
    assert out == USAGE


def test_a_filter_takes_a_task_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--output-filter=x", "1.0"]) == 1
    assert capsys.readouterr().err.strip() == 'sattach: error: Invalid numeric value "x" for output-filter.'


def test_layout_in_slurms_words() -> None:
    answer = {"nodes": [{"name": "node1"}, {"name": "node2"}], "tasks": [[0, 1], [2]]}
    assert layout_text(answer) == (
        "Job step layout:\n"
        "\t3 tasks, 2 nodes (node[1-2])\n"
        "\n"
        "\tNode 0 (node1), 2 task(s): 0 1 \n"
        "\tNode 1 (node2), 1 task(s): 2 \n"
    )


def test_a_watch_is_not_a_grant_nor_the_other_way() -> None:
    content = {"job_id": 5, "step_id": 0, "nodes": ["n1"], "user": "u", "issued": 50.0, "expires": 200.0}
    text, sig = sign_watch(KEY, content)
    assert verify_watch(KEY, text, sig, 100.0) == content
    with pytest.raises(GrantError):
        verify_grant(KEY, text, sig, 100.0)  # a watch never launches anything
    gtext, gsig = sign_grant(KEY, content)
    with pytest.raises(GrantError):
        verify_watch(KEY, gtext, gsig, 100.0)
    with pytest.raises(GrantError, match="expired"):
        verify_watch(KEY, text, sig, 300.0)
    with pytest.raises(GrantError):
        verify_watch(b"x" * 32, text, sig, 100.0)
