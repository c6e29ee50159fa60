"""Reading workload traces: the Standard Workload Format (SWF) and GPU job CSVs.

Both readers turn a file into a ``Trace``: a list of ``TraceJob`` in submission order plus
what the file says about the machine. A ``TraceJob`` is the simulator's view of one record:
when it arrived, how long it really ran, how much of the machine it held (processors for
SWF, GPUs for a GPU trace), and the user's runtime estimate when the trace has one.

Conventions (those of the Parallel Workloads Archive):

* SWF lines hold 18 whitespace-separated numbers; ``-1`` means unknown; lines starting
  with ``;`` are header comments (``; MaxProcs: 100``), kept in ``Trace.header``.
* A job's size is ``max(allocated processors, requested processors)``.
* Records whose run time is ``<= 0`` or whose size is unknown are not jobs the simulator can
  replay: they are counted in ``Trace.skipped`` by reason, never silently lost.
* GPU CSVs have the columns ``submission_time,duration,num_gpu`` (a ``job_id`` column and
  others may be present; with no header line those three are taken in that order). A tarball
  of several such files (the Microsoft ITP trace) is read one member at a time, chosen with
  ``cluster``.

A malformed line (wrong field count, a field that is not a number, a negative submit time)
raises ``TraceError`` naming the file and line, unless ``skip_bad_lines`` is set, in which
case it is recorded in ``Trace.bad_lines`` (with the same message) and skipped. A trace that
cannot be opened or holds no job at all also raises ``TraceError``.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import tarfile
from collections import Counter
from dataclasses import dataclass, field

from muster.core.errors import MusterError

__all__ = [
    "SWF_FIELDS",
    "SwfRecord",
    "Trace",
    "TraceError",
    "TraceJob",
    "detect_format",
    "read_trace",
]

FORMATS = ("swf", "gpu-csv")

# The 18 SWF fields, in file order (names follow the archive's definitions).
SWF_FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_procs",
    "avg_cpu_time",
    "used_memory",
    "requested_procs",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable_id",
    "queue_id",
    "partition_id",
    "preceding_job",
    "think_time",
)

GPU_COLUMNS = ("submission_time", "duration", "num_gpu")


class TraceError(MusterError):
    """The trace cannot be read; the message names the file (and line) at fault."""


@dataclass(frozen=True, slots=True)
class SwfRecord:
    """One SWF line, every field kept (``-1`` = unknown). Times in seconds, memory in KB."""

    job_number: int
    submit_time: float
    wait_time: float
    run_time: float
    allocated_procs: int
    avg_cpu_time: float
    used_memory: float
    requested_procs: int
    requested_time: float
    requested_memory: float
    status: int
    user_id: int
    group_id: int
    executable_id: int
    queue_id: int
    partition_id: int
    preceding_job: int
    think_time: float


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One replayable job.

    ``size`` is in the trace's unit (``Trace.unit``: processors or GPUs). ``estimate`` is the
    user's runtime estimate in seconds, None when the trace has none. ``recorded_wait`` is the
    wait the job had in the schedule the trace recorded (SWF field 3), None when unknown.
    ``status`` is SWF's (1 completed, 0 failed, 5 cancelled), None for GPU traces.
    """

    trace_id: str
    submit: float
    run: float
    size: int
    estimate: float | None = None
    user: int | None = None
    group: int | None = None
    recorded_wait: float | None = None
    status: int | None = None
    line: int = 0
    record: SwfRecord | None = None


@dataclass(slots=True)
class Trace:
    name: str
    format: str
    unit: str  # "procs" or "gpus"
    jobs: list[TraceJob]
    header: dict[str, str] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    bad_lines: list[str] = field(default_factory=list)
    records: int = 0  # job lines read (replayable or not)

    def header_int(self, key: str) -> int | None:
        """An integer header value (``MaxProcs``), None if absent or unreadable."""
        value = self.header.get(key.lower())
        try:
            return int(value.split()[0]) if value else None
        except ValueError:
            return None


# --- opening -------------------------------------------------------------------------------


