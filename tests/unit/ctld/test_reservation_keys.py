"""scontrol create reservation's keys and flags as scontrol(1)'s RESERVATIONS section
documents them: StartTime's forms, Duration's forms (seconds rounded up to a minute,
UNLIMITED), NodeCnt with a ``k`` suffix, key prefixes (``start=``), an empty ``Features=``,
Features restricting the nodes chosen by count, PartitionName alone taking the partition's
nodes, IGNORE_JOBS over busy nodes, SPEC_NODES on named nodes, and REPLACE_DOWN (the
default) swapping a DOWN node of a reservation chosen by count, MAINT and named nodes not."""

from __future__ import annotations

import pathlib
import time

import pytest

from muster.cli.common import CommandError
from muster.cli.reservation import UNLIMITED_DURATION, parse_words, spec_words
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec
from muster.core.states import JobState
from muster.ctld.actions import Launch
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.store import Store
from muster.sched import SchedConfig

NOW = 1_800_000_000.0
CONF = """
ClusterName=t
NodeName=node[1-4] CPUs=4 RealMemory=1000 Features=ib
NodeName=node[5-8] CPUs=4 RealMemory=1000 Features=eth,big
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE
PartitionName=half Nodes=node[1-4] MaxTime=INFINITE
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


# --- the command's words (cli.reservation.parse_words) ---


@pytest.mark.parametrize(
    ("word", "expect"),
    [
        ("StartTime=now", NOW),
        ("start=now", NOW),
        ("start=now+8day", NOW + 8 * 86400),
        ("StartTime=now+30minutes", NOW + 1800),
        ("StartTime=now+90", NOW + 90),  # seconds by default
        ("StartTime=now+2weeks", NOW + 14 * 86400),
    ],
)
def test_start_time_forms(word: str, expect: float) -> None:
    assert parse_words([word], NOW)["start_time"] == expect


def test_start_time_of_day_and_dates_are_in_the_future() -> None:
    for word in ("StartTime=teatime", "StartTime=midnight", "StartTime=tomorrow", "StartTime=10:00:00"):
        start = parse_words([word], NOW)["start_time"]
        assert isinstance(start, float) and NOW <= start <= NOW + 86400 + 3600
    start = parse_words(["StartTime=2027-03-01T08:00"], NOW)["start_time"]
    assert start == time.mktime((2027, 3, 1, 8, 0, 0, 0, 0, -1))


@pytest.mark.parametrize(
    ("value", "secs"),
    [
        ("30", 1800),  # minutes
        ("1:30", 120),  # minutes:seconds, seconds rounded up to the next minute
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-2:30", 86400 + 2 * 3600 + 1800),
        ("1-0:0:1", 86400 + 60),
        ("UNLIMITED", UNLIMITED_DURATION),
    ],
)
def test_duration_forms(value: str, secs: int) -> None:
    assert parse_words([f"Duration={value}"], NOW)["duration"] == secs


def test_node_count_takes_a_k_suffix_and_keys_take_prefixes() -> None:
    body = parse_words(["NodeCnt=2k", "user=root", "partition=p", "flags=", "Features="], NOW)
    assert body == {"node_cnt": 2048, "users": ["root"], "partition": "p", "flags": [], "features": ""}
    assert parse_words(["ReservationName=a", "Nodes=node[1-2]"], NOW) == {"name": "a", "nodes": ["node1", "node2"]}


@pytest.mark.parametrize(
    "word",
    ["NodeCnt=0", "NodeCnt=-1", "NodeCnt=k", "Duration=0", "Duration=1:2:3:4", "StartTime=yesterdayish", "Bogus=1"],
)
def test_bad_words_are_refused(word: str) -> None:
    with pytest.raises(CommandError):
        parse_words([word], NOW)


def test_create_takes_the_name_as_its_first_word_or_after_the_keyword() -> None:
    # scontrol(1): "scontrol create reservation ReservationName=x ..."; Slurm's own tests
    # also write "scontrol create reservationname=x ..." (no keyword before it)
    assert spec_words(["reservationname=resv1", "user=root"]) == ["reservationname=resv1", "user=root"]
    assert spec_words(["reservation", "ReservationName=a"]) == ["ReservationName=a"]
    assert spec_words(["res", "start=now"]) == ["start=now"]
    assert parse_words(spec_words(["reservationname=resv1", "start=now"]), NOW) == {"name": "resv1", "start_time": NOW}


def test_documented_keys_muster_lacks_say_so() -> None:
    with pytest.raises(CommandError, match="CoreCnt is not supported"):
        parse_words(["CoreCnt=4"], NOW)


# --- the controller's book (ctld.reservation_book) ---


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(NOW))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 0, "running": []})
    return c


def _create(ctl: Controller, **req: object) -> list[str]:
    req.setdefault("users", ["root"])
    req.setdefault("duration", 1800)
    return ctl.resv.create(ROOT, req).nodes


def _occupy(ctl: Controller, partition: str, nodes: int) -> None:
    spec = JobSpec(partitions=[partition], min_nodes=nodes, exclusive=True, script="#!/bin/sh\n", workdir="/tmp")
    job = ctl.queue.submit(spec, ALICE)
    for a in run_pass(ctl, SchedConfig.from_settings(ctl.config.settings), ctl.clock.now()).actions:
        if isinstance(a, Launch):
            ctl.launches.launch_done(a.job.job_id)
    assert job.state is JobState.RUNNING


def test_an_empty_features_is_no_restriction_and_features_choose_nodes(ctl: Controller) -> None:
    assert _create(ctl, node_cnt=2, features="") == ["node1", "node2"]
    assert _create(ctl, node_cnt=2, features="big") == ["node5", "node6"]
    assert _create(ctl, node_cnt=1, features="eth&big") == ["node7"]
    assert _create(ctl, node_cnt=1, features="ib|nothere") == ["node3"]
    with pytest.raises(InvalidRequest, match="busy"):
        _create(ctl, node_cnt=1, features="nothere")
    with pytest.raises(InvalidRequest, match="feature"):
        _create(ctl, node_cnt=1, features="[ib*2]")


def test_partition_alone_takes_all_its_nodes(ctl: Controller) -> None:
    assert _create(ctl, partition="half") == ["node1", "node2", "node3", "node4"]


def test_node_count_over_a_busy_partition_needs_ignore_jobs(ctl: Controller) -> None:
    _occupy(ctl, "half", 4)
    with pytest.raises(InvalidRequest, match="Requested nodes are busy"):
        _create(ctl, partition="half", node_cnt=2, features="")
    with pytest.raises(InvalidRequest, match="Requested nodes are busy"):
        _create(ctl, partition="half", nodes=["node1", "node2"])
    assert _create(ctl, name="exp", partition="half", nodes=["node1", "node2"], flags=["IGNORE_JOBS"]) == [
        "node1",
        "node2",
    ]
    ctl.resv.delete(ROOT, "exp")
    assert _create(ctl, partition="half", node_cnt=2, flags=["IGNORE_JOBS"], features="") == ["node1", "node2"]


def test_named_nodes_are_marked_spec_nodes(ctl: Controller) -> None:
    ctl.resv.create(ROOT, {"name": "a", "nodes": ["node7", "node8"], "users": ["root"], "duration": 60, "flags": []})
    ctl.resv.create(ROOT, {"name": "b", "node_cnt": 2, "users": ["root"], "duration": 60})
    assert ctl.reservations["a"].flags == ["SPEC_NODES"] and ctl.reservations["b"].flags == []


def test_unknown_flags_are_refused(ctl: Controller) -> None:
    with pytest.raises(InvalidRequest, match="Invalid flag"):
        _create(ctl, node_cnt=1, flags=["NOT_A_FLAG"])


def test_a_down_node_of_a_reservation_by_count_is_replaced_by_an_idle_one(ctl: Controller) -> None:
    _create(ctl, name="a", nodes=["node7", "node8"])
    assert _create(ctl, name="b", node_cnt=2, partition="p") == ["node1", "node2"]
    ctl.liveness.update_nodes(ROOT, ["node1"], "DOWN", "HOLD")
    assert ctl.resv.replace_nodes(ctl.clock.now()) == ["b"]
    assert ctl.reservations["b"].nodes == ["node2", "node3"]  # not node7/8: reservation a has them
    assert ctl.store.load_reservations()["b"]["nodes"] == ["node2", "node3"]  # committed
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []


@pytest.mark.parametrize("flags", [["MAINT"], ["STATIC_ALLOC"]])
def test_maint_and_static_alloc_keep_their_nodes(ctl: Controller, flags: list[str]) -> None:
    _create(ctl, name="m", node_cnt=2, flags=flags)
    ctl.liveness.update_nodes(ROOT, ["node1"], "DOWN", "HOLD")
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []
    assert ctl.reservations["m"].nodes == ["node1", "node2"]


def test_a_drained_node_is_replaced_too(ctl: Controller) -> None:
    _create(ctl, name="b", node_cnt=2)
    ctl.liveness.update_nodes(ROOT, ["node2"], "DRAIN", "disk")
    assert ctl.resv.replace_nodes(ctl.clock.now()) == ["b"]
    assert ctl.reservations["b"].nodes == ["node1", "node3"]


def test_a_node_not_registered_again_yet_keeps_its_place(ctl: Controller) -> None:
    _create(ctl, name="b", node_cnt=2)
    ctl.nodes["node1"].registered = False  # as after a controller restart, before its agent calls
    ctl.nodes["node1"].presumed = True
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []
    ctl.nodes["node1"].presumed = False  # UNKNOWN: never heard of since the start
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []


def test_named_nodes_are_not_replaced(ctl: Controller) -> None:
    _create(ctl, name="n", nodes=["node1", "node2"])
    ctl.liveness.update_nodes(ROOT, ["node1"], "DRAIN", "HOLD")
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []


def test_replace_also_swaps_nodes_running_jobs(ctl: Controller) -> None:
    _occupy(ctl, "half", 1)  # node1
    assert _create(ctl, name="r", partition="half", node_cnt=2, flags=["REPLACE", "IGNORE_JOBS"]) == ["node1", "node2"]
    _create(ctl, name="d", partition="half", node_cnt=2, flags=["REPLACE_DOWN", "IGNORE_JOBS"])  # node3, node4
    assert ctl.resv.replace_nodes(ctl.clock.now()) == []  # no idle node of the partition left
    ctl.resv.delete(ROOT, "d")
    assert ctl.resv.replace_nodes(ctl.clock.now()) == ["r"]
    assert ctl.reservations["r"].nodes == ["node2", "node3"]


def test_stored_form_stays_readable_by_older_and_newer_releases() -> None:
    from muster.ctld.reservations import Reservation

    plain = Reservation("a", 1.0, 2.0, ["node1"], ["root"])
    assert "features" not in plain.to_dict()  # what releases before Features= stored
    assert Reservation.from_dict(plain.to_dict()) == plain
    later = {**plain.to_dict(), "features": "ib", "from_a_later_release": 1}
    assert Reservation.from_dict(later).features == "ib"
