"""srun's and salloc's option handling and srun's output rules, without a cluster."""

from __future__ import annotations

import pytest

from muster.cli import salloc, srun, stepio
from muster.cli.common import CommandError
from muster.cli.steprun import StepRun
from muster.core.arrays import format_ranges


def build(argv: list[str], env: dict[str, str] | None = None) -> srun.Run:
    run = srun.build(argv, env or {"PATH": "/bin"}, "/work")
    assert isinstance(run, srun.Run)
    return run


def test_outside_an_allocation_the_options_shape_both_job_and_step() -> None:
    run = build(["-N2", "-n4", "--gres=gpu:2", "-l", "python", "train.py", "--lr", "1"])
    assert run.job_id is None
    assert run.argv == ["python", "train.py", "--lr", "1"]  # options after the command are its own
    assert run.spec["min_nodes"] == 2 and run.spec["ntasks"] == 4 and run.spec["name"] == "python"
    assert run.step == {"cpus_per_task": 1, "gpus_per_node": 2, "min_nodes": 2, "ntasks": 4}
    assert run.label


def test_inside_a_job_the_layout_comes_from_the_environment() -> None:
    env = {
        "SLURM_JOB_ID": "12",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NAME": "train",
        "SLURM_CPUS_PER_TASK": "3",
    }
    run = build(["python", "x.py"], env)
    assert run.job_id == 12
    assert run.step == {"cpus_per_task": 3, "min_nodes": 2, "ntasks": 4, "ntasks_per_node": 2}
    assert run.name == ""  # SLURM_JOB_NAME is the job's, not the step's


def test_only_slurm_job_id_means_one_task_per_node_and_explicit_options_win() -> None:
    assert build(["hostname"], {"SLURM_JOB_ID": "7"}).step == {"cpus_per_task": 1}
    run = build(["-n1", "hostname"], {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_NNODES": "2"})
    assert run.step == {"cpus_per_task": 1, "ntasks": 1}
    assert build(["--jobid=9", "true"]).job_id == 9


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("none", {"mode": "none"}),
        ("all", {"mode": "stream"}),
        ("3", {"mode": "stream", "tasks": [3]}),
        ("out-%j.%t", {"mode": "file", "path": "out-%j.%t"}),
    ],
)
def test_io_modes(value: str, mode: dict[str, object]) -> None:
    assert build(["-o", value, "true"]).stdout == mode
    assert build(["--input", value, "true"]).stdin == mode


def test_srun_specific_options() -> None:
    run = build(
        [
            "-K",
            "-W",
            "5",
            "-u",
            "-m",
            "cyclic",
            "--gpu-bind=none",
            "--overlap",
            "--quit-on-interrupt",
            "--no-torch-env",
            "true",
        ]
    )
    assert run.kill_bad_exit and run.wait == 5 and run.unbuffered and run.quit_on_interrupt
    assert not run.torch_env
    assert run.step["distribution"] == "cyclic" and run.step["gpu_bind"] == "none" and run.step["overlap"]
    assert not build(["true"], {"MUSTER_TORCH_ENV": "0"}).torch_env


def test_gpu_bind_is_sent_whole_from_the_option_or_slurm_gpu_bind() -> None:
    assert build(["--gpu-bind=verbose,map_gpu:1,0", "true"]).step["gpu_bind"] == "verbose,map_gpu:1,0"
    assert build(["true"], {"SLURM_GPU_BIND": "single:1"}).step["gpu_bind"] == "single:1"
    assert "gpu_bind" not in build(["true"]).step


@pytest.mark.parametrize(
    ("argv", "rc", "text"),
    [
        (["--bogus", "true"], 255, "srun: unrecognized option '--bogus'"),
        (["--time=abc", "true"], 255, "Invalid --time specification"),
        ([], 1, "No command given"),
        (["--multi-prog", "/nonexistent.conf"], 1, "Unable to open multi-prog config file"),
        (["--cpu-bind=cors", "true"], 255, 'unrecognized --cpu-bind argument "cors"'),
        (["--gpu-bind=single", "true"], 255, "Invalid --gpu-bind argument: single"),
        (["--gpu-bind=map_gpu:0,x", "true"], 255, "Invalid --gpu-bind argument: map_gpu:0,x"),
    ],
)
def test_bad_command_lines(argv: list[str], rc: int, text: str) -> None:
    with pytest.raises(CommandError) as e:
        srun.build(argv, {}, "/")
    assert e.value.rc == rc and text in e.value.message


def test_pty_sends_task_zero_the_input_and_turns_labels_off() -> None:
    run = srun.build(["--pty", "-l", "bash"], {}, "/")
    assert not isinstance(run, str)
    assert run.pty and run.unbuffered and not run.label
    assert run.stdin == {"mode": "stream", "tasks": [0]}


