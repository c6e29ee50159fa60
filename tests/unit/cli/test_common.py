"""Shared command plumbing: the version line keeps its shape; ``muster up``'s settings."""

from __future__ import annotations

from muster.cli import common


def test_version_line_starts_like_slurms() -> None:
    line = common.version_line()
    assert line.startswith("slurm 22.05.8 ") and "muster" in line


def test_muster_up_conf_extra_settings() -> None:
    from muster.cli.muster import conf_extra

    assert conf_extra(["PriorityType=priority/basic"], "SlurmdTimeout=5; SelectTypeParameters=CR_CPU") == {
        "PriorityType": "priority/basic",
        "SlurmdTimeout": "5",
        "SelectTypeParameters": "CR_CPU",
    }
    assert "KEY=VALUE" in str(conf_extra(["SlurmdTimeout"], ""))
    assert "global settings only" in str(conf_extra(["NodeName=x"], ""))


def test_muster_up_refuses_a_bad_topology_naming_the_users_file(tmp_path, capsys) -> None:
    from muster.cli.muster import main

    bad = tmp_path / "topo.conf"
    bad.write_text("SwitchName=s0 Nodes=node[1-5]\n")
    state = tmp_path / "state"
    assert main(["up", "--nodes", "4", "--state-dir", str(state), "--topology", str(bad)]) == 1
    assert capsys.readouterr().err == f"muster: error: {bad}:1: switch 's0' names unknown node 'node5'\n"
    assert not state.exists()  # nothing written
    assert main(["up", "--state-dir", str(state), "--topology", str(tmp_path / "none.conf")]) == 2
    assert "--topology: cannot read" in capsys.readouterr().err
