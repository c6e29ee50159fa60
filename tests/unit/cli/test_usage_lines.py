"""``--usage`` of the commands that Slurm gives a one-line summary: ``Usage: CMD`` then
bracketed option groups (sprio(1), sdiag(1)), or sstat's ``-j <job(.stepid)>``; ``--help``
lists every option."""

from __future__ import annotations

import re

import pytest

from muster.cli import sdiag, sprio, sstat

GROUPS = r"(?:\s+\[-{1,2}[^\]]+(?:\[s\])?\])+\n"


@pytest.mark.parametrize("cmd, name", [(sprio, "sprio"), (sdiag, "sdiag")])
def test_usage_is_bracketed_option_groups(cmd, name, capsys) -> None:
    assert cmd.main(["--usage"]) == 0
    assert re.fullmatch(f"Usage: {name}{GROUPS}", capsys.readouterr().out)


def test_sprio_help_lists_its_options(capsys) -> None:
    assert sprio.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: sprio [OPTIONS]\n")
    for opt in ("-j, --jobs", "-l, --long", "-M, --cluster", "-p, --partition", "-u, --user", "-w, --weights"):
        assert opt in out


def test_sstat_usage_and_help(capsys) -> None:
    assert sstat.main(["--usage"]) == 0
    assert capsys.readouterr().out.startswith("Usage: sstat [options] -j <job(.stepid)>\n")
    assert sstat.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sstat [<OPTION>] -j <job(.stepid)>\n") and "Valid <OPTION> values are:" in out
    assert sstat.main(["-e"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) >= 50 and {"AveDiskRead", "MinCPU", "MaxVMSize", "TRESUsageInTot", "Nodelist"} <= set(names)
