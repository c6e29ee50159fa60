"""A daemon's log file (``protocol.logjson``): created 0600 whatever the umask, reopened by
name after logrotate moved it away (SIGUSR2)."""

from __future__ import annotations

import logging
import os
import pathlib
import stat
from collections.abc import Iterator

import pytest

from muster.protocol.logjson import reopen_logs, setup_logging


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    for h in saved:
        root.addHandler(h)
    root.setLevel(level)


def test_the_log_file_is_private_and_reopened_after_a_move(tmp_path: pathlib.Path, root_handlers: None) -> None:
    path = tmp_path / "d.log"
    old = os.umask(0)
    try:
        setup_logging(None, daemon="testd", filename=str(path))
        log = logging.getLogger("testd")
        log.info("before")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        moved = tmp_path / "d.log.1"
        path.rename(moved)
        log.info("still the old file")
        assert reopen_logs() == [str(path)]
        log.info("after")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "before" in moved.read_text() and "still the old file" in moved.read_text()
    assert "after" in path.read_text() and "after" not in moved.read_text()


def test_an_existing_file_keeps_its_mode(tmp_path: pathlib.Path, root_handlers: None) -> None:
    path = tmp_path / "d.log"
    path.write_text("")
    path.chmod(0o640)  # the administrator's choice
    setup_logging(None, daemon="testd", filename=str(path))
    logging.getLogger("testd").info("x")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_no_file_nothing_to_reopen(root_handlers: None) -> None:
    setup_logging(None, daemon="testd")
    assert reopen_logs() == []
