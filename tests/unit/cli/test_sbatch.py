"""sbatch: where options come from, the script checks, and Slurm's replies and errors."""

from __future__ import annotations

import io

import pytest

from muster.cli import sbatch
from muster.cli.common import CommandError
from muster.slurm.jobrequest import current_umask


def _build(argv: list[str], environ: dict | None = None, stdin: str | None = None, cwd: str = "/work"):
    result = sbatch.build(
        argv,
        environ if environ is not None else {"HOME": "/h"},
        cwd,
        io.StringIO(stdin or ""),
        now=1_000_000.0,
    )
    assert isinstance(result, sbatch.Submission)
    return result


def _script(tmp_path, text: str, name: str = "job.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_wrap_builds_slurms_script() -> None:
    sub = _build(["--wrap", "echo hi"])
    assert sub.spec["script"] == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho hi\n"
    assert sub.spec["name"] == "wrap"
    assert sub.spec["argv"] == []
    assert sub.spec["workdir"] == "/work"
    assert sub.spec["environment"] == {"HOME": "/h", "SLURM_UMASK": current_umask()}


def test_script_file_name_arguments_and_directives(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/bash\n#SBATCH -N 2 --gres=gpu:4\n#SBATCH --time=10\nsrun hostname\n")
    sub = _build([path, "a", "--b"])
    assert sub.spec["name"] == "job.sh"
    assert sub.spec["argv"] == ["a", "--b"]
    assert (sub.spec["min_nodes"], sub.spec["gpus_per_node"], sub.spec["time_limit"]) == (2, 4, 600)


def test_precedence_command_line_then_environment_then_script(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/sh\n#SBATCH -J script -t 5 -p a --qos=s\ntrue\n")
    sub = _build(
        ["-J", "cli", path],
        {"SBATCH_JOB_NAME": "env", "SBATCH_TIMELIMIT": "7", "SBATCH_PARTITION": "b"},
    )
    assert (sub.spec["name"], sub.spec["time_limit"], sub.spec["partitions"], sub.spec["qos"]) == (
        "cli",
        420,
        ["b"],
        "s",
    )


def test_script_from_stdin_is_named_sbatch() -> None:
    sub = _build([], stdin="#!/bin/sh\n#SBATCH --parsable\ntrue\n")
    assert sub.spec["name"] == "sbatch" and sub.parsable


def test_relative_chdir_and_default_workdir(tmp_path) -> None:
    assert _build(["-D", "runs/1", "--wrap=x"], cwd="/home/u").spec["workdir"] == "/home/u/runs/1"
    assert _build(["--chdir=/abs", "--wrap=x"]).spec["workdir"] == "/abs"


@pytest.mark.parametrize(
    ("argv", "stdin", "message", "rc"),
    [
        (["/nonexistent/script.sh"], None, "Unable to open file /nonexistent/script.sh", 1),
        ([], "", "Batch script is empty!", 1),
        (["--wrap=true", "extra"], None, "script argument not permitted with --wrap option", 1),
        (["--time=abc", "--wrap=true"], None, "Invalid --time specification", 255),
        ([], "#!/bin/sh\r\ntrue\r\n", "Batch script contains DOS line breaks", 1),
    ],
)
def test_errors(argv, stdin, message, rc) -> None:
    with pytest.raises(CommandError) as err:
        _build(argv, stdin=stdin)
    assert err.value.message.startswith(message)
    assert err.value.rc == rc


def test_stray_word_in_directives(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/sh\n#SBATCH --nice 5\ntrue\n")
    with pytest.raises(CommandError) as err:
        _build([path])
    assert (err.value.message, err.value.rc) == ("Invalid directive found in batch script: 5", 255)


def _run(argv: list[str], capsys, stdin: str = "", monkeypatch=None) -> tuple[int, str, str]:
    if monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = sbatch.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_unknown_option_like_slurm(capsys, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_unknown_option.txt")
    assert _run(["--bogus", "--wrap=true"], capsys) == (255, "", stderr)


def test_bad_time_like_slurm(capsys, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_bad_time.txt")
    assert _run(["--time=abc", "--wrap=true"], capsys) == (255, "", stderr)


def test_missing_file_like_slurm(capsys, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_missing_file.txt")
    assert _run(["/nonexistent/script.sh"], capsys) == (1, "", stderr)


def test_no_shebang_like_slurm(capsys, monkeypatch, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_no_shebang.txt")
    assert _run([], capsys, "echo hello\n", monkeypatch) == (1, "", stderr)


def test_empty_stdin_like_slurm(capsys, monkeypatch, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_empty_stdin.txt")
    assert _run([], capsys, "", monkeypatch) == (1, "", stderr)


def test_bad_gres_like_slurm(capsys, reference) -> None:
    _, stderr = reference("fmt_err_sbatch_bad_gres_name.txt")
    assert _run(["--gres=tpu:1", "--wrap=true"], capsys) == (1, "", stderr)


def test_negative_counts_are_errors(capsys) -> None:
    # (-N -1 is "at most one node" in Slurm: an empty minimum, see test_options)
    for argv in (["-N", "-0"], ["-n", "0"], ["-c", "0"]):
        rc, out, err = _run([*argv, "--wrap=true"], capsys)
        assert rc == 255 and out == "" and err.startswith("sbatch: error: ")


def test_version_and_help(capsys) -> None:
    rc, out, _ = _run(["--version"], capsys)
    assert rc == 0 and out.startswith("slurm 22.05.8 (muster ")
    rc, out, _ = _run(["-h"], capsys)
    assert rc == 0 and "--gpus-per-node" in out


class _Fake:
    def __init__(self, answer: dict | None = None, error: Exception | None = None) -> None:
        self.answer = answer or {"job_id": 42}
        self.error = error
        self.bodies: list[object] = []

    def post(self, path: str, body: object = None) -> dict:
        self.bodies.append((path, body))
        if self.error:
            raise self.error
        return self.answer


def test_reply_and_parsable(monkeypatch, capsys) -> None:
    fake = _Fake()
    monkeypatch.setattr(sbatch, "connect", lambda prog: fake)
    assert _run(["--wrap=true"], capsys) == (0, "Submitted batch job 42\n", "")
    assert _run(["--parsable", "--wrap=true"], capsys) == (0, "42\n", "")
    assert _run(["-Q", "--wrap=true"], capsys) == (0, "", "")
    path, body = fake.bodies[0]
    assert path == "/v1/jobs" and body["spec"]["name"] == "wrap"  # type: ignore[index]


def test_invalid_partition_like_slurm(monkeypatch, capsys, reference) -> None:
    from muster.protocol.client import ApiError

    _, stderr = reference("fmt_err_sbatch_bad_partition.txt")
    err = ApiError(
        400,
        "Invalid partition name specified",
        "invalid_partition",
        {"error": "x", "partition": "nosuch"},
    )
    monkeypatch.setattr(sbatch, "connect", lambda prog: _Fake(error=err))
    assert _run(["-p", "nosuch", "--wrap=true"], capsys) == (1, "", stderr)


def test_rejection_like_slurm(monkeypatch, capsys, reference) -> None:
    from muster.protocol.client import ApiError

    _, stderr = reference("fmt_err_sbatch_gpus_65.txt")
    err = ApiError(400, "Requested node configuration is not available", "unsatisfiable")
    monkeypatch.setattr(sbatch, "connect", lambda prog: _Fake(error=err))
    assert _run(["--gpus=65", "--wrap=true"], capsys) == (1, "", stderr)


def test_unreachable_controller(monkeypatch, capsys) -> None:
    from muster.protocol.client import ConnectError

    monkeypatch.setattr(
        sbatch,
        "connect",
        lambda prog: _Fake(error=ConnectError("Unable to contact slurm controller (connect failure): /s: gone")),
    )
    monkeypatch.setenv("SLURM_EXIT_ERROR", "3")
    rc, _, err = _run(["--wrap=true"], capsys)
    assert rc == 3
    assert err.startswith(
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
    )


TOO_LONG = "sbatch: error: Batch job submission failed: Pathname of a file, directory or other parameter too long"


@pytest.mark.parametrize(("params", "most"), [("", 4 * 1024 * 1024), ("bf_continue,max_script_size=2048", 2048)])
def test_a_script_over_max_script_size_is_refused_before_it_is_sent(
    monkeypatch, capsys, tmp_path, params: str, most: int
) -> None:
    conf = tmp_path / "muster.conf"
    conf.write_text(f"ClusterName=t\nSchedulerParameters={params}\n" if params else "ClusterName=t\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    fake = _Fake()
    monkeypatch.setattr(sbatch, "connect", lambda prog: fake)
    script = "#!/bin/sh\n" + "#" * (most - 10) + "\n"  # most + 1 bytes
    rc, out, err = _run([_script(tmp_path, script)], capsys)
    assert (rc, out) == (1, "")
    assert err == f"{TOO_LONG} (the batch script has {most + 1} bytes; max_script_size is {most})\n"
    assert fake.bodies == []
    assert _run([_script(tmp_path, script[:-2] + "\n")], capsys)[0] == 0  # exactly the limit: sent
    assert len(fake.bodies) == 1


def test_a_body_over_the_controllers_limit_is_reported_in_slurms_words(monkeypatch, capsys) -> None:
    from muster.protocol.client import ApiError

    err = ApiError(413, "Request body too large (limit 16777216 bytes)", "too_large")
    monkeypatch.setattr(sbatch, "connect", lambda prog: _Fake(error=err))
    rc, out, stderr = _run(["--wrap=true"], capsys)
    assert (rc, out) == (1, "")
    assert stderr == f"{TOO_LONG} (Request body too large (limit 16777216 bytes))\n"
