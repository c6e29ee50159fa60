"""``muster sim`` from the command line: output, JSON, comparisons and clear errors."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest

from muster.sim.main import main, parse_window

# Four processors; the EASY story of test_engine plus two late jobs.
ROWS = [(0, 10, 2, 10), (1, 5, 4, 5), (2, 5, 2, 5), (3, 20, 1, 20), (100, 30, 4, 20), (101, 5, 1, 5)]


def test_a_replay_prints_the_metrics_table(write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([write_swf(ROWS), "--policy", "easy"]) == 0
    out = capsys.readouterr().out
    assert "6 jobs on 1 node x 4 CPUs (processor pool)" in out
    assert "bounded slowdown mean (tau 10 s)" in out
    assert "killed at time limit" in out


def test_json_holds_every_run(write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([write_swf(ROWS), "--compare", "fcfs,easy,conservative", "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [r["label"] for r in report["runs"]] == ["fcfs", "easy", "conservative"]
    easy = report["runs"][1]
    assert easy["settings"]["SchedulerType"] == "sched/backfill"
    assert easy["metrics"]["jobs"] == 6 and easy["metrics"]["backfilled"] >= 1
    assert easy["metrics"]["killed_at_limit"] == 1  # the job that asked 20 s and ran 30
    assert report["trace"]["replayed"] == 6 and report["capacity"] == 4
    assert "wait mean" in captured.err  # the table goes to stderr when JSON takes stdout


def test_overrun_and_estimates_reach_the_engine(write_swf: Callable[..., str], tmp_path: pathlib.Path) -> None:
    out = tmp_path / "r.json"
    assert main([write_swf(ROWS), "--allow-overrun", "--estimate", "2xActual", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["estimate"] == "2xActual" and report["allow_overrun"] is True
    assert report["runs"][0]["metrics"]["killed_at_limit"] == 0


def test_the_recorded_schedule_can_be_set_beside_a_policy(
    tmp_path: pathlib.Path, swf_line: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.swf"
    path.write_text(
        "; MaxProcs: 4\n"
        + "\n".join(
            [
                swf_line(1, 0, 10, 4, 10, wait=0),
                swf_line(2, 5, 10, 4, 10, wait=7),
            ]
        )
        + "\n"
    )
    assert main([str(path), "--compare", "recorded,easy", "--json", "-"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs[0]["metrics"]["wait_mean"] == 3.5
    assert runs[1]["metrics"]["wait_mean"] == 2.5  # b waits for a: 10 - 5


def test_window_and_jobs_select_a_slice(write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([write_swf(ROWS), "--window", "1:1m", "--jobs", "2", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["replayed"] == 2


def test_a_conf_file_sets_the_cluster_and_the_scheduler(
    write_swf: Callable[..., str],
    write_text: Callable[[str, str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    conf = write_text(
        "sim.conf",
        "SchedulerType=sched/builtin\nPriorityType=priority/basic\n"
        "NodeName=c[1-2] CPUs=2 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n",
    )
    assert main([write_swf(ROWS), "--conf", conf, "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"][0]["label"] == "conf"
    assert report["cluster"]["nodes"] == 2 and report["capacity"] == 4
    assert report["runs"][0]["metrics"]["backfilled"] == 0


def test_jobs_the_controller_would_refuse_are_reported(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_text(
        "sim.conf",
        "EnforcePartLimits=ALL\nNodeName=c[1-2] CPUs=2 RealMemory=100\n"
        "PartitionName=p Nodes=ALL Default=YES MaxTime=15\n",
    )  # minutes
    assert main([write_swf(ROWS + [(200, 2000, 1, 2000)]), "--conf", conf]) == 0
    err = capsys.readouterr().err
    assert "1 jobs not replayed, refused at submission: Requested time limit is invalid" in err


def test_jobs_too_big_for_the_cluster_are_reported(
    write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([write_swf(ROWS), "--nodes", "1", "--cpus-per-node", "2"]) == 0
    err = capsys.readouterr().err
    # as Controller.submit: more nodes than the partition has can never run
    assert "2 jobs not replayed, refused at submission: Requested node configuration is not available" in err


def test_plots_are_written(
    write_swf: Callable[..., str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    assert main([write_swf(ROWS), "--compare", "fcfs,easy", "--plot", str(tmp_path / "p")]) == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "gantt-easy.png",
        "gantt-fcfs.png",
        "utilisation.png",
        "wait_cdf.png",
    ]


def test_plot_without_matplotlib_names_the_extra_before_replaying(
    write_swf: Callable[..., str],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: import raises
    assert main([write_swf(ROWS), "--plot", str(tmp_path / "p")]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "muster sim: error: muster sim --plot needs matplotlib, which is not installed: pip install 'muster-wlm[plot]'\n"
    )
    assert "wait mean" not in captured.out  # refused before the replay, not after it
    assert not (tmp_path / "p").exists()


def test_the_progress_bar_reaches_the_end(write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([write_swf(ROWS), "--progress"]) == 0
    assert "100.0%  6/6 jobs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--estimate", "soon"], "invalid estimate 'soon'"),
        (["--compare", "easy,lottery"], "--compare: unknown policy 'lottery'"),
        (["--compare", "easy", "--policy", "fcfs"], "either --policy or --compare"),
        (["--window", "10"], "--window: expected START:END"),
        (["--window", "5d:1d"], "must come after the start"),
        (["--jobs", "0"], "--jobs must be a positive number"),
        (["--window", "1000d:"], "no job of the trace falls in"),
        (["--conf", "/nonexistent/slurm.conf"], "--conf: cannot read /nonexistent/slurm.conf"),
        (["--cluster", "c1"], "not one"),
        (["--priority-weight-age", "-1"], "must not be negative"),
        (["--bf-max-job-test", "0"], "--bf-max-job-test 0: must be between 1 and 1,000,000"),
        (["--bf-max-job-test", "-3"], "--bf-max-job-test -3: must be between 1"),
        (["--bf-max-job-test", "1000001"], "must be between 1 and 1,000,000"),
    ],
)
def test_bad_options_fail_with_a_clear_message(
    write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main([write_swf(ROWS), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("muster sim: error: ") and message in err


def test_a_malformed_trace_fails_naming_the_line(
    write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_swf(ROWS)
    with open(path, "a") as f:
        f.write("7 200 -1 10\n")
    assert main([path]) == 1
    assert f"muster sim: error: {path}:10: expected 18 fields, found 4" in capsys.readouterr().err
    assert main([path, "--skip-bad-lines"]) == 0
    assert f"skipped malformed line: {path}:10:" in capsys.readouterr().err


def test_an_unwritable_output_fails_clearly(
    write_swf: Callable[..., str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    assert main([write_swf(ROWS), "--json", str(target)]) == 1
    assert f"muster sim: error: cannot write {target}: No such file or directory" in capsys.readouterr().err


def test_a_bad_conf_file_fails_naming_the_line(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_text("bad.conf", "SchedulerType\n")
    assert main([write_swf(ROWS), "--conf", conf]) == 1
    assert f"{conf}:1:" in capsys.readouterr().err


def test_a_conf_that_suspends_victims_is_refused(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_text(
        "s.conf",
        "NodeName=n1 CPUs=4\nPreemptType=preempt/partition_prio\nPreemptMode=SUSPEND,GANG\n"
        "PartitionName=p Nodes=ALL Default=YES\n",
    )
    assert main([write_swf(ROWS), "--conf", conf]) == 1
    assert "PreemptMode=SUSPEND is not modelled by the simulator" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "window"), [("1:2", (1, 2)), ("1h:2d", (3600, 172800)), (":30m", (0, 1800))])
def test_windows(text: str, window: tuple[float, float]) -> None:
    assert parse_window(text) == window


def test_python_dash_m_runs_the_simulator(write_swf: Callable[..., str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "muster.sim", write_swf(ROWS), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wait mean (s)" in done.stdout


def test_bf_max_job_test_sets_the_depth_the_replay_runs(
    write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([write_swf(ROWS), "--policy", "backfill", "--bf-max-job-test", "7", "--json", "-"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert "bf_max_job_test=7" in run["settings"]["SchedulerParameters"]