def _read_source(path: str, cluster: str | None) -> tuple[str, str]:
    """The trace's text and the name to use in messages (``archive.tar.gz:cluster04.csv``)."""
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such trace file")
    if os.path.isdir(path):
        raise TraceError(f"{path}: is a directory, not a trace file")
    try:
        if tarfile.is_tarfile(path):
            return _read_member(path, cluster)
        if cluster is not None:
            raise TraceError(f"{path}: --cluster selects a file inside a tarball; this is not one")
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, tarfile.TarError) as e:
        raise TraceError(f"{path}: cannot read the trace: {e}") from None
    return _decode(data, path), path


def _read_member(path: str, cluster: str | None) -> tuple[str, str]:
    with tarfile.open(path) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv")]
        names = sorted(os.path.basename(m.name) for m in members)
        if cluster is None:
            raise TraceError(
                f"{path}: a tarball holds several traces; choose one with --cluster "
                f"({', '.join(n.removesuffix('.csv') for n in names) or 'none found'})"
            )
        wanted = {cluster, f"{cluster}.csv"}
        match = [m for m in members if os.path.basename(m.name) in wanted or m.name in wanted]
        if not match:
            raise TraceError(
                f"{path}: no cluster {cluster!r} in the tarball "
                f"(it has {', '.join(n.removesuffix('.csv') for n in names) or 'no CSV file'})"
            )
        handle = tar.extractfile(match[0])
        assert handle is not None  # a regular file member
        data = handle.read()
        name = f"{path}:{os.path.basename(match[0].name)}"
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return _decode(data, name), name


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:4096]:
        raise TraceError(f"{name}: binary data, not a text trace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# --- format detection --------------------------------------------------------------------------


def detect_format(text: str, name: str = "<trace>") -> str:
    """``swf`` or ``gpu-csv``, from the first meaningful line."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            return "swf"
        if "," in line:
            return "gpu-csv"
        if len(line.split()) == len(SWF_FIELDS):
            return "swf"
        break
    raise TraceError(f"{name}: cannot tell the trace format (neither SWF nor a GPU CSV); use --format")


# --- SWF ---------------------------------------------------------------------------------------


def _number(token: str) -> float:
    value = float(token)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(token)
    return value


def _parse_swf_line(line: str, where: str) -> SwfRecord:
    tokens = line.split()
    if len(tokens) != len(SWF_FIELDS):
        raise TraceError(f"{where}: expected {len(SWF_FIELDS)} fields, found {len(tokens)}")
    values: list[float] = []
    for i, tok in enumerate(tokens):
        try:
            values.append(_number(tok))
        except ValueError:
            raise TraceError(f"{where}: field {i + 1} ({SWF_FIELDS[i]}) is not a number: {tok!r}") from None
    ints = {0, 4, 7, 10, 11, 12, 13, 14, 15, 16}
    kwargs = {name: (int(v) if i in ints else v) for i, (name, v) in enumerate(zip(SWF_FIELDS, values, strict=True))}
    rec = SwfRecord(**kwargs)  # type: ignore[arg-type]
    if rec.submit_time < 0:
        raise TraceError(f"{where}: submit time is negative ({tokens[1]})")
    return rec


def _swf_jobs(text: str, name: str, skip_bad: bool) -> Trace:
    trace = Trace(name=name, format="swf", unit="procs", jobs=[])
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip() and " " not in key.strip():
                trace.header.setdefault(key.strip().lower(), value.strip())
            continue
        where = f"{name}:{lineno}"
        try:
            rec = _parse_swf_line(line, where)
        except TraceError as e:
            if not skip_bad:
                raise
            trace.bad_lines.append(str(e))
            continue
        trace.records += 1
        size = max(rec.allocated_procs, rec.requested_procs)
        if rec.run_time <= 0:
            trace.skipped["run time <= 0"] += 1
            continue
        if size <= 0:
            trace.skipped["size unknown"] += 1
            continue
        trace.jobs.append(
            TraceJob(
                trace_id=str(rec.job_number),
                submit=rec.submit_time,
                run=rec.run_time,
                size=size,
                estimate=rec.requested_time if rec.requested_time > 0 else None,
                user=rec.user_id if rec.user_id >= 0 else None,
                group=rec.group_id if rec.group_id >= 0 else None,
                recorded_wait=rec.wait_time if rec.wait_time >= 0 else None,
                status=rec.status,
                line=lineno,
                record=rec,
            )
        )
    return trace


# --- GPU CSV -----------------------------------------------------------------------------------


def _gpu_jobs(text: str, name: str, skip_bad: bool) -> Trace:
    trace = Trace(name=name, format="gpu-csv", unit="gpus", jobs=[])
    rows = csv.reader(io.StringIO(text))
    columns: dict[str, int] | None = None
    id_col: int | None = None
    width = 0
    for row in rows:
        lineno = rows.line_num
        if not row or all(not c.strip() for c in row):
            continue
        cells = [c.strip() for c in row]
        where = f"{name}:{lineno}"
        if columns is None:
            lowered = [c.lower() for c in cells]
            if all(col in lowered for col in GPU_COLUMNS):
                columns = {col: lowered.index(col) for col in GPU_COLUMNS}
                id_col = lowered.index("job_id") if "job_id" in lowered else None
                width = len(cells)
                continue
            if any(c.lower() in GPU_COLUMNS or c.lower() == "job_id" for c in cells):
                missing = [c for c in GPU_COLUMNS if c not in lowered]
                raise TraceError(f"{where}: the header lacks column(s) {', '.join(missing)}")
            columns = {col: i for i, col in enumerate(GPU_COLUMNS)}
            width = len(GPU_COLUMNS)
        try:
            job = _gpu_row(cells, columns, id_col, width, where, lineno)
        except TraceError as e:
            if not skip_bad:
                raise
            trace.bad_lines.append(str(e))
            continue
        trace.records += 1
        if job.run <= 0:
            trace.skipped["run time <= 0"] += 1
            continue
        if job.size <= 0:
            trace.skipped["size unknown"] += 1
            continue
        trace.jobs.append(job)
    return trace


def _gpu_row(
    cells: list[str], columns: dict[str, int], id_col: int | None, width: int, where: str, lineno: int
) -> TraceJob:
    if len(cells) != width:
        raise TraceError(f"{where}: expected {width} columns, found {len(cells)}")
    values: dict[str, float] = {}
    for col, idx in columns.items():
        try:
            values[col] = _number(cells[idx])
        except ValueError:
            raise TraceError(f"{where}: {col} is not a number: {cells[idx]!r}") from None
    if values["submission_time"] < 0:
        raise TraceError(f"{where}: submission_time is negative ({cells[columns['submission_time']]})")
    gpus = values["num_gpu"]
    if gpus != int(gpus):
        raise TraceError(f"{where}: num_gpu is not a whole number: {cells[columns['num_gpu']]!r}")
    return TraceJob(
        trace_id=cells[id_col] if id_col is not None else str(lineno),
        submit=values["submission_time"],
        run=values["duration"],
        size=int(gpus),
        line=lineno,
    )


# --- entry point -------------------------------------------------------------------------------


def read_trace(
    path: str,
    fmt: str | None = None,
    cluster: str | None = None,
    skip_bad_lines: bool = False,
) -> Trace:
    """Read ``path`` (plain, gzip, or a tarball member chosen by ``cluster``).

    ``fmt`` is ``swf``, ``gpu-csv`` or None to detect it from the content. Jobs come back
    sorted by submit time (stable, so equal times keep file order).
    """
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (choose {' or '.join(FORMATS)})")
    text, name = _read_source(path, cluster)
    fmt = fmt or detect_format(text, name)
    trace = (_swf_jobs if fmt == "swf" else _gpu_jobs)(text, name, skip_bad_lines)
    if not trace.jobs:
        detail = ", ".join(f"{n} {why}" for why, n in trace.skipped.items())
        raise TraceError(
            f"{name}: no replayable job in the trace"
            + (f" ({trace.records} records: {detail})" if trace.records else " (no job line found)")
        )
    trace.jobs.sort(key=lambda j: j.submit)
    return trace
