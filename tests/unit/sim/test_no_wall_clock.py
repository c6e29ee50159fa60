"""The simulator runs on virtual time only: a wall-clock read would make it lie."""

from __future__ import annotations

import pathlib
import re

SIM = pathlib.Path(__file__).resolve().parents[3] / "src" / "muster" / "sim"

WALL_CLOCK = re.compile(
    r"\btime\.(time|time_ns|monotonic|monotonic_ns|perf_counter|perf_counter_ns|process_time)\("
    r"|\bdatetime\.(now|utcnow|today)\(|\bdate\.today\(|\bfrom time import\b|\bimport time\b"
    r"|\bSystemClock\b"
)


def test_the_simulator_reads_no_wall_clock() -> None:
    files = sorted(SIM.rglob("*.py"))
    assert files, f"no source found under {SIM}"
    offenders = [
        f"{path.relative_to(SIM)}:{i}: {line.strip()}"
        for path in files
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if WALL_CLOCK.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_pattern_catches_what_it_should() -> None:
    for leak in (
        "t = time.time()",
        "import time",
        "datetime.now()",
        "from time import monotonic",
        "clock = SystemClock()",
        "time.perf_counter()",
    ):
        assert WALL_CLOCK.search(leak), leak
    assert not WALL_CLOCK.search("self.clock.now()")
