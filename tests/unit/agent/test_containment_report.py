"""What a node says confines its jobs (``cgroups.containment``), as it registers it."""

from __future__ import annotations

import pytest

from muster.agent import cgroups
from muster.agent.cgroups import CgroupConf


@pytest.mark.parametrize(
    ("version", "conf", "text"),
    [
        ("v1", CgroupConf(), "cgroup/v1:freezer"),
        ("v2", CgroupConf(), "cgroup/v2:freeze"),
        (
            "v1",
            CgroupConf(constrain_ram=True, constrain_swap=True, constrain_devices=True, constrain_cores=True),
            "cgroup/v1:freezer,memory,swap,devices,cores",
        ),
        ("v2", CgroupConf(constrain_ram=True, constrain_devices=True), "cgroup/v2:freeze,memory,devices(ebpf)"),
    ],
)
def test_containment_names_the_version_and_each_active_mechanism(version: str, conf: CgroupConf, text: str) -> None:
    assert cgroups.containment(version, conf) == text
