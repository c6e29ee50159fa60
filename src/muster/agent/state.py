"""What the agent keeps on disk so that a restart (of the agent or of the controller) loses
no job and no report.

Layout under the agent's state directory::

    jobs/<job_id>.json                 one record per running batch script (pid, start ticks,
                                       the job as launched; written without fsync, see below)
    reports/<job_id>.<restarts>.json   one job_done report per ended run, until acknowledged
    delivered/<job_id>.<restarts>      an empty mark of each report acknowledged (kept
                                       ``DELIVERED_KEEP``): a launch of that attempt that
                                       comes late (from a deposed controller that resumed)
                                       is answered as done, never run a second time
    spool/job<job_id>/slurm_script     the script being run (owned by the user, 0700/0500)
    exits/<job_id>.<restarts>          a batch script's raw wait status, written by its monitor
                                       (``launcher``) when it ends, read by an agent restarted
                                       meanwhile
    steps/<job>.<attempt>.<step>.json  the pids of a running step's tasks here (written without
                                       fsync: after a crash of the machine they are gone anyway)
    musterd.pid, musterd.lock          the running agent
    instance                           this state directory's random name (tags job processes)

Every write is atomic (temporary file, rename), so a crash leaves either the old file or
the new one. Reports are also durable (fsync of the file, rename, fsync of the directory):
a job's end must outlive a crash of the machine, or the controller would take it for lost
and run it again. Job records and step records are not synced: they matter to an agent
that restarts while its jobs run, and the page cache outlives the agent's process; a crash
of the machine takes the jobs with it, and the controller then finds them lost (a record
that did not reach the disk is gone, or unreadable and ignored). Order matters when a job
ends: the report is written *before* the job record is removed, so a crash in between
leaves both and the restart sees the report and drops the record; never neither.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import stat
from typing import Any

from muster.core.clock import SystemClock

__all__ = ["StateDir"]

log = logging.getLogger(__name__)

DELIVERED_KEEP = 7 * 86400.0  # seconds a delivered report's mark is kept
PRUNE_EVERY = 1000  # ... pruned at start and after this many deliveries


class StateDir:
    def __init__(self, root: str) -> None:
        self._unsaved: dict[str, dict[str, Any]] = {}  # reports the disk would not take
        self.root = os.path.abspath(root)
        self.jobs_dir = os.path.join(self.root, "jobs")
        self.reports_dir = os.path.join(self.root, "reports")
        self.spool_dir = os.path.join(self.root, "spool")
        self.steps_dir = os.path.join(self.root, "steps")
        self.exits_dir = os.path.join(self.root, "exits")
        self.delivered_dir = os.path.join(self.root, "delivered")
        self._drops = 0

    def create(self) -> None:
        """Make the directories. The root and spool are traversable (0711) so that a job's
        user can reach its own spool directory; records and reports are 0700."""
        for path, mode in (
            (self.root, 0o711),
            (self.jobs_dir, 0o700),
            (self.reports_dir, 0o700),
            (self.spool_dir, 0o711),
            (self.steps_dir, 0o700),
            (self.exits_dir, 0o700),
            (self.delivered_dir, 0o700),
        ):
            os.makedirs(path, mode=mode, exist_ok=True)
        self.prune_delivered()
        # A pre-existing directory keeps its mode, but jobs of other users must be able to
        # reach their spooled script: let anyone traverse (not list) the way to it.
        for path in (self.root, self.spool_dir):
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode & 0o011 != 0o011:
                os.chmod(path, mode | 0o011)

    def instance_id(self) -> str:
        """A random name for this agent, kept across restarts (it tags job processes)."""
        path = os.path.join(self.root, "instance")
        try:
            with open(path) as f:
                value = f.read().strip()
            if value:
                return value
        except FileNotFoundError:
            pass
        value = secrets.token_hex(4)
        _write_text(path, value + "\n")
        return value

    # -- running jobs ------------------------------------------------------------------

    def save_job(self, record: dict[str, Any] | str, job_id: int | None = None) -> None:
        """The record of a running job, a dict or its JSON text (then with ``job_id``); not
        synced: see the module docstring."""
        if isinstance(record, dict):
            job_id, record = record["job_id"], json.dumps(record, separators=(",", ":"))
        path = os.path.join(self.jobs_dir, f"{int(job_id or 0)}.json")
        _write_text(path, record, durable=False)

    def drop_job(self, job_id: int) -> None:
        _unlink(os.path.join(self.jobs_dir, f"{int(job_id)}.json"))

    def jobs(self) -> list[dict[str, Any]]:
        return [record for _, record in _read_all(self.jobs_dir)]

    # -- reports -----------------------------------------------------------------------

    @staticmethod
    def report_key(job_id: int, restart_count: int) -> str:
        return f"{int(job_id)}.{int(restart_count)}"

    def save_report(self, report: dict[str, Any]) -> str:
        """Keep a report until the controller acknowledges it. On a disk that cannot take
        it (full, read-only, failing) it is kept in memory instead, and said so in the log:
        it is still delivered, though it would not survive a restart of the agent."""
        key = self.report_key(report["job_id"], report.get("restart_count") or 0)
        try:
            _write_json(os.path.join(self.reports_dir, f"{key}.json"), report)
        except OSError as exc:
            log.error(
                "cannot save the report %s under %s (%s): keeping it in memory",
                key,
                self.reports_dir,
                exc.strerror or exc,
            )
            self._unsaved[key] = report
        return key

    def has_report(self, job_id: int, restart_count: int) -> bool:
        """This attempt ended here: its report waits for the controller, or was acknowledged
        (``delivered/``, for ``DELIVERED_KEEP``)."""
        key = self.report_key(job_id, restart_count)
        return (
            key in self._unsaved
            or os.path.exists(os.path.join(self.reports_dir, f"{key}.json"))
            or os.path.exists(os.path.join(self.delivered_dir, key))
        )

    def drop_report(self, key: str) -> None:
        """The controller has the report: marked delivered (first, so that a crash between
        the two leaves both, never neither), then removed."""
        try:
            os.close(os.open(os.path.join(self.delivered_dir, key), os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:  # only the late-launch guard is lost
            log.error("cannot mark the report %s delivered: %s", key, exc.strerror or exc)
        self._unsaved.pop(key, None)
        _unlink(os.path.join(self.reports_dir, f"{key}.json"))
        self._drops += 1
        if self._drops % PRUNE_EVERY == 0:
            self.prune_delivered()

    def prune_delivered(self, now: float | None = None) -> None:
        """Forget the marks of reports delivered more than ``DELIVERED_KEEP`` ago."""
        limit = (SystemClock().now() if now is None else now) - DELIVERED_KEEP
        try:
            entries = list(os.scandir(self.delivered_dir))
        except OSError:
            return
        for entry in entries:
            try:
                if entry.stat().st_mtime < limit:
                    _unlink(entry.path)
            except OSError:
                continue

    def reports(self) -> list[tuple[str, dict[str, Any]]]:
        """Pending reports, oldest first (those kept only in memory last)."""
        return _read_all(self.reports_dir) + list(self._unsaved.items())

    def ended(self) -> list[list[int]]:
        """``[[job_id, restart_count], ...]`` of the pending reports (from their names)."""
        out = []
        try:
            names = os.listdir(self.reports_dir)
        except OSError:
            names = []
        for name in [*(n[:-5] for n in names if n.endswith(".json")), *self._unsaved]:
            job, _, attempt = name.partition(".")
            if job.isdigit() and attempt.isdigit():
                out.append([int(job), int(attempt)])
        return out

    # -- exit statuses left by monitors ------------------------------------------------

    def exit_path(self, job_id: int, restart_count: int) -> str:
        return os.path.join(self.exits_dir, self.report_key(job_id, restart_count))

    def exit_status(self, job_id: int, restart_count: int) -> int | None:
        """The raw wait status the job's monitor recorded, or None (not ended, or lost)."""
        try:
            with open(self.exit_path(job_id, restart_count)) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def drop_exit(self, job_id: int, restart_count: int) -> None:
        _unlink(self.exit_path(job_id, restart_count))

    # -- running steps -----------------------------------------------------------------

    def save_step(self, key: str, record: dict[str, Any]) -> None:
        _write_text(
            os.path.join(self.steps_dir, f"{key}.json"), json.dumps(record, separators=(",", ":")), durable=False
        )

    def drop_step(self, key: str) -> None:
        _unlink(os.path.join(self.steps_dir, f"{key}.json"))

    def steps(self) -> list[tuple[str, dict[str, Any]]]:
        return _read_all(self.steps_dir)

    # -- spool -------------------------------------------------------------------------

    def spool_for(self, job_id: int) -> str:
        return os.path.join(self.spool_dir, f"job{int(job_id):05d}")

    def clean_spool(self, job_id: int) -> None:
        shutil.rmtree(self.spool_for(job_id), ignore_errors=True)


def _write_json(path: str, data: dict[str, Any]) -> None:
    _write_text(path, json.dumps(data, separators=(",", ":")))


def _write_text(path: str, text: str, durable: bool = True) -> None:
    directory = os.path.dirname(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    if not durable:
        return
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read_all(directory: str) -> list[tuple[str, dict[str, Any]]]:
    entries: list[tuple[float, str, dict[str, Any]]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue  # leftovers of an interrupted write end in .tmp.<pid>
        path = os.path.join(directory, name)
        try:
            with open(path) as f:
                data = json.load(f)
            mtime = os.stat(path).st_mtime
        except (OSError, ValueError) as exc:
            log.error("ignoring unreadable state file %s: %s", path, exc)
            continue
        entries.append((mtime, name[: -len(".json")], data))
    entries.sort(key=lambda e: (e[0], e[1]))
    return [(key, data) for _, key, data in entries]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a read-only or failing disk: a stale file is sorted out later
        log.error("cannot remove %s: %s", path, exc.strerror or exc)
