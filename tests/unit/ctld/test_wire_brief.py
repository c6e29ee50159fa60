"""squeue's lighter listing (``GET /v1/jobs?view=brief``) shows exactly what the full one
does: every column, filter, sort key and the merging of array rows, for jobs in every state."""

from __future__ import annotations

import pathlib

import pytest

from muster.cli import squeue, squeue_filters
from muster.core.arrays import JobRef
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store
from muster.ctld.wire import job_wire
from muster.slurm import squeue_fields
from muster.slurm.jobarrays import job_id_text, merge_array_rows

CONF = """
ClusterName=t
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:a100:8 Features=ib
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


class _Start:
    def __init__(self, job_id: int, nodes: list[str], gpus: int) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "gpu", False
        self.alloc = [NodeAlloc(n, 4, 1000, list(range(gpus))) for n in nodes]


@pytest.fixture
def jobs(tmp_path: pathlib.Path) -> list:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "db")), ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    base = {"script": "#!/bin/sh\n", "workdir": "/w"}
    running = ctl.queue.submit(
        JobSpec(
            name="train",
            gpus_per_node=2,
            gpu_type="a100",
            comment="c",
            constraint="ib",
            min_nodes=2,
            ntasks=4,
            cpus_per_task=2,
            mem_per_cpu=500,
            **base,
        ),
        ALICE,
    )
    ctl.launches.apply_starts([_Start(running.job_id, ["node1", "node2"], 2)], 1000.0)
    failed = ctl.queue.submit(JobSpec(name="bad", exclusive=True, nodelist=["node3"], **base), ROOT)
    ctl.launches.apply_starts([_Start(failed.job_id, ["node3"], 0)], 1000.0)
    ctl.launches.job_done({"job_id": failed.job_id, "node": "node3", "restart_count": 0, "exit_code": 3})
    ctl.queue.submit(
        JobSpec(
            name="arr",
            array="0-5%2",
            hold=True,
            nice=10,
            exclude=["node4"],
            dependency=f"afterok:{running.job_id}",
            **base,
        ),
        ALICE,
    )
    ctl.queue.submit(JobSpec(name="later", begin_time=5000.0, mem_per_node=2048, time_limit=600, **base), ROOT)
    gone = ctl.queue.submit(JobSpec(name="gone", **base), ALICE)
    ctl.queue.cancel(gone, ALICE)
    return list(ctl.jobs.values())


def _both(jobs: list, now: float = 1030.0) -> tuple[list[dict], list[dict]]:
    return [job_wire(j, now) for j in jobs], [job_wire(j, now, brief=True) for j in jobs]


def test_every_column_reads_the_same_from_both_views(jobs: list) -> None:
    full, brief = _both(jobs)
    columns = {f"%{k}": fn for k, (_h, fn, _cut) in squeue_fields.FIELDS.items()}
    columns |= {name: fn for name, (_h, fn) in squeue_fields.EXTRA_FIELDS.items() if name not in ("stdout", "stderr")}
    for f, b in zip(full, brief, strict=True):
        for name, fn in columns.items():
            assert fn(b) == fn(f), (name, f["job_id"])  # type: ignore[operator]
        for key, fn in squeue_filters.SORT_KEYS.items():
            assert fn(b) == fn(f), (key, f["job_id"])  # type: ignore[operator]
    assert len(brief[0]) < len(full[0])


def test_filters_and_array_merging_agree(jobs: list) -> None:
    full, brief = _both(jobs)
    first = next(j["array_job_id"] for j in full if j.get("array_job_id"))
    filters = squeue_filters.Filters()
    variants = {
        "default": {},
        "all": {"states": None},
        "ids": {"job_ids": [JobRef(first, None)], "states": None},
        "users": {"users": ["alice"]},
        "names": {"names": ["arr", "train"]},
        "accounts": {"accounts": ["alice"]},
        "qos": {"qos": ["normal"]},
        "nodes": {"nodes": {"node2"}},
        "failed": {"states": {"FAILED"}},
    }
    for name, attrs in variants.items():
        filters = squeue_filters.Filters()
        for k, v in attrs.items():
            setattr(filters, k, v)
        assert [filters.keep(j) for j in brief] == [filters.keep(j) for j in full], name
    rendered = [job_id_text(j) for j in merge_array_rows(full)]
    assert [job_id_text(j) for j in merge_array_rows(brief)] == rendered
    assert f"{first}_[0-5%2]" in rendered


@pytest.mark.parametrize(
    ("argv", "brief"),
    [([], True), (["-u", "root", "-o", "%i %j"], True), (["--json"], False), (["-O", "JobID,STDOUT"], False)],
)
def test_squeue_asks_for_the_brief_view_unless_it_needs_more(argv: list[str], brief: bool) -> None:
    req = squeue.parse_args(argv, {})
    assert not isinstance(req, str)
    assert ("view=brief" in squeue.listing_query(req)) is brief
