"""Time-limit deadlines, --signal specs and exit statuses."""

from __future__ import annotations

import signal

import pytest

from muster.agent.limits import (
    SignalSpec,
    banner,
    deadline,
    exit_fields,
    parse_signal,
    parse_signal_spec,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("USR1", SignalSpec(signal.SIGUSR1, 60, False)),
        ("USR1@30", SignalSpec(signal.SIGUSR1, 30, False)),
        ("B:USR2@5", SignalSpec(signal.SIGUSR2, 5, True)),
        ("RB:SIGTERM@10", SignalSpec(signal.SIGTERM, 10, True)),
        ("R:10@90", SignalSpec(10, 90, False)),
    ],
)
def test_signal_specs_follow_sbatch(text: str, expected: SignalSpec) -> None:
    assert parse_signal_spec(text) == expected


@pytest.mark.parametrize("text", ["NOPE", "X:USR1", "USR1@soon", "0", "999"])
def test_bad_signal_specs_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_signal_spec(text)


def test_no_spec_means_no_warning() -> None:
    assert parse_signal_spec(None) is None and parse_signal_spec("") is None


def test_signals_by_name_or_number() -> None:
    assert parse_signal("term") == parse_signal("SIGTERM") == parse_signal(15) == 15


def test_the_deadline_counts_from_the_controllers_start_time() -> None:
    job = {"start_time": 1000.0, "time_limit": 60}
    assert deadline(job, started_at=1003.0) == 1060.0
    assert deadline(job, started_at=1003.0, over_time=60) == 1120.0
    assert deadline({"time_limit": 60}, started_at=1003.0) == 1063.0
    assert deadline({"start_time": 1000.0, "time_limit": None}, started_at=0) is None


def test_exit_statuses_split_into_code_and_signal() -> None:
    assert exit_fields(3 << 8) == (3, 0)
    assert exit_fields(0) == (0, 0)
    assert exit_fields(signal.SIGKILL) == (0, 9)


def test_the_banner_reads_like_slurmstepds() -> None:
    line = banner("node1", 8633, "timeout", "2026-12-02T15:58:47")
    assert line == "slurmstepd: error: *** JOB 8633 ON node1 CANCELLED AT 2026-12-02T15:58:47 DUE TO TIME LIMIT ***\n"
    assert "DUE TO" not in banner("node1", 1, "cancel", "t")
