"""The agent's side of job progress: a file per job attempt that its processes append to
(``muster.progress``, or ``echo "step N" >> $MUSTER_PROGRESS``), read at each heartbeat.

* ``prepare(root, job_id, attempt, uid, gid)`` creates ``<state>/progress/<job>.<attempt>``
  (the directory root's, 0711; the file the job user's, 0600) and returns its path, which
  the batch script and every srun task get as ``MUSTER_PROGRESS``; beside it
  ``<job>.<attempt>.stacks`` (also the user's, 0600), where ``muster.progress``'s SIGUSR1
  handler writes Python stacks when the agent collects a hang's evidence
  (``agent.hangevidence``). Only the agent creates files there, so a job cannot point the
  (root) agent at another file.
* ``ProgressWatch.poll(now, active)`` reads what was appended since the last poll (at most
  ``READ_LIMIT`` bytes: a flood keeps only its tail) and returns the reports that changed,
  one dict per job attempt: ``job_id``, ``attempt``, ``first`` (time of its first step
  here), ``step``/``step_time``, ``ckpt_step``/``ckpt_time``, ``section`` (the name of a
  declared slow section open here, else None) and ``section_time`` (its last begin or end),
  ``ranks`` (each rank's ``[step, time, median seconds per step, samples]`` over its last
  ``PACE_WINDOW`` steps: the straggler detector's input, ``core.stragglers``; rank "" for
  lines that name none), and, once, ``evidence`` (a hang's evidence collected here: ``save_evidence`` leaves it in
  ``<job>.<attempt>.evidence``, the next poll takes it). Files of attempts no longer
  ``active`` here are removed once their last report was handed out.
* ``save_deadline(root, job_id, attempt, deadline)``: a preempted job's deadline (epoch
  seconds, one line) in ``<job>.<attempt>.preempt`` (the agent's, 0644), written before the
  warning signal is sent, where ``muster.progress.preempt_deadline()`` reads it (the
  checkpoint handshake, ``ctld.preemption``).

Line grammar: ``step N [TIME]`` or ``checkpoint N [TIME]`` (``ckpt`` is accepted),
``begin NAME [TIME]`` and ``end NAME [TIME]`` (a slow section: checkpoint save, evaluation;
each rank's begin counts until its end); TIME is
seconds since the epoch, taken as the agent's own time of reading when absent, in the future
or unparsable. Trailing ``key=value`` words: ``rank=R`` (the reporting rank) and ``busy=S`` (the
seconds the rank worked on that step, its waits excluded). Other lines are ignored. Steps only go forward (a restarted attempt writes to
a new file).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENV",
    "ProgressWatch",
    "allocation_path",
    "deadline_path",
    "parse_lines",
    "prepare",
    "progress_dir",
    "progress_env",
    "save_allocation",
    "save_deadline",
    "save_evidence",
    "stacks_path",
]

log = logging.getLogger(__name__)

READ_LIMIT = 64 * 1024
PACE_WINDOW = 9  # step durations per rank behind its rolling median (stragglers)
MAX_RANKS = 256  # ranks timed per job attempt on one node (a report stays small)
KEEP_YOUNG = 60.0  # seconds a file of an attempt not (yet) running here is kept unread
ENV = "MUSTER_PROGRESS"  # the name muster.progress reads


def progress_dir(root: str) -> str:
    return os.path.join(root, "progress")


EVIDENCE_SUFFIX = ".evidence"


def save_evidence(root: str, job_id: int, attempt: int, evidence: list[dict[str, Any]]) -> None:
    """Leave a hang's evidence (``agent.hangevidence.collect``) for ``ProgressWatch`` to send
    with the attempt's next report (written whole, then renamed into place)."""
    directory = progress_dir(root)
    os.makedirs(directory, mode=0o711, exist_ok=True)
    final = os.path.join(directory, f"{int(job_id)}.{int(attempt)}{EVIDENCE_SUFFIX}")
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(evidence, f)
    os.replace(tmp, final)


def deadline_path(path: str) -> str:
    """Where the processes reporting to progress file ``path`` read their preemption
    deadline (``muster.progress.preempt_deadline``)."""
    return path + ".preempt"


def save_deadline(root: str, job_id: int, attempt: int, deadline: float) -> None:
    """Leave a preempted attempt's deadline beside its progress file (written whole, then
    renamed into place, so a reader never sees half a line)."""
    directory = progress_dir(root)
    os.makedirs(directory, mode=0o711, exist_ok=True)
    final = deadline_path(os.path.join(directory, f"{int(job_id)}.{int(attempt)}"))
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(f"{float(deadline):.3f}\n")
    os.chmod(tmp, 0o644)  # whatever the umask: the job's user reads it
    os.replace(tmp, final)


def allocation_path(path: str) -> str:
    """Where the processes reporting to progress file ``path`` read their job's allocation
    after a node of it was replaced (``muster.progress.allocation``)."""
    return path + ".allocation"


