"""The security suite's world: one local cluster with PrivateData and small caps, and two
unprivileged users (alice and bob) created for it when the suite runs as root."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape

ALICE, BOB = "mustersec-alice", "mustersec-bob"

SETTINGS = {
    "PrivateData": "jobs,usage,accounts,users",
    "SchedulerParameters": "max_script_size=4096,max_submit_jobs_per_user=5",
    "MaxJobCount": "80",
    "MaxArraySize": "40",
}


@dataclass
class Users:
    alice: int
    bob: int


@pytest.fixture(scope="session")
def users() -> Users:
    if os.geteuid() != 0:
        pytest.skip("the security suite runs as root: it creates two unprivileged users")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("the security suite needs useradd and setpriv to act as other users")
    return Users(ensure_user(ALICE), ensure_user(BOB))


@pytest.fixture(scope="module")
def world(users: Users) -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000), settings=dict(SETTINGS))
    h.up()
    try:
        yield h
    finally:
        h.down()
