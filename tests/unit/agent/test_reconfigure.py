"""musterd's SIGHUP (``agent.main.reconfigure``): the hooks of each node follow the file
read again; a file that does not parse, or no longer names a node, changes nothing."""

from __future__ import annotations

import logging
import pathlib
from types import SimpleNamespace
from typing import Any

import pytest

from muster.agent.hooks import Hooks
from muster.agent.main import reconfigure
from muster.core.config import parse_config

BASE = "ClusterName=t\nNodeName=n[1-2] CPUs=2\nPartitionName=p Nodes=ALL Default=YES\n"


def agents(path: pathlib.Path, text: str) -> list[Any]:
    path.write_text(text)
    config = parse_config(text, str(path))
    return [
        SimpleNamespace(node=SimpleNamespace(name=n), hooks=Hooks(config, n), link=None, config_hash=None)
        for n in ("n1", "n2")
    ]


def test_the_hooks_follow_the_file(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "muster.conf"
    daemons = agents(conf, BASE + "Epilog=/bin/true\n")
    conf.write_text(BASE + "Epilog=/bin/true\nProlog=/usr/local/prolog\nHealthCheckInterval=30\n")
    with caplog.at_level(logging.INFO, logger="musterd"):
        reconfigure(daemons, str(conf))
    for d in daemons:
        assert (d.hooks.prolog, d.hooks.epilog, d.hooks.health_interval) == ("/usr/local/prolog", "/bin/true", 30.0)
    assert "reconfigure: node n1: Prolog, HealthCheckInterval applied" in caplog.text

    with caplog.at_level(logging.INFO, logger="musterd"):
        reconfigure(daemons, str(conf))  # the same file again
    assert "node n2: nothing this agent applies live changed" in caplog.text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (BASE + "Prolog=/x\nNodeName=\n", "missing value for NodeName"),
        (BASE.replace("n[1-2]", "n1") + "Prolog=/x\n", "no longer defines node n2"),
    ],
)
def test_a_refused_file_changes_nothing(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, text: str, said: str
) -> None:
    conf = tmp_path / "muster.conf"
    daemons = agents(conf, BASE)
    conf.write_text(text)
    with caplog.at_level(logging.INFO, logger="musterd"):
        reconfigure(daemons, str(conf))
    assert all(d.hooks.prolog is None for d in daemons)
    assert said in caplog.text and "the running configuration is kept" in caplog.text


def test_an_unreadable_file_changes_nothing(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "muster.conf"
    daemons = agents(conf, BASE + "Prolog=/x\n")
    conf.unlink()
    with caplog.at_level(logging.INFO, logger="musterd"):
        reconfigure(daemons, str(conf))
    assert all(d.hooks.prolog == "/x" for d in daemons)
    assert f"SIGHUP: cannot read {conf}" in caplog.text
