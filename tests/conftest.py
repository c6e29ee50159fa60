"""Shared fixtures. Integration tests share one local cluster per session where isolation
allows (each test uses its own job ids and files); tests that break the cluster (killing
daemons) take a private one with ``private_cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape


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
