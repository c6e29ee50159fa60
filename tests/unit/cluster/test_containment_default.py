"""``muster up`` confines jobs by default where the machine allows it (docs/containment.md)."""

from __future__ import annotations

import os
import pathlib

import pytest

from muster.cluster import local
from muster.cluster.local import ClusterShape, LocalCluster


def _create(tmp_path: pathlib.Path, overrides: dict[str, str] | None = None) -> tuple[str, str | None]:
    cluster = LocalCluster(str(tmp_path / "state"))
    cluster.create(ClusterShape(nodes=1, gpus_per_node=0), {"TLSType": "tls/none", **(overrides or {})})
    with open(cluster.conf_path) as f:
        conf = f.read()
    path = os.path.join(os.path.dirname(cluster.conf_path), "cgroup.conf")
    if not os.path.exists(path):
        return conf, None
    with open(path) as f:
        return conf, f.read()


def test_where_cgroups_are_usable_muster_up_turns_containment_on(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "cgroups_usable", lambda mount="/sys/fs/cgroup": True)
    conf, cgroup_conf = _create(tmp_path)
    assert "\nProctrackType=proctrack/cgroup\n" in conf and "\nTaskPlugin=task/cgroup\n" in conf
    assert cgroup_conf is not None and "\nConstrainRAMSpace=yes\n" in cgroup_conf


def test_where_they_are_not_or_the_admin_chose_nothing_is_written(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "cgroups_usable", lambda mount="/sys/fs/cgroup": False)
    conf, cgroup_conf = _create(tmp_path / "a")
    assert "ProctrackType" not in conf and cgroup_conf is None
    monkeypatch.setattr(local, "cgroups_usable", lambda mount="/sys/fs/cgroup": True)
    conf, cgroup_conf = _create(tmp_path / "b", {"ProctrackType": "proctrack/linuxproc"})
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin" not in conf and cgroup_conf is None


def test_cgroups_usable_reads_the_machine(tmp_path: pathlib.Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io\n")
    assert not local.cgroups_usable(str(v2))  # no memory controller delegated
    (v2 / "cgroup.controllers").write_text("cpu memory io\n")
    assert local.cgroups_usable(str(v2)) is (os.geteuid() == 0)
    assert not local.cgroups_usable(str(tmp_path / "none"))