def save_allocation(root: str, job_id: int, attempt: int, data: dict[str, Any]) -> None:
    """Leave a job attempt's repaired allocation (JSON) beside its progress file, written
    whole, then renamed into place."""
    directory = progress_dir(root)
    os.makedirs(directory, mode=0o711, exist_ok=True)
    final = allocation_path(os.path.join(directory, f"{int(job_id)}.{int(attempt)}"))
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.chmod(tmp, 0o644)  # whatever the umask: the job's user reads it
    os.replace(tmp, final)


def stacks_path(path: str) -> str:
    """Where the processes reporting to progress file ``path`` dump their Python stacks."""
    return path + ".stacks"


def prepare(root: str, job_id: int, attempt: int, uid: int, gid: int) -> str:
    """The progress file of this job attempt on this node (and its stacks file), created
    for the job's user."""
    directory = progress_dir(root)
    os.makedirs(directory, mode=0o711, exist_ok=True)
    path = os.path.join(directory, f"{int(job_id)}.{int(attempt)}")
    for name in (path, stacks_path(path)):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.geteuid() == 0 and uid >= 0:
                os.fchown(fd, uid, gid if gid >= 0 else -1)
        finally:
            os.close(fd)
    return path


def progress_env(root: str, job: dict[str, Any]) -> dict[str, str]:
    """``{"MUSTER_PROGRESS": path}`` for a batch script or task of ``job`` (a job dict with
    ``job_id``, ``restart_count``, ``uid``, ``gid``); empty, with a warning, when the file
    cannot be made (the job runs anyway, unwatched)."""
    try:
        path = prepare(
            root,
            int(job["job_id"]),
            int(job.get("restart_count") or 0),
            int(job.get("uid", -1)),
            int(job.get("gid", -1)),
        )
    except (OSError, KeyError, TypeError, ValueError) as exc:
        log.warning("job %s: no progress file: %s", job.get("job_id"), exc)
        return {}
    return {ENV: path}


@dataclass(slots=True)
class _Rank:
    """One rank's steps on this node: its latest, and its last ``PACE_WINDOW`` step
    durations (seconds per step: its ``busy`` time when it says it, else the time since its
    previous step over the steps between)."""

    step: int
    time: float
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=PACE_WINDOW))

    def add(self, n: int, t: float, busy: float | None) -> None:
        if n <= self.step:
            return  # a repeated or late line (ranks reporting without a rank word)
        if busy is not None:
            self.durations.append(busy)
        elif t > self.time:
            self.durations.append((t - self.time) / (n - self.step))
        self.step, self.time = n, max(t, self.time)

    def wire(self) -> list[Any]:
        """``[step, time, median seconds per step, samples]`` (``core.stragglers.node_pace``)."""
        median = statistics.median(self.durations) if self.durations else None
        return [self.step, self.time, None if median is None else round(median, 4), len(self.durations)]


def _busy(extra: dict[str, str]) -> float | None:
    try:
        busy = float(extra["busy"])
    except (KeyError, ValueError):
        return None
    return busy if 0 <= busy < 1e7 else None


@dataclass(slots=True)
class _Latest:
    offset: int = 0
    first: float | None = None
    step: int | None = None
    step_time: float | None = None
    ckpt_step: int | None = None
    ckpt_time: float | None = None
    sections: dict[str, int] = field(default_factory=dict)  # open sections: name -> ranks in it
    section_time: float | None = None
    evidence: list[dict[str, Any]] | None = None
    ranks: dict[str, _Rank] = field(default_factory=dict)  # rank ("" unsaid) -> its steps here
    changed: bool = False

    def report(self, job_id: int, attempt: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job_id": job_id,
            "attempt": attempt,
            "first": self.first,
            "step": self.step,
            "step_time": self.step_time,
            "ckpt_step": self.ckpt_step,
            "ckpt_time": self.ckpt_time,
            "section": min(self.sections) if self.sections else None,
            "section_time": self.section_time,
        }
        if self.ranks:
            out["ranks"] = {r: v.wire() for r, v in self.ranks.items()}
        if self.evidence is not None:
            out["evidence"], self.evidence = self.evidence, None
        return out


def parse_lines(text: str, now: float) -> list[tuple[str, int | str, float]]:
    """``(kind, n, time)`` for each well-formed line; kind is ``step`` or ``checkpoint``
    (n: the step) or ``begin`` or ``end`` (n: the section's name)."""
    return [(kind, n, t) for kind, n, t, _extra in parse_records(text, now)]