def step_run(label: bool = True, unbuffered: bool = False, ntasks: int = 12) -> StepRun:
    run = srun.Run()
    run.label, run.unbuffered = label, unbuffered
    answer = {
        "step": {"step_id": 0, "tasks": [list(range(ntasks))]},
        "nodes": [{"name": "node1", "addr": "127.0.0.2", "port": 1}],
    }
    return StepRun(run, 5, answer)


def test_labels_are_right_aligned_to_the_widest_task_id(capfd: pytest.CaptureFixture[str]) -> None:
    s = step_run()
    s._output(b"o", 3, b"one\ntwo\npart")
    s._output(b"o", 11, b"x\n")
    s._output(b"o", 3, b"ial\n")
    out = capfd.readouterr().out
    assert out == " 3: one\n 3: two\n11: x\n 3: partial\n"


def test_unlabelled_output_is_kept_whole_per_line(capfd: pytest.CaptureFixture[str]) -> None:
    s = step_run(label=False)
    s._output(b"o", 0, b"hel")
    s._output(b"o", 1, b"other\n")
    s._output(b"o", 0, b"lo\n")
    assert capfd.readouterr().out == "other\nhello\n"


def test_exit_status_is_the_highest_code_and_128_plus_a_signal() -> None:
    s = step_run(ntasks=3)
    s.exits = {0: (0, 0), 1: (3, 0), 2: (1, 0)}
    assert s._outcome() == (3, 3, 0, False)
    s.exits[2] = (0, 9)
    assert s._outcome()[0] == 137
    assert format_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_salloc_runs_the_shell_by_default_and_sets_the_allocations_variables() -> None:
    spec, command, quiet, immediate = salloc.build(["-N2", "-n4"], {"SHELL": "/bin/zsh"}, "/w")  # type: ignore[misc]
    assert immediate is None
    assert command == ["/bin/zsh"] and spec["name"] == "zsh" and not quiet
    job = {
        "job_id": 8,
        "nodelist": "node[1-2]",
        "partition": "gpu",
        "alloc": [{"node": "node1", "cpus": 2}, {"node": "node2", "cpus": 2}],
        "spec": {"name": "zsh"},
    }
    env = salloc.allocation_environment(job, spec, {"SLURM_STEP_ID": "3", "HOME": "/h"})
    assert env["SLURM_JOB_ID"] == "8" and env["SLURM_NNODES"] == "2" and env["SLURM_NTASKS"] == "4"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)" and env["SLURM_JOB_NODELIST"] == "node[1-2]"
    assert "SLURM_STEP_ID" not in env and env["HOME"] == "/h"


def test_srun_q_is_qos_as_in_slurm_and_quit_on_interrupt_has_no_short_form() -> None:
    run = build(["-q", "high", "true"])
    assert run.spec["qos"] == "high" and not run.quit_on_interrupt


def test_help_lists_the_options_slurm_documents() -> None:
    text = srun.HELP
    for line in (
        "-b, --begin=time",
        "-N, --nodes=N",
        "-q, --qos=qos",
        "--mincpus=n",
        "-G, --gpus=n",
        "-E, --preserve-env",
        "-I, --immediate[=secs]",
    ):
        assert line in text
    import re

    assert re.search(r"Usage: srun .*?OPTIONS.*?executable.*?args", text)


def test_salloc_usage_ends_with_the_command() -> None:
    import re

    assert re.search(r"Usage: salloc(?:\s+\[{1,2}-{1,2}.*?\](?=\s+\[))+\s+\[command \[args\.\.\.\]\]$", salloc.USAGE)


def test_layout_variables_are_requests_outside_an_allocation() -> None:
    run = build(["true"], {"SLURM_NPROCS": "5", "SLURM_NNODES": "1"})
    assert run.spec["ntasks"] == 5 and run.spec["min_nodes"] == 1


def test_cpus_per_task_asked_for_is_exported_even_when_one() -> None:
    assert build(["-c", "1", "true"]).env["SLURM_CPUS_PER_TASK"] == "1"
    assert "SLURM_CPUS_PER_TASK" not in build(["true"]).env


def test_preserve_env_keeps_the_allocations_counts() -> None:
    env = {"SLURM_JOB_ID": "12", "SLURM_NNODES": "3", "SLURM_NTASKS": "6"}
    run = build(["-E", "-n1", "-N1", "printenv"], env)
    assert run.preserve_env == {"SLURM_NNODES": "3", "SLURM_NTASKS": "6"}
    assert run.step["ntasks"] == 1 and run.step["min_nodes"] == 1
    assert build(["-n1", "printenv"], env).preserve_env == {}


