"""Shared fixtures. Integration tests share one local cluster per session where isolation
allows (each test uses its own job ids and files); tests that break the cluster (killing
daemons) take a private one with ``private_cluster``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

# Every controller the tests start checks that the jobs' cached listing fragments are
# current against all of a job's fields, not only those it compares in production
# (ctld.listing): a field changed without a new version fails the request.
os.environ["MUSTER_CHECK_LISTING"] = "1"
# The command servers the suite's commands start (cli.cmdserver) leave a minute after its end.
os.environ.setdefault("MUSTER_CMD_SERVER_IDLE", "60")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=4, gpus_per_node=8, cpus_per_node=32, mem_per_node=128000))
    h.up()
    try:
        yield h
    finally:
        h.down()


@pytest.fixture
def private_cluster() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=4, cpus_per_node=8, mem_per_node=16000))
    h.up()
    try:
        yield h
    finally:
        h.down()