def parse_records(text: str, now: float) -> list[tuple[str, int | str, float, dict[str, str]]]:
    """``parse_lines`` with each line's ``key=value`` words (``rank=3 busy=0.52``)."""
    out: list[tuple[str, int | str, float, dict[str, str]]] = []
    for line in text.splitlines():
        words = line.split()
        extra: dict[str, str] = {}
        while len(words) > 2 and "=" in words[-1]:
            key, _, value = words.pop().partition("=")
            extra[key[:16]] = value[:32]
        if len(words) < 2 or words[0] not in ("step", "checkpoint", "ckpt", "begin", "end"):
            continue
        n: int | str
        if words[0] in ("begin", "end"):
            n = words[1][:64]
        else:
            try:
                n = int(words[1])
            except ValueError:
                continue
        t = now
        if len(words) > 2:
            try:
                t = float(words[2])
            except ValueError:
                t = now
            if not (0 < t <= now):  # a clock ahead of ours, or junk: our time of reading
                t = now
        out.append(("checkpoint" if words[0] == "ckpt" else words[0], n, t, extra))
    return out


class ProgressWatch:
    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[tuple[int, int], _Latest] = {}

    def add_evidence(self, job_id: int, attempt: int, evidence: list[dict[str, Any]]) -> None:
        """A hang's evidence collected here (``agent.hangevidence``): it goes with the
        attempt's next report."""
        latest = self.files.setdefault((int(job_id), int(attempt)), _Latest())
        latest.evidence = evidence
        latest.changed = True

    def _take_evidence(self, directory: str, name: str) -> None:
        """``<job>.<attempt>.evidence`` (``save_evidence``): handed to the next report."""
        job, _, att = name[: -len(EVIDENCE_SUFFIX)].partition(".")
        path = os.path.join(directory, name)
        try:
            if job.isdigit() and att.isdigit():
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                with os.fdopen(fd, "rb") as f:
                    data = json.loads(f.read(1 << 20))
                if isinstance(data, list):
                    self.add_evidence(int(job), int(att), data)
        except (OSError, ValueError) as exc:
            log.warning("hang evidence %s unreadable: %s", name, exc)
        with contextlib.suppress(OSError):
            os.unlink(path)

    def poll(self, now: float, active: set[tuple[int, int]]) -> list[dict[str, Any]]:
        directory = progress_dir(self.root)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            names = []
        except OSError as exc:
            log.warning("cannot list %s: %s", directory, exc.strerror or exc)
            return []
        reports = []
        for name in names:
            if name.endswith(EVIDENCE_SUFFIX):
                self._take_evidence(directory, name)
        for name in names:
            job, _, att = name.partition(".")
            if not (job.isdigit() and att.isdigit()):
                continue
            key = (int(job), int(att))
            latest = self.files.setdefault(key, _Latest())
            self._read(os.path.join(directory, name), latest, now)
            if latest.changed:
                latest.changed = False
                reports.append(latest.report(*key))
            elif key not in active and not self._young(os.path.join(directory, name), now):
                # (a young file may belong to a launch under way: not yet among ``active``)
                for gone in (name, stacks_path(name), deadline_path(name), allocation_path(name)):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(directory, gone))
                del self.files[key]
        for key in [k for k in self.files if f"{k[0]}.{k[1]}" not in names]:
            latest = self.files.pop(key)
            if latest.evidence is not None:  # collected for an attempt whose file is gone
                reports.append(latest.report(*key))
        return reports

    @staticmethod
    def _young(path: str, now: float) -> bool:
        try:
            return now - os.stat(path).st_mtime < KEEP_YOUNG
        except OSError:
            return False

    @staticmethod
    def _read(path: str, latest: _Latest, now: float) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            size = os.fstat(fd).st_size
            if size < latest.offset:  # truncated by the job: read it again from the start
                latest.offset = 0
            if size == latest.offset:
                return
            start = max(latest.offset, size - READ_LIMIT)
            os.lseek(fd, start, os.SEEK_SET)
            data = os.read(fd, size - start)
        except OSError:
            return
        finally:
            os.close(fd)
        cut = 0
        if start > latest.offset:  # skipped a flood: drop its partial first line
            cut = data.find(b"\n") + 1
        # only whole lines: a line being written is read next time
        end = data.rfind(b"\n") + 1
        if end <= cut:
            latest.offset = start + cut if cut else latest.offset
            return
        latest.offset = start + end
        data = data[cut:end]
        for kind, n, t, extra in parse_records(data.decode(errors="replace"), now):
            if isinstance(n, str):  # a section's begin or end
                count = latest.sections.get(n, 0) + (1 if kind == "begin" else -1)
                if count > 0:
                    latest.sections[n] = count
                else:
                    latest.sections.pop(n, None)
                latest.section_time = t
            elif kind == "step":
                if latest.first is None:
                    latest.first = t
                if latest.step is None or n >= latest.step:
                    latest.step, latest.step_time = n, t
                rank = extra.get("rank", "")
                pace = latest.ranks.get(rank)
                if pace is not None:
                    pace.add(n, t, _busy(extra))
                elif len(latest.ranks) < MAX_RANKS:
                    latest.ranks[rank] = _Rank(n, t)
            elif latest.ckpt_step is None or n >= latest.ckpt_step:
                latest.ckpt_step, latest.ckpt_time = n, t
            latest.changed = True