def test_immediate_takes_an_optional_number_of_seconds() -> None:
    assert build(["-I", "true"]).immediate == 1
    assert build(["--immediate=5", "true"]).immediate == 5
    assert build(["true"]).immediate is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"mode": "file", "path": "out.%j.%s"}, "/work/out.7.2"),
        ({"mode": "file", "path": "/tmp/x_%A_%a"}, "/tmp/x_7_4294967294"),
        ({"mode": "file", "path": "out.%t"}, None),  # per task: the nodes open it
        ({"mode": "file", "path": "out.%3n"}, None),
        ({"mode": "file", "path": "out.%N"}, None),
        ({"mode": "file", "path": "out.%%t"}, "/work/out.%t"),  # an escaped %, then t
        ({"mode": "stream", "tasks": [1]}, None),
        ({"mode": "none"}, None),
    ],
)
def test_srun_opens_the_files_that_name_no_task_or_node(spec: dict[str, object], expected: str | None) -> None:
    grant = {"job_id": 7, "step_id": 2, "user": "u", "job": {"name": "j"}}
    assert stepio.local_path(spec, grant, "/work") == expected


def test_salloc_immediate() -> None:
    result = salloc.build(["-I", "-N1"], {"SHELL": "/bin/sh"}, "/w")
    assert not isinstance(result, str) and result[3] == 1
    result = salloc.build(["--immediate=7"], {"SHELL": "/bin/sh"}, "/w")
    assert not isinstance(result, str) and result[3] == 7


def test_debugger_test_is_read_and_a_short_multi_prog_file_is_invalid(tmp_path) -> None:
    from muster.cli.multiprog import parse_multi_prog

    assert build(["--debugger-test", "true"]).debugger_test
    prog = parse_multi_prog(str(tmp_path / "f"), "1-2 hostname\n0,3 date\n")
    with pytest.raises(CommandError, match=r"Configuration file .*/f invalid"):
        prog.argv_for(5)


def test_overcommit_reaches_job_and_step_and_verbose_lists_the_options_given() -> None:
    run = build(["-N", "1", "-w", "node1", "-n", "33", "--overcommit", "-v", "-v", "--mincpus=2", "--tmp=1G", "true"])
    assert run.spec["overcommit"] is True and run.step["overcommit"] is True
    assert run.spec["min_cpus"] == 2 and run.spec["tmp_disk"] == 1024
    assert dict(run.defined) == {
        "nodes": "1",
        "nodelist": "node1",
        "ntasks": "33",
        "overcommit": "set",
        "verbose": "2",
        "mincpus": "2",
        "tmp": "1G",
    }


def test_a_launch_whose_agent_died_before_answering_is_found_on_the_next_agent(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The agent forked the tasks and died before its answer (the token) reached srun: srun
    # asks the next agent for the step with the token it derives from its credential.
    import json
    import socket
    import threading

    from muster.protocol.stepcred import attach_token
    from muster.protocol.stream import frame, json_frame

    server = socket.create_server(("127.0.0.1", 0))
    asked: list[tuple[str, dict[str, object]]] = []

    def read_request(conn: socket.socket) -> tuple[str, dict[str, object]]:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")).split(b":")[1])
        while len(body) < length:
            body += conn.recv(65536)
        return head.split(b" ")[1].decode(), json.loads(body)

    def agents() -> None:
        conn, _ = server.accept()  # the first agent: takes the launch, dies without a word
        asked.append(read_request(conn))
        conn.close()
        conn, _ = server.accept()  # the next one: has the step, and its log
        asked.append(read_request(conn))
        frames = frame(b"o", 0, b"still here\n") + json_frame(b"x", 0, {"code": 3}) + frame(b"d", -1, b"")
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(frames), frames))
        conn.close()

    thread = threading.Thread(target=agents, daemon=True)
    thread.start()
    run = srun.Run()
    run.label = False
    answer = {
        "step": {"step_id": 0, "tasks": [[0]]},
        "nodes": [{"name": "node1", "addr": "127.0.0.1", "port": server.getsockname()[1]}],
        "grant": "{}",
        "sig": "the-credential-signature",
        "slurmd_timeout": 30,
    }
    try:
        outcome = StepRun(run, 5, answer).run()
    finally:
        server.close()
    thread.join(timeout=30)
    assert [path for path, _ in asked] == ["/v1/steps/launch", "/v1/steps/attach"]
    assert asked[1][1] == {"job_id": 5, "step_id": 0, "token": attach_token("the-credential-signature"), "frames": 0}
    assert outcome[0] == 3
    assert capfd.readouterr().out == "still here\n"
