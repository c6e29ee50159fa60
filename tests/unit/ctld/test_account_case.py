"""Account names in lower case, as Slurm keeps them (checked against Slurm 22.05: sacctmgr
``add account H6Probe Description="H6 Mixed" Organization=OrgX`` stores ``h6probe``,
``h6 mixed``, ``orgx``; ``sbatch -A H6PROBE`` runs under ``h6probe``; ``squeue -A`` and
``sacct -A`` match in any case). User names are kept in lower case too, as sacctmgr(1) says,
unless slurmdbd.conf(5)'s ``Parameters=PreserveCaseUser`` (or ``PreserveCaseAll``): muster.conf's
``DbdParameters``, muster's controller being its own slurmdbd. QOS names are kept as given."""

from __future__ import annotations

import pathlib

import pytest

from muster.cli.sacctmgr import Printer, parse_command, show
from muster.cli.squeue_filters import Filters
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.ctld.assoc import AssocDB, Result, preserves_user_case
from muster.ctld.controller import Controller, Identity
from muster.ctld.records import Query
from muster.ctld.store import Store

ROOT = Identity(0, 0, "root", "root", "h", admin=True)
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
CONF = """ClusterName=t
AccountingStorageEnforce=associations
NodeName=n1 CPUs=4 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES
"""


def _apply(
    db: AssocDB,
    verb: str,
    entity: str,
    names: list[str],
    where: dict[str, list[str]] | None = None,
    set: dict[str, str] | None = None,  # noqa: A002
) -> Result:
    return db.apply(
        {"verb": verb, "entity": entity, "names": names, "where": where or {}, "set": set or {}}, "root", True
    )


def test_sacctmgr_keeps_accounts_their_description_and_organization_in_lower_case() -> None:
    db = AssocDB("c")
    db.bootstrap()
    r = _apply(db, "add", "account", ["H6Probe"], set={"Description": "H6 Mixed", "Organization": "OrgX"})
    assert "  h6probe" in r.lines and set(db.accounts) == {"root", "h6probe"}
    acct = db.accounts["h6probe"]
    assert (acct.description, acct.organization) == ("h6 mixed", "orgx")
    _apply(db, "add", "account", ["Child"], set={"Parent": "H6PROBE"})
    assert db.assoc("child") is not None and db.assoc("child").parent == "h6probe"  # type: ignore[union-attr]
    _apply(db, "add", "user", ["Alice"], set={"Account": "H6Probe", "DefaultAccount": "H6PROBE"})
    assert db.users["alice"].default_account == "h6probe" and "Alice" not in db.users
    assert db.assoc("h6probe", "Alice") is not None and db.assoc("h6probe", "alice") is not None
    _apply(db, "modify", "account", [], where={"Name": ["H6PROBE"]}, set={"MaxJobs": "3"})
    assert db.inherited(db.assoc("h6probe"), "max_jobs") == 3  # type: ignore[arg-type]
    assert _apply(db, "add", "account", ["h6probe"]).nothing  # the same account


def test_a_job_submitted_with_a_capitalised_account_runs_under_its_lower_case_name(tmp_path: pathlib.Path) -> None:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    assert ctl.accounting is not None
    ctl.accounting.sacctmgr({"verb": "add", "entity": "account", "names": ["Proj"]}, ROOT, 1000.0)
    ctl.accounting.sacctmgr(
        {"verb": "add", "entity": "user", "names": ["alice"], "set": {"Account": "PROJ"}}, ROOT, 1000.0
    )
    job = ctl.queue.submit(JobSpec(name="x", script="#!/bin/sh\n", account="PrOj"), ALICE)
    assert job.spec.account == "proj"
    for asked in (["PROJ"], ["proj"]):
        found = ctl.accounting.jobs(Query(accounts=asked), 1000.0)
        assert [r["job_id"] for r in found] == [job.job_id] and found[0]["account"] == "proj"


def test_squeue_and_sacctmgr_filters_match_any_case() -> None:
    f = Filters()
    f.accounts = ["PROJ"]
    assert f.keep({"account": "proj", "user": "alice", "state": "PENDING"})
    objects = {"cluster": "c", "accounts": [{"name": "root"}, {"name": "proj"}], "users": [], "assocs": []}
    lines = show(parse_command(["show", "account", "PROJ", "format=account"]), objects, Printer(parsable=True))
    assert lines[1:] == ["proj"]


def test_user_names_are_lowercased_unless_preserve_case_user() -> None:
    db = AssocDB("c")
    db.bootstrap()
    _apply(db, "add", "account", ["proj"])
    _apply(db, "add", "user", ["BOB"], set={"Account": "proj", "AdminLevel": "Operator"})
    assert "bob" in db.users and db.default_account("Bob") == "proj" and db.admin_level("BOB") == "Operator"
    _apply(db, "modify", "user", [], where={"Name": ["Bob"]}, set={"MaxJobs": "2"})
    assert db.inherited(db.assoc("proj", "bob"), "max_jobs") == 2  # type: ignore[arg-type]
    assert _apply(db, "add", "user", ["bob"], set={"Account": "proj"}).nothing  # the same user
    _apply(db, "delete", "user", ["Bob"])
    assert "bob" not in db.users

    kept = AssocDB("c")
    kept.bootstrap()
    kept.preserve_case_user = True
    _apply(kept, "add", "account", ["proj"])
    _apply(kept, "add", "user", ["BOB"], set={"Account": "proj"})
    assert "BOB" in kept.users and kept.assoc("proj", "BOB") is not None and kept.assoc("proj", "bob") is None


@pytest.mark.parametrize(
    ("params", "kept"),
    [(None, False), ("PreserveCaseUser", True), ("preservecaseall", True), ("PreserveCaseResource", False)],
)
def test_the_switch_is_read_from_the_config(tmp_path: pathlib.Path, params: str | None, kept: bool) -> None:
    conf = CONF + (f"DbdParameters={params}\n" if params else "")
    ctl = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    assert ctl.accounting is not None and ctl.accounting.db.preserve_case_user is kept
    assert preserves_user_case(params) is kept
