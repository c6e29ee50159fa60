"""The PostgreSQL store's connection string from muster.conf: the password from a file only
its owner can read (AccountingStoragePassFile), never from a world-readable muster.conf."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from muster.core.config import ConfigError, parse_config
from muster.ctld.store_pg import dsn_from_config, redact

BASE = """
ClusterName=t
NodeName=node1 CPUs=2 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES
"""


def conf(tmp_path: Path, extra: str, mode: int = 0o644) -> Path:
    path = tmp_path / "muster.conf"
    path.write_text(BASE + extra)
    os.chmod(path, mode)
    return path


def dsn(path: Path) -> str | None:
    return dsn_from_config(parse_config(path.read_text(), str(path)))


def secret(tmp_path: Path, text: str = "s3cr3t pass\n", mode: int = 0o600) -> Path:
    path = tmp_path / "dbpass"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_the_password_comes_from_its_own_file(tmp_path: Path) -> None:
    pw = secret(tmp_path)
    keys = conf(
        tmp_path,
        "AccountingStorageType=accounting_storage/postgresql\nAccountingStorageUser=muster\n"
        f"AccountingStoragePassFile={pw}\n",
    )
    assert dsn(keys) == "host=localhost port=5432 user=muster password='s3cr3t pass' dbname=muster"
    url = conf(
        tmp_path, f"AccountingStorageURL=postgresql://muster@db.example:5433/acct\nAccountingStoragePassFile={pw}\n"
    )
    got = dsn(url)
    assert got is not None
    assert "password='s3cr3t pass'" in got and "host=db.example" in got and "dbname=acct" in got
    assert "s3cr3t" not in redact(got)


def test_without_a_password_libpq_finds_its_own(tmp_path: Path) -> None:
    # PGPASSFILE or ~/.pgpass: psycopg (libpq) reads them when the string carries no password
    assert dsn(conf(tmp_path, "AccountingStorageURL=postgresql://muster@db:5432/muster\n")) == (
        "postgresql://muster@db:5432/muster"
    )


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_password_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    pw = secret(tmp_path, mode=mode)
    path = conf(tmp_path, f"AccountingStorageURL=postgresql://muster@db/muster\nAccountingStoragePassFile={pw}\n")
    with pytest.raises(ConfigError, match=rf"AccountingStoragePassFile={pw} is readable by others \(mode 0{mode:o}\)"):
        dsn(path)


@pytest.mark.parametrize(
    ("content", "error"), [("", "is empty"), ("\n", "is empty"), (None, "No such file or directory")]
)
def test_an_empty_or_missing_password_file_is_refused(tmp_path: Path, content: str | None, error: str) -> None:
    pw = secret(tmp_path, content) if content is not None else tmp_path / "nosuch"
    path = conf(tmp_path, f"AccountingStorageURL=postgresql://muster@db/muster\nAccountingStoragePassFile={pw}\n")
    with pytest.raises(ConfigError, match=error):
        dsn(path)


@pytest.mark.parametrize(
    "extra",
    [
        "AccountingStorageType=accounting_storage/postgresql\nAccountingStoragePass=hunter2\n",
        "AccountingStorageURL=postgresql://muster:hunter2@db:5432/muster\n",
        'AccountingStorageURL="host=db password=hunter2 dbname=muster"\n',
    ],
)
def test_a_password_in_a_world_readable_muster_conf_is_refused(tmp_path: Path, extra: str) -> None:
    path = conf(tmp_path, extra)
    with pytest.raises(ConfigError, match="must not be written in a file every user can read .mode 0644."):
        dsn(path)
    os.chmod(path, 0o640)  # a site that keeps muster.conf from its users may
    assert "hunter2" in (dsn(path) or "")


def test_redact_hides_every_spelling_of_a_password() -> None:
    assert redact("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert redact("host=h password='a b' dbname=d") == "host=h password=*** dbname=d"
    assert redact("host=h password = x dbname=d") == "host=h password=*** dbname=d"
