"""sched is pure: it imports only core and itself, no I/O or concurrency modules, and
never reads the clock (time is a parameter)."""

from __future__ import annotations

import ast
from pathlib import Path

import muster.sched

SCHED = Path(muster.sched.__file__).parent
FORBIDDEN_MODULES = {
    "asyncio", "sqlite3", "socket", "subprocess", "threading", "time", "datetime", "os",
    "io", "random", "muster.ctld", "muster.agent", "muster.cli", "muster.protocol",
    "muster.sim",
}  # fmt: skip
# sched.testing is a helper for tests; it may use nothing more than sched itself either.


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_sched_imports_nothing_that_does_io_or_reads_the_clock() -> None:
    for path in sorted(SCHED.glob("*.py")):
        for name in _imports(path):
            top = {name, name.split(".")[0], ".".join(name.split(".")[:2])}
            assert not top & FORBIDDEN_MODULES, f"{path.name} imports {name}"
            if name.startswith("muster."):
                assert name.startswith(("muster.core", "muster.sched")), f"{path.name}: {name}"


def test_sched_never_mentions_a_wall_clock_call() -> None:
    for path in sorted(SCHED.glob("*.py")):
        text = path.read_text()
        for call in ("time.time(", "time.monotonic(", "datetime.now(", "perf_counter("):
            assert call not in text, f"{path.name} calls {call}"
