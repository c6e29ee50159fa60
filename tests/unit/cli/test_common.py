"""Shared command plumbing: the configuration scanner agrees with core.config, column
fitting and format parsing follow Slurm, and the version line keeps its shape."""

from __future__ import annotations

import pytest

from muster.cli import common
from muster.core.config import parse_config

CONFIGS = [
    "",
    "ClusterName=Anchor\nSlurmctldHost=vm(10.0.0.1)\nSlurmctldPort=6817\n",
    "SlurmctldHost=ctl1\nSlurmctldHost=ctl2\nStateSaveLocation=/var/lib/m\n",
    "ControlMachine=old\nControlAddr=10.1.1.1\nSlurmctldPort=7000-7004\n",
    'CtldSocket="/tmp/my sock"  # where commands connect\nAgentSocketDir=/run/m\n',
    "clustername=lower   slurmctldport = 9999\nNodeName=n[1-2] CPUs=4\nPartitionName=p Nodes=n[1-2] Default=YES\n",
    "StateSaveLocation=/a\\\n/b\nCtldSocket=/x\\#y.sock\n",
]


@pytest.mark.parametrize("text", CONFIGS)
def test_client_settings_agree_with_core_config(text) -> None:
    full = parse_config(text, "/etc/muster/muster.conf")
    mine = common.parse_client_settings(text, "/etc/muster/muster.conf")
    assert (mine.cluster_name, mine.ctld_host, mine.ctld_addr, mine.ctld_port) == (
        full.cluster_name,
        full.ctld_host,
        full.ctld_addr,
        full.ctld_port,
    )
    assert (mine.state_save_location, mine.ctld_socket, mine.agent_socket_dir) == (
        full.state_save_location,
        full.ctld_socket,
        full.agent_socket_dir,
    )


def test_missing_config_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MUSTER_CONF", str(tmp_path / "nope.conf"))
    with pytest.raises(common.CommandError, match="nope.conf"):
        common.load_settings("squeue")


def test_which_configuration(monkeypatch) -> None:
    monkeypatch.setattr(common, "DEFAULT_CONF", "/nonexistent/muster.conf")
    assert common.conf_path({"MUSTER_CONF": "/a", "SLURM_CONF": "/b"}) == "/a"
    assert common.conf_path({"SLURM_CONF": "/b"}) == "/b"
    assert common.conf_path({}) == "/nonexistent/muster.conf"


def test_connect_prefers_the_local_socket(monkeypatch, tmp_path) -> None:
    sock = tmp_path / "ctld.sock"
    sock.write_text("")
    conf = tmp_path / "m.conf"
    conf.write_text(f"CtldSocket={sock}\nSlurmctldPort=7777\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    ctl = common.connect("squeue")
    assert ctl.unix_path == str(sock) and ctl.address is None


def test_connect_falls_back_to_tcp(monkeypatch, tmp_path) -> None:
    conf = tmp_path / "m.conf"
    conf.write_text(f"CtldSocket={tmp_path}/none.sock\nSlurmctldHost=h(10.9.9.9)\nSlurmctldPort=7777\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    ctl = common.connect("squeue")
    assert ctl.unix_path is None and ctl.address == ("10.9.9.9", 7777)


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
