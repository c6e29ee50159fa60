"""HeartbeatInterval has one reader (``Config.heartbeat_interval``): the agents beat at it
and the controller's grace periods count in it, so the two cannot disagree."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from muster.core.config import parse_config
from muster.ctld.reconfig_plan import InUse, plan
from muster.ctld.state import ClusterState

BASE = "ClusterName=c\nNodeName=n1 CPUs=4\nPartitionName=p Nodes=n1 Default=YES\n"


@pytest.mark.parametrize(
    ("lines", "beat"),
    [
        ("", 60.0),  # a fifth of Slurm's default SlurmdTimeout (300)
        ("SlurmdTimeout=20\n", 4.0),
        ("SlurmdTimeout=3\n", 1.0),  # at least a second
        ("HeartbeatInterval=7.5\nSlurmdTimeout=20\n", 7.5),
        ("HeartbeatInterval=0\nSlurmdTimeout=20\n", 4.0),  # not a positive number: the default
        ("HeartbeatInterval=-2\nSlurmdTimeout=20\n", 4.0),
        ("HeartbeatInterval=soon\nSlurmdTimeout=20\n", 4.0),
    ],
)
def test_the_beat_is_the_keys_positive_value_else_a_fifth_of_slurmd_timeout(lines: str, beat: float) -> None:
    assert parse_config(BASE + lines, "slurm.conf").heartbeat_interval == beat


def test_the_agent_the_controller_and_a_reconfigure_count_in_the_same_beat() -> None:
    from muster.agent.daemon import heartbeat_interval

    running = parse_config(BASE + "HeartbeatInterval=9\nSlurmdTimeout=100\n", "slurm.conf")
    controller = ClusterState.heartbeat_interval.fget(SimpleNamespace(config=running))  # type: ignore[attr-defined]
    assert heartbeat_interval(running) == controller == 9.0
    shorter = parse_config(BASE + "HeartbeatInterval=9\nSlurmdTimeout=15\n", "slurm.conf")
    (refusal,) = plan(running, shorter, InUse()).refusals
    assert "two heartbeats" in refusal and "(9s each" in refusal


def test_a_bad_value_counts_as_the_default_for_a_reconfigure_too() -> None:
    # the agents beat every 4 s (20 / 5) whatever "-2" says: a SlurmdTimeout of 6 is refused
    running = parse_config(BASE + "HeartbeatInterval=-2\nSlurmdTimeout=20\n", "slurm.conf")
    fresh = parse_config(BASE + "HeartbeatInterval=-2\nSlurmdTimeout=6\n", "slurm.conf")
    (refusal,) = plan(running, fresh, InUse()).refusals
    assert "(4s each" in refusal
