"""The house rules, checked: layers point one way and only core/clock.py reads time."""

from __future__ import annotations

import ast
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "muster"

# package -> muster packages it must not import
FORBIDDEN = {
    "core": {"sched", "ctld", "agent", "cli", "sim", "protocol", "cluster"},
    "sched": {"ctld", "agent", "cli", "sim", "protocol", "cluster"},
    "protocol": {"ctld", "agent", "cli", "sched", "sim", "cluster"},
    "cli": {"ctld", "sched", "agent"},
    "sim": {"ctld", "agent", "cli"},
    "agent": {"ctld", "sched", "cli", "sim"},
    "ctld": {"agent", "cli", "sim"},
}
IMPURE_MODULES = {"asyncio", "sqlite3", "socket", "subprocess", "threading"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layers_point_one_way() -> None:
    broken = []
    for package, banned in FORBIDDEN.items():
        for path in (SRC / package).rglob("*.py"):
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] == "muster" and len(parts) > 1 and parts[1] in banned:
                    broken.append(f"{path.relative_to(SRC)} imports {name}")
    assert not broken, "\n".join(broken)


def test_core_and_sched_do_no_io() -> None:
    broken = []
    for package in ("core", "sched"):
        for path in (SRC / package).rglob("*.py"):
            for name in _imports(path):
                if name.split(".")[0] in IMPURE_MODULES:
                    broken.append(f"{path.relative_to(SRC)} imports {name}")
    assert not broken, "\n".join(broken)


def test_only_the_clock_module_reads_wall_time() -> None:
    pattern = re.compile(r"\btime\.(time|monotonic|perf_counter)\(|datetime\.now\(|datetime\.utcnow\(")
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("core/clock.py", "progress.py") or rel.startswith(("cluster/", "cli/")):
            # the local-cluster tool and commands time their own waits, not the domain;
            # muster.progress runs inside jobs and stamps their reports
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
