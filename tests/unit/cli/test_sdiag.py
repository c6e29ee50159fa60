"""sdiag's text, from the controller's /v1/diag answer."""

from __future__ import annotations

from muster.cli.sdiag import main, render

DIAG = {
    "now": 1_800_000_100.0,
    "since": 1_800_000_000.0,
    "server_tasks": 7,
    "agent_queue": 2,
    "submitted": 5,
    "started": 4,
    "completed": 2,
    "canceled": 1,
    "failed": 1,
    "jobs_pending": 1,
    "jobs_running": 1,
    "cycles": 4,
    "cycle_last_us": 900,
    "cycle_max_us": 2000,
    "cycle_sum_us": 4000,
    "depth_sum": 8,
    "queue_last": 3,
    "backfilled_total": 3,
    "backfilled": 2,
    "bf_cycles": 2,
    "bf_last_when": 1_800_000_090.0,
    "bf_last_us": 300,
    "bf_max_us": 500,
    "bf_sum_us": 800,
    "bf_depth_last": 2,
    "bf_depth_sum": 4,
    "bf_queue_last": 3,
    "rpc_types": [["REQUEST_JOB_INFO", 2003, 10, 5000], ["REQUEST_SUBMIT_BATCH_JOB", 4003, 5, 50000]],
    "rpc_users": [["root", 0, 3, 3000], ["alice", 1001, 12, 52000]],
    "version": "0.2.0.dev7+gabc1234",
}


def test_sdiag_prints_slurms_sections() -> None:
    text = "\n".join(render(DIAG))
    for line in (
        "Server version:       muster 0.2.0.dev7+gabc1234",
        "Server thread count:  7",
        "Agent queue size:     2",
        "Jobs submitted: 5",
        "Jobs started:   4",
        "Jobs completed: 2",
        "Jobs canceled:  1",
        "Jobs failed:    1",
        "Main schedule statistics (microseconds):",
        "\tLast cycle:   900",
        "\tMean cycle:   1000",
        "\tMean depth cycle:  2",
        "\tCycles per minute: 2",
        "Backfilling stats",
        "\tTotal backfilled jobs (since last slurm start): 3",
        "\tTotal backfilled jobs (since last stats cycle start): 2",
        "Remote Procedure Call statistics by message type",
        "Remote Procedure Call statistics by user",
    ):
        assert line in text.splitlines(), line
    rpc = [x for x in text.splitlines() if "ave_time:" in x]
    assert rpc[0].split()[0] == "REQUEST_JOB_INFO"  # most called first
    assert "( 2003) count:10     ave_time:500    total_time:5000" in rpc[0]
    assert rpc[2].split()[0] == "alice"


def test_sdiag_of_an_older_controller_says_its_version_is_not_known() -> None:
    old = {k: v for k, v in DIAG.items() if k != "version"}
    assert "Server version:       muster N/A" in render(old)


def test_sdiag_sorts_rpcs_by_id_or_time() -> None:
    by_time = [x.split()[0] for x in render(DIAG, "time") if "ave_time:" in x]
    assert by_time[:2] == ["REQUEST_SUBMIT_BATCH_JOB", "REQUEST_JOB_INFO"]
    by_id = [x.split()[0] for x in render(DIAG, "id") if "ave_time:" in x]
    assert by_id == ["REQUEST_JOB_INFO", "REQUEST_SUBMIT_BATCH_JOB", "root", "alice"]


def test_sdiag_refuses_an_unknown_option(capsys) -> None:  # noqa: ANN001 - pytest fixture
    assert main(["--bogus"]) == 1
    assert 'Try "sdiag --help"' in capsys.readouterr().err


def test_usage_is_one_line_of_option_groups_and_help_is_the_description(capsys) -> None:
    import re

    from muster.cli import sdiag as cmd

    assert cmd.main(["--usage"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"Usage: sdiag(?:\s+\[-{1,2}[^\]]+\])+\n", out), out
    assert cmd.main(["--help"]) == 0
    assert "--reset" in capsys.readouterr().out
