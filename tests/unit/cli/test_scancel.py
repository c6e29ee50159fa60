"""scancel: job ids, filters, and Slurm's quiet-or-not rules for the controller's answers."""

from __future__ import annotations

import io

import pytest

from muster.cli import scancel
from muster.cli.common import CommandError


def _cancel(argv: list[str]) -> scancel.Cancel:
    c = scancel.parse_args(argv)
    assert isinstance(c, scancel.Cancel)
    return c


def test_ids_and_filters_make_the_body() -> None:
    c = _cancel(
        [
            "12",
            "13,14",
            "-u",
            "alice",
            "--name=train",
            "-p",
            "gpu",
            "-t",
            "PD,running",
            "-s",
            "USR1",
            "-b",
        ]
    )
    assert c.body() == {
        "job_ids": [12, 13, 14],
        "batch_only": True,
        "user": "alice",
        "name": "train",
        "partition": "gpu",
        "states": ["PENDING", "RUNNING"],
        "signal": "USR1",
    }


def test_steps_are_told_apart_from_jobs() -> None:
    c = _cancel(["12.3", "14", "15.0,16"])
    assert c.steps == [(12, 3), (15, 0)] and c.job_ids == [14, 16]


def test_numeric_signal_is_sent_as_a_number() -> None:
    assert _cancel(["--signal=9", "5"]).body()["signal"] == 9


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "No job identification provided"),
        (["abc"], "Invalid job id abc"),
        (["12_x"], "Invalid job id 12_x"),
        (["12_[3-1]"], "Invalid job id 12_[3-1]"),
        (["12.x"], "Invalid job id 12.x"),
        (["-s", "BOGUS", "5"], "Invalid job signal: BOGUS"),
        (["-t", "COMPLETED", "5"], "Invalid job state specified: COMPLETED"),
        (["-t", "CD", "5"], "Invalid job state specified: CD"),
        (["-t", "nosuch", "5"], "Invalid job state specified: nosuch"),
    ],
)
def test_bad_input(argv, message) -> None:
    with pytest.raises(CommandError) as err:
        scancel.parse_args(argv)
    assert err.value.message == message


def _outcome(argv: list[str], results: list[dict]) -> tuple[int, str]:
    err = io.StringIO()
    rc = scancel.outcome(_cancel(argv), results, err)
    return rc, err.getvalue()


UNKNOWN = {
    "job_id": 999999,
    "ok": False,
    "error": "Invalid job id specified",
    "code": "invalid_job_id",
}
DENIED = {
    "job_id": 8653,
    "ok": False,
    "error": "Access/permission denied",
    "code": "permission_denied",
}


def test_unknown_job_is_silent_success() -> None:
    assert _outcome(["999999"], [UNKNOWN]) == (0, "")


def test_unknown_job_is_reported_with_verbose_but_still_succeeds() -> None:
    assert _outcome(["-v", "999999"], [UNKNOWN]) == (
        0,
        "scancel: error: Kill job error on job id 999999: Invalid job id specified\n",
    )


def test_unknown_job_with_a_filter_is_an_error() -> None:
    assert _outcome(["--state=PENDING", "999999"], [UNKNOWN]) == (
        1,
        "scancel: error: Kill job error on job id 999999: Invalid job id specified\n",
    )


def test_other_users_job_exits_210(reference) -> None:
    _, stderr = reference("fmt_scancel_other_user.txt")
    assert _outcome(["8653"], [DENIED]) == (210, stderr)


def test_finished_job_is_silent() -> None:
    assert _outcome(["8641"], [{"job_id": 8641, "ok": True}]) == (0, "")


def test_main_messages(monkeypatch, capsys, reference) -> None:
    _, no_args = reference("fmt_scancel_no_args.txt")
    _, bad_id = reference("fmt_scancel_badid.txt")
    assert scancel.main([]) == 1
    assert capsys.readouterr().err == no_args
    assert scancel.main(["abc"]) == 1
    assert capsys.readouterr().err == bad_id


def test_main_verbose_names_the_job(monkeypatch, capsys, reference) -> None:
    _, stderr = reference("fmt_scancel_verbose.txt")

    class Fake:
        def post(self, path: str, body: object = None) -> dict:
            assert path == "/v1/jobs/signal"
            return {"results": [{"job_id": 8656, "ok": True}]}

    monkeypatch.setattr(scancel, "connect", lambda prog: Fake())
    assert scancel.main(["-v", "8656"]) == 0
    assert capsys.readouterr().err == stderr


def test_array_tasks_are_sent_as_written() -> None:
    c = _cancel(["123", "123_7", "123_[1-3,5]", "9,10_2"])
    assert c.job_ids == [123, "123_7", "123_[1-3,5]", 9, "10_2"]


@pytest.mark.parametrize(
    ("text", "name"), [("pd", "PENDING"), ("R", "RUNNING"), ("Suspended", "SUSPENDED"), ("s", "SUSPENDED")]
)
def test_state_takes_slurms_codes_and_names_in_any_case(text: str, name: str) -> None:
    assert scancel.parse_args(["-t", text, "5"]).states == [name]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["-v", "--signal=SIGHUP", "8656"], "scancel: Signal 1 to job 8656\n"),
        (["-v", "-s", "USR1", "8656"], "scancel: Signal 10 to job 8656\n"),
        (["-v", "--signal=2", "8656"], "scancel: Signal 2 to job 8656\n"),
        (["-v", "8656.0"], "scancel: Terminating step 8656.0\n"),
        (["-v", "--signal=HUP", "8656.3"], "scancel: Signal 1 to step 8656.3\n"),
    ],
)
def test_verbose_names_the_signal_by_number_and_the_step_as_slurm_does(monkeypatch, capsys, argv, line) -> None:
    class Fake:
        def post(self, path: str, body: object = None) -> dict:
            return {"results": [{"job_id": 8656, "ok": True}], "ok": True}

    monkeypatch.setattr(scancel, "connect", lambda prog: Fake())
    assert scancel.main(argv) == 0
    assert line in capsys.readouterr().err
