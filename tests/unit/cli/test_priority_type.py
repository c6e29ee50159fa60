"""``scontrol show config``'s PriorityType says what the controller runs: the file's value,
else muster's default (priority/multifactor), never Slurm 22.05's documented default."""

from __future__ import annotations

from muster.cli.showconfig import config_lines
from muster.sched.config import SchedConfig


def _priority_type(settings: dict[str, str]) -> str:
    (line,) = [x for x in config_lines(settings, {}) if x.split()[0] == "PriorityType"]
    return line.split("=", 1)[1].strip()


def test_unset_shows_the_default_the_scheduler_uses() -> None:
    assert _priority_type({}) == SchedConfig.from_settings({}).priority_type == "priority/multifactor"


def test_stated_basic_is_shown_and_used() -> None:
    settings = {"PriorityType": "priority/basic"}
    assert _priority_type(settings) == "priority/basic"
    assert not SchedConfig.from_settings(settings).multifactor
    assert _priority_type({"prioritytype": "priority/basic"}) == "priority/basic"
