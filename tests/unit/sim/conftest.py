"""Small synthetic traces written into tmp files, for the simulator's tests."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

import pytest


def _swf_line(
    job: int,
    submit: float,
    run: float,
    procs: int,
    req: float = -1,
    *,
    wait: float = -1,
    status: int = 1,
    user: int = 1,
    req_procs: int | None = None,
) -> str:
    """One SWF record (18 fields), unknowns as -1."""
    fields = [
        job,
        submit,
        wait,
        run,
        procs,
        -1,
        -1,
        procs if req_procs is None else req_procs,
        req,
        -1,
        status,
        user,
        1,
        -1,
        -1,
        -1,
        -1,
        -1,
    ]
    return " ".join(str(f) for f in fields)


@pytest.fixture
def swf_line() -> Callable[..., str]:
    """``swf_line(job, submit, run, procs, req, wait=, status=, user=, req_procs=)``."""
    return _swf_line


@pytest.fixture
def write_swf(tmp_path: pathlib.Path) -> Callable[..., str]:
    """``write_swf([(submit, run, procs, req), ...], max_procs=4)`` -> path of an SWF file."""

    def write(rows: Sequence[tuple[float, float, int, float]], max_procs: int = 4, name: str = "t.swf") -> str:
        lines = [f"; MaxProcs: {max_procs}", f"; MaxNodes: {max_procs}", ";"]
        lines += [_swf_line(i + 1, *row) for i, row in enumerate(rows)]
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    return write


@pytest.fixture
def write_text(tmp_path: pathlib.Path) -> Callable[[str, str], str]:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write
