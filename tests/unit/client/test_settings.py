"""The client's configuration and connection: the settings scanner agrees with
core.config, which file is read, a missing one is a clear error, and the controller is
reached over its local socket where there is one, else over TCP."""

from __future__ import annotations

import pytest

from muster.client import controller, settings
from muster.core.config import parse_config
from muster.core.errors import CommandError

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
    mine = settings.parse_client_settings(text, "/etc/muster/muster.conf")
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
    with pytest.raises(CommandError, match="nope.conf"):
        settings.load_settings("squeue")


def test_which_configuration(monkeypatch) -> None:
    monkeypatch.setattr(settings, "DEFAULT_CONF", "/nonexistent/muster.conf")
    assert settings.conf_path({"MUSTER_CONF": "/a", "SLURM_CONF": "/b"}) == "/a"
    assert settings.conf_path({"SLURM_CONF": "/b"}) == "/b"
    assert settings.conf_path({}) == "/nonexistent/muster.conf"


def test_connect_prefers_the_local_socket(monkeypatch, tmp_path) -> None:
    sock = tmp_path / "ctld.sock"
    sock.write_text("")
    conf = tmp_path / "m.conf"
    conf.write_text(f"CtldSocket={sock}\nSlurmctldPort=7777\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    ctl = controller.connect("squeue")
    assert ctl.unix_path == str(sock) and ctl.address is None


def test_connect_falls_back_to_tcp(monkeypatch, tmp_path) -> None:
    conf = tmp_path / "m.conf"
    conf.write_text(f"CtldSocket={tmp_path}/none.sock\nSlurmctldHost=h(10.9.9.9)\nSlurmctldPort=7777\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    ctl = controller.connect("squeue")
    assert ctl.unix_path is None and ctl.address == ("10.9.9.9", 7777)
