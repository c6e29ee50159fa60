"""agent.stepd: a step's supervisor, for real (it and its tasks are real processes; no
agent, no socket): the log it writes, the tasks' ends, its back-pressure."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from muster.agent import spawn, stepd, stepplan
from muster.protocol.stream import frame
from waiting import wait_for


def wait_until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    return wait_for(check, timeout, interval=0.01, what=what)


class Supervised:
    """A supervisor forked here (as the agent forks it), with its log and FIFOs."""

    def __init__(self, tmp_path: Path, scripts: list[str]) -> None:
        self.log = tmp_path / "step.log"
        os.mkfifo(tmp_path / "bell", 0o600)
        os.mkfifo(tmp_path / "ctl", 0o600)
        log_w = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.bell = os.open(tmp_path / "bell", os.O_RDWR | os.O_NONBLOCK)
        self.ctl = os.open(tmp_path / "ctl", os.O_RDWR | os.O_NONBLOCK)
        starts = []
        for task, script in enumerate(scripts):
            out, err, fail = os.pipe(), os.pipe(), os.pipe()
            spec = spawn.ChildSpec(
                exe="/bin/sh",
                argv=["/bin/sh", "-c", script],
                env={"PATH": "/usr/bin:/bin"},
                uid=os.geteuid(),
                gid=os.getegid(),
                groups=None,
                umask=None,
                cwd=str(tmp_path),
                stdin=spawn.Stream(path=os.devnull, flags=os.O_RDONLY),
                stdout=spawn.Stream(fd=out[1]),
                stderr=spawn.Stream(fd=err[1]),
                words=stepplan.TASK_WORDS,
                close_first=(fail[0],),
                close_after=(out[1], err[1]),
                failure_exit=None,
            )
            starts.append(stepd.TaskStart(task, spec, fail, {out[0]: b"o", err[0]: b"e"}, (out[1], err[1])))
        self.pid = os.fork()
        if self.pid == 0:
            stepd.run("node1", stepd.StepFiles(log_w, self.bell, self.ctl), starts, one_by_one=False)
        os.close(log_w)
        for s in starts:
            for fd in (*s.err, *s.outputs, *s.child_fds):
                os.close(fd)

    def frames(self) -> list[tuple[bytes, int, bytes]]:
        frames, _ = stepd.frames_in(self.log.read_bytes())
        return frames

    def ended(self) -> bool:
        pid, _ = os.waitpid(self.pid, os.WNOHANG)
        return pid != 0

    def ack(self, pos: int) -> None:
        os.write(self.ctl, b'{"ack":%d}\n' % pos)

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.bell)
        os.close(self.ctl)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Callable[[list[str]], Supervised]]:
    made: list[Supervised] = []

    def make(scripts: list[str]) -> Supervised:
        made.append(Supervised(tmp_path, scripts))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_frames_in_takes_whole_frames_and_leaves_a_cut_one() -> None:
    data = frame(b"o", 0, b"hello\n") + frame(b"x", 0, b"{}")
    frames, used = stepd.frames_in(data + frame(b"e", 1, b"cut")[:-1])
    assert frames == [(b"o", 0, b"hello\n"), (b"x", 0, b"{}")] and used == len(data)
    with pytest.raises(ValueError):
        stepd.frames_in(b"garbage\n")


def test_the_log_has_the_pids_then_each_tasks_output_then_its_end(supervised: Any) -> None:
    s = supervised(["echo one; echo two >&2; exit 3", "kill -TERM $$"])
    wait_until(s.ended, "the supervisor to exit once both tasks ended")
    frames = s.frames()
    kind, _, payload = frames[0]
    pids = json.loads(payload)
    assert kind == b"p" and [t for t, _pid, _ticks in pids["tasks"]] == [0, 1] and pids["stepd"][0] == s.pid
    of = {task: [(k, p) for k, t, p in frames[1:] if t == task] for task in (0, 1)}
    assert of[0][:-1] in ([(b"o", b"one\n"), (b"e", b"two\n")], [(b"e", b"two\n"), (b"o", b"one\n")])
    end0, end1 = json.loads(of[0][-1][1]), json.loads(of[1][-1][1])
    assert of[0][-1][0] == b"x" and (end0["code"], end0["signal"]) == (3, 0) and "rss" in end0
    assert of[1] == [(b"x", of[1][0][1])] and (end1["code"], end1["signal"]) == (0, signal.SIGTERM)
    assert os.read(s.bell, 4096)  # it rang


def test_output_stops_being_read_past_the_high_water_mark_until_srun_has_it(supervised: Any) -> None:
    total = 3 * stepd.HIGH_WATER
    s = supervised([f"head -c {total} /dev/zero"])
    limit = stepd.HIGH_WATER + 65536 + 4096  # one read past the mark, the p frame, headers
    wait_until(lambda: s.log.stat().st_size > stepd.HIGH_WATER, "the log to reach the mark")
    assert s.log.stat().st_size <= limit and not s.ended()  # the task is blocked on its pipe
    delivered = 0
    while not s.ended():  # srun reads as fast as it can: the agent acks what it sent
        size = s.log.stat().st_size
        if size > delivered:
            delivered = size
            s.ack(delivered)
        assert size <= delivered + limit
        time.sleep(0.005)  # sleep: srun's read loop, as fast as it polls
    frames = s.frames()
    assert sum(len(p) for k, _, p in frames if k == b"o") == total
    assert json.loads(frames[-1][2])["code"] == 0


def test_the_agents_words_go_into_the_log_between_the_tasks_output(supervised: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    s = supervised([f"echo before; while [ ! -e {go} ]; do sleep 0.01; done; echo after"])
    wait_until(lambda: any(k == b"o" for k, _, _ in s.frames()), "the first line")
    line = "slurmstepd-node1: error: *** STEP 5.0 ON node1 CANCELLED ***\n"
    os.write(s.ctl, json.dumps({"emit": ["e", -1, line]}).encode() + b"\n")
    wait_until(lambda: any(k == b"e" for k, _, _ in s.frames()), "the agent's line")
    go.touch()
    wait_until(s.ended, "the task's end")
    assert [(k, t, p) for k, t, p in s.frames()[1:-1]] == [
        (b"o", 0, b"before\n"),
        (b"e", -1, line.encode()),
        (b"o", 0, b"after\n"),
    ]
