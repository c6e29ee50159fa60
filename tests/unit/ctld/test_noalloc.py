"""srun --no-allocate (srun(1) -Z): a step on named nodes without a job, for root and
SlurmUser only; the agents' reports of it are not strays while it runs."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.ctld.actions import Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.noalloc import NOALLOC_BASE, NoAllocSteps, block_layout
from muster.ctld.store import Store
from muster.protocol.stepcred import verify_grant

KEY = b"k" * 32
CONF = """\
ClusterName=t
SlurmUser=slurm
NodeName=node[1-3] CPUs=4 RealMemory=1000 Gres=gpu:2
PartitionName=p Nodes=ALL Default=YES
"""
ROOT = Identity(0, 0, "root", "root", "h", admin=True)
SLURM = Identity(64030, 64030, "slurm", "slurm", "h", admin=True)
OPERATOR = Identity(1002, 1002, "op", "op", "h", admin=True)  # AdminUsers: no -Z (srun(1))
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, str(tmp_path / "m.conf")), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    return c


def test_block_layout() -> None:
    assert block_layout(2, None, None) == [[0], [1]]
    assert block_layout(2, 3, None) == [[0, 1], [2]]
    assert block_layout(3, None, 2) == [[0, 1], [2, 3], [4, 5]]
    assert block_layout(3, 3, 2) == [[0, 1], [2], []]
    with pytest.raises(InvalidRequest):
        block_layout(2, 5, 2)


def test_root_and_slurmuser_get_a_signed_step_without_a_job(ctl: Controller) -> None:
    book = NoAllocSteps(ctl, KEY)
    for who in (ROOT, SLURM):
        answer = book.answer(who, {"nodes": ["node2", "node3"], "ntasks": 3, "argv": ["hostname"]})
        grant = verify_grant(KEY, answer["grant"], answer["sig"], 1000.0)
        job_id = answer["step"]["job_id"]
        assert job_id >= NOALLOC_BASE and job_id not in ctl.jobs  # no job is made
        assert grant["job_id"] == job_id and grant["uid"] == who.uid and grant["step_id"] == 0
        assert grant["step"]["nodes"] == ["node2", "node3"] and grant["step"]["tasks"] == [[0, 1], [2]]
        assert grant["job"]["cpus"] == [4, 4] and grant["job"]["gpu_ids"] == [[0, 1], [0, 1]]
        assert [n["name"] for n in answer["nodes"]] == ["node2", "node3"]
        assert ctl.agents.unallocated[job_id] == {"node2", "node3"}
    assert not ctl.jobs


@pytest.mark.parametrize("who", [ALICE, OPERATOR])
def test_anyone_else_is_refused(ctl: Controller, who: Identity) -> None:
    with pytest.raises(PermissionDenied, match="Access/permission denied"):
        NoAllocSteps(ctl, KEY).answer(who, {"nodes": ["node1"]})
    assert not ctl.agents.unallocated


def test_nodes_must_be_named_and_known(ctl: Controller) -> None:
    book = NoAllocSteps(ctl, KEY)
    with pytest.raises(InvalidRequest, match="must specify a node list with -Z, --no-allocate."):
        book.answer(ROOT, {"nodes": []})
    with pytest.raises(InvalidRequest, match="Can't find an address for host node9"):
        book.answer(ROOT, {"nodes": ["node1", "node9"]})


def test_its_job_is_no_stray_while_it_runs_and_ends_with_srun(ctl: Controller) -> None:
    book = NoAllocSteps(ctl, KEY)
    job_id = book.answer(ROOT, {"nodes": ["node1", "node2"]})["step"]["job_id"]
    node1, node3 = ctl.nodes["node1"], ctl.nodes["node3"]
    assert ctl.agents._stale_jobs(node1, [(job_id, 0)]) == []
    assert ctl.agents._stale_jobs(node3, [(job_id, 0)]) == [job_id]  # not placed there
    assert ctl.agents._stale_jobs(node1, [(job_id + 1, 0)]) == [job_id + 1]
    with pytest.raises(PermissionDenied):
        book.done(ALICE, job_id)
    assert book.done(ROOT, job_id) == [Terminate(job_id, 0, ["node1", "node2"], "no_allocate")]
    assert ctl.agents._stale_jobs(node1, [(job_id, 0)]) == [job_id]
    assert book.done(ROOT, job_id) == []


def test_a_node_that_ended_it_after_srun_went_away(ctl: Controller) -> None:
    book = NoAllocSteps(ctl, KEY)
    job_id = book.answer(ROOT, {"nodes": ["node1", "node2"]})["step"]["job_id"]
    assert book.gone(job_id, "node1") == [Terminate(job_id, 0, ["node1"], "no_allocate")]
    assert book.gone(job_id, "node1") == []
    assert book.gone(job_id, "node2") == [Terminate(job_id, 0, ["node2"], "no_allocate")]
    assert job_id not in ctl.agents.unallocated
