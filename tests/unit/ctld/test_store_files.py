"""The store's files are private whatever the umask (``ctld.store.private_files``): the
database, its ``-wal`` and ``-shm`` are 0600, also when an older muster left them 0644."""

from __future__ import annotations

import os
import pathlib
import stat

from muster.ctld.store import Store


def modes(db: pathlib.Path) -> dict[str, int]:
    return {
        p.name: stat.S_IMODE(p.stat().st_mode)
        for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
        if p.exists()
    }


def test_a_new_store_is_0600_under_umask_000(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "state" / "muster.db"
    old = os.umask(0)
    try:
        store = Store(str(db))
        store.db.execute("INSERT INTO meta VALUES ('x', 'y')")
        try:
            assert modes(db) == {"muster.db": 0o600, "muster.db-wal": 0o600, "muster.db-shm": 0o600}
        finally:
            store.close()
    finally:
        os.umask(old)


def test_files_an_older_muster_left_readable_are_made_private(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "muster.db"
    old = os.umask(0o022)
    try:
        Store(str(db)).close()
        for name in (db, db.with_name("muster.db-wal"), db.with_name("muster.db-shm")):
            name.touch()
            name.chmod(0o644)
        Store(str(db)).close()
    finally:
        os.umask(old)
    assert set(modes(db).values()) == {0o600}
