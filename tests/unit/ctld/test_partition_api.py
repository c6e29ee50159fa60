"""scontrol create/delete PartitionName (scontrol(1)): a partition made at run time is
applied like a reconfigured one, kept in the store across a restart and a reconfigure, and
refused with Slurm's words (an existing name, an unknown node or key, a partition in use, a
caller who is no administrator)."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import add_partitions, parse_config
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.partition_api import create, delete
from muster.ctld.partitions import created_lines, with_created
from muster.ctld.reconfig import reconfigure
from muster.ctld.store import Store
from muster.ctld.view import build_snapshot

CONF = """\
ClusterName=t
NodeName=node[1-4] CPUs=4 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES State=UP MaxTime=60
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


def _controller(tmp_path: pathlib.Path) -> Controller:
    path = tmp_path / "muster.conf"
    if not path.exists():
        path.write_text(CONF)
    store = Store(str(tmp_path / "m.db"))
    c = Controller(with_created(parse_config(path.read_text(), str(path)), store), store, ManualClock(1000.0))
    c.load()
    return c


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    return _controller(tmp_path)


def test_a_created_partition_is_in_force_at_once(ctl: Controller) -> None:
    create(ctl, ROOT, "extra", {"Nodes": "node[1-2]", "State": "UP", "Default": "NO", "MaxTime": "30"})
    part = ctl.config.partition("extra")
    assert part is not None and part.nodes == ["node1", "node2"] and part.max_time == 1800
    assert not part.default and ctl.config.default_partition().name == "p"  # type: ignore[union-attr]
    assert sorted(ctl.nodes["node1"].partitions) == ["extra", "p"]
    assert ctl.nodes["node3"].partitions == ["p"]
    job = ctl.queue.submit(JobSpec(partitions=["extra"], script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    assert job.partition == "extra"
    assert any(j.partition == "extra" for j in build_snapshot(ctl).pending)


def test_it_survives_a_restart_and_a_reconfigure(tmp_path: pathlib.Path) -> None:
    c = _controller(tmp_path)
    create(c, ROOT, "kept", {"Nodes": "node3"})
    c.store.close()
    again = _controller(tmp_path)  # a new controller on the same store
    assert again.config.partition("kept") is not None and again.config.partition("kept").nodes == ["node3"]  # type: ignore[union-attr]
    reconfigure(again)
    assert again.config.partition("kept") is not None
    # the file now defines it too: the file's wins, and nothing fails
    pathlib.Path(again.config.path).write_text(CONF + "PartitionName=kept Nodes=node4\n")
    reconfigure(again)
    assert again.config.partition("kept").nodes == ["node4"]  # type: ignore[union-attr]
    again.store.close()


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("p", {"Nodes": "node1"}, "Invalid partition name specified"),
        ("DEFAULT", {"Nodes": "node1"}, "Invalid partition name specified"),
        ("x", {"Nodes": "nodeX"}, "Invalid node name specified"),
        ("x", {"Nodes": "node[1-9]"}, "Invalid node name specified"),
        ("x", {"Bogus": "1"}, "Update of this parameter is not supported: Bogus=1"),
        ("x", {"MaxTime": "xx"}, "bad MaxTime 'xx'"),
        ("x", {"State": "SLEEPY"}, "bad partition State"),
    ],
)
def test_bad_requests_change_nothing(ctl: Controller, name: str, params: dict[str, str], message: str) -> None:
    before = ctl.config
    with pytest.raises(InvalidRequest, match=message):
        create(ctl, ROOT, name, params)
    assert ctl.config is before and created_lines(ctl.store) == []


def test_only_administrators(ctl: Controller) -> None:
    with pytest.raises(PermissionDenied, match="Invalid user id"):
        create(ctl, ALICE, "mine", {"Nodes": "node1"})
    create(ctl, ROOT, "mine", {"Nodes": "node1"})
    with pytest.raises(PermissionDenied, match="Invalid user id"):
        delete(ctl, ALICE, "mine")
    assert ctl.config.partition("mine") is not None


def test_delete_is_refused_while_jobs_use_it(ctl: Controller) -> None:
    create(ctl, ROOT, "busy", {"Nodes": "node[1-2]"})
    job = ctl.queue.submit(JobSpec(partitions=["busy"], script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    with pytest.raises(InvalidRequest, match="^Partition is in use$"):
        delete(ctl, ROOT, "busy")
    assert ctl.config.partition("busy") is not None
    ctl.queue.cancel(job, ALICE)
    assert ctl.jobs[job.job_id].state.is_terminal
    delete(ctl, ROOT, "busy")
    assert ctl.config.partition("busy") is None and created_lines(ctl.store) == []
    assert ctl.nodes["node1"].partitions == ["p"]


def test_delete_of_unknown_or_file_partitions(ctl: Controller) -> None:
    with pytest.raises(InvalidRequest, match="^Invalid partition name specified$"):
        delete(ctl, ROOT, "nosuch")
    with pytest.raises(InvalidRequest, match="defined in .*muster.conf: remove it there"):
        delete(ctl, ROOT, "p")
    assert ctl.config.partition("p") is not None


def test_add_partitions_keeps_the_file_config_whole() -> None:
    base = parse_config(CONF, "/etc/muster.conf")
    fresh = add_partitions(base, ["PartitionName=b Nodes=node[1-2] MaxTime=10"])
    assert fresh.path == "/etc/muster.conf" and [p.name for p in fresh.partitions] == ["p", "b"]
    assert [p.name for p in base.partitions] == ["p"]  # untouched
    with pytest.raises(Exception, match="not a PartitionName line"):
        add_partitions(base, ["NodeName=x CPUs=1"])


def test_a_restarted_controller_app_has_it(tmp_path: pathlib.Path) -> None:
    from muster.ctld.app import CtldApp

    path = tmp_path / "muster.conf"
    path.write_text(CONF + f"StateSaveLocation={tmp_path}\n")
    app = CtldApp(parse_config(path.read_text(), str(path)), b"k" * 32, ManualClock(1000.0))
    app.use_config(create(app.controller, ROOT, "kept", {"Nodes": "node[2-3]", "MaxTime": "5"}))
    assert app.config.partition("kept") is not None
    app.store.close()
    again = CtldApp(parse_config(path.read_text(), str(path)), b"k" * 32, ManualClock(2000.0))
    part = again.config.partition("kept")
    assert part is not None and part.nodes == ["node2", "node3"] and part.max_time == 300
    assert again.controller.config is again.config
    assert sorted(again.controller.nodes["node2"].partitions) == ["kept", "p"]
    again.store.close()
