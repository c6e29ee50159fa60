"""``PriorityType``: ``scontrol show config`` says what the controller runs (the file's value,
else Slurm 22.05's default, priority/basic: FIFO by submission); the configs muster writes
itself state priority/multifactor; sprio under priority/basic says what Slurm's sprio says."""

from __future__ import annotations

import pathlib

import pytest

from muster.cli import sprio
from muster.cli.showconfig import config_lines
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.ctld.controller import Controller
from muster.ctld.store import Store
from muster.sched.config import SchedConfig


def _priority_type(settings: dict[str, str]) -> str:
    (line,) = [x for x in config_lines(settings, {}) if x.split()[0] == "PriorityType"]
    return line.split("=", 1)[1].strip()


def test_unset_shows_the_default_the_scheduler_uses() -> None:
    assert _priority_type({}) == SchedConfig.from_settings({}).priority_type == "priority/basic"
    assert not SchedConfig.from_settings({}).multifactor


def test_muster_up_states_multifactor(tmp_path: pathlib.Path) -> None:
    from muster.cluster.local import ClusterShape, render_config

    text = render_config(str(tmp_path), ClusterShape(nodes=1))
    settings = parse_config(text, "m.conf").settings
    assert _priority_type(settings) == "priority/multifactor"
    assert SchedConfig.from_settings(settings).multifactor


def test_stated_basic_is_shown_and_used() -> None:
    settings = {"PriorityType": "priority/basic"}
    assert _priority_type(settings) == "priority/basic"
    assert not SchedConfig.from_settings(settings).multifactor
    assert _priority_type({"prioritytype": "priority/basic"}) == "priority/basic"


def test_sprio_under_basic_says_what_slurms_says(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # what the controller answers sprio under priority/basic, then what sprio prints
    conf = "ClusterName=t\nPriorityType=priority/basic\nNodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    ctl = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    assert ctl.accounting is not None
    answer = ctl.accounting.priorities(ctl, 1000.0)
    assert answer["multifactor"] is False and answer["priority_type"] == "priority/basic"
    monkeypatch.setattr(sprio, "call", lambda *a, **k: answer)
    assert sprio.main([]) != 0
    said = capsys.readouterr()
    assert "You are not running a supported priority plugin\n(priority/basic).\n" in said.err + said.out
    assert "Only 'priority/multifactor' is supported." in said.err + said.out
