"""strigger's command line: the help Slurm's own test reads, the usage errors (no controller
needed), and ``--get``'s table."""

from __future__ import annotations

import re

import pytest

from muster.cli import strigger
from muster.core.triggers import table


def test_help_names_the_modes_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert strigger.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"strigger \[--set \| --get \| --clear\] \[OPTIONS\]", out)
    for pattern in (r"--set +create a trigger", r"--get +get trigger information", r"--clear +delete a trigger"):
        assert re.search(pattern, out)
    assert "-j, --jobid=" in out and "-n, --node[=host]" in out
    assert re.search(r"-v, --verbose +print detailed", out)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "Must specify one of --set, --get, or --clear"),
        (["--set", "--get"], "Must specify one of --set, --get, or --clear"),
        (["--set", "--program=/bin/true"], "You must specify a trigger"),
        (["--set", "--down"], "You must specify a --program value"),
        (["--set", "--time", "--program=/bin/true"], "--time and --fini require --jobid"),
        (["--set", "--fini", "-j", "12", "-nnode1", "-p", "/bin/true"], "mutually exclusive"),
        (["--set", "--fini", "-j", "x1", "-p", "/bin/true"], "Invalid job id"),
        (["--clear"], "--id, --jobid, or --user must be specified"),
        (["--set", "--primary_slurmctld_failure", "-p", "/bin/true"], "not supported"),
        (["--bogus"], "unrecognized option"),
    ],
)
def test_usage_errors_exit_non_zero_with_a_message(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert strigger.main(argv) != 0
    assert words in capsys.readouterr().err


def test_get_table_matches_slurms_columns() -> None:
    rows = [
        {
            "trig_id": 3,
            "res_type": "job",
            "res_id": "1235",
            "event": "time",
            "offset": -600,
            "user": "joe",
            "perm": False,
            "program": "/home/joe/clean_up",
        },
        {
            "trig_id": 12,
            "res_type": "node",
            "res_id": "*",
            "event": "down",
            "offset": 0,
            "user": "root",
            "perm": True,
            "program": "/bin/notify",
        },
    ]
    lines = table(rows).splitlines()
    assert lines[0].split() == ["TRIG_ID", "RES_TYPE", "RES_ID", "TYPE", "OFFSET", "USER", "FLAGS", "PROGRAM"]
    assert lines[1].split() == ["3", "job", "1235", "time", "-600", "joe", "/home/joe/clean_up"]
    assert lines[2].split() == ["12", "node", "*", "down", "0", "root", "PERM", "/bin/notify"]
    assert table(rows, header=False).splitlines()[0] == lines[1]
    assert table([]) == table([], header=True) and table([], header=False) == ""
