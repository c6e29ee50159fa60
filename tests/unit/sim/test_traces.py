"""Trace readers: every SWF field, GPU CSVs (plain and in a tarball), and errors that name
the file and line."""

from __future__ import annotations

import gzip
import io
import pathlib
import tarfile
from collections.abc import Callable

import pytest

from muster.sim.traces import SWF_FIELDS, TraceError, detect_format, read_trace

SWF = """; Version: 2.2
; MaxNodes: 100
; MaxProcs: 128
; UnixStartTime: 843480031
; Note: uses the EASY scheduler
;
    1        0  964980  97225   56   12.5  2048   60  210000  4096  1   7   3   2  1  1  -1  -1
    2       10      20     30   -1     -1    -1    8     100    -1  0   8   4  -1  0  2   1  15
    3       20      -1      0    4     -1    -1    4     100    -1  5   9   4  -1  0  2  -1  -1
    4       30      -1     50   -1     -1    -1   -1      -1    -1  1   9   4  -1  0  2  -1  -1
"""


def test_an_swf_record_keeps_all_eighteen_fields(write_text: Callable[[str, str], str]) -> None:
    trace = read_trace(write_text("t.swf", SWF))
    assert trace.format == "swf" and trace.unit == "procs"
    rec = trace.jobs[0].record
    assert rec is not None
    assert [getattr(rec, f) for f in SWF_FIELDS] == [
        1,
        0,
        964980,
        97225,
        56,
        12.5,
        2048,
        60,
        210000,
        4096,
        1,
        7,
        3,
        2,
        1,
        1,
        -1,
        -1,
    ]
    second = trace.jobs[1].record
    assert second is not None and second.preceding_job == 1 and second.think_time == 15


def test_swf_conventions_size_estimate_and_skips(write_text: Callable[[str, str], str]) -> None:
    trace = read_trace(write_text("t.swf", SWF))
    first, second = trace.jobs
    assert first.size == 60  # max(allocated 56, requested 60)
    assert first.estimate == 210000 and first.recorded_wait == 964980 and first.status == 1
    assert first.user == 7 and first.group == 3
    assert second.size == 8 and second.status == 0
    assert trace.records == 4
    assert trace.skipped == {"run time <= 0": 1, "size unknown": 1}


def test_the_swf_header_is_kept(write_text: Callable[[str, str], str]) -> None:
    trace = read_trace(write_text("t.swf", SWF))
    assert trace.header_int("MaxProcs") == 128
    assert trace.header_int("maxnodes") == 100
    assert trace.header_int("UnixStartTime") == 843480031
    assert trace.header["note"] == "uses the EASY scheduler"


def test_a_gzipped_swf_reads_like_the_plain_one(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.swf.gz"
    path.write_bytes(gzip.compress(SWF.encode()))
    assert len(read_trace(str(path)).jobs) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("5 40 -1 10 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1", "expected 18 fields, found 17"),
        ("5 40 -1 ten 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 -1", "field 4 (run_time) is not a number: 'ten'"),
        ("5 -3 -1 10 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 -1", "submit time is negative (-3)"),
        ("5 40 -1 10 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 nan", "field 18 (think_time) is not a number: 'nan'"),
    ],
)
def test_a_malformed_swf_line_is_reported_with_its_line_number(
    write_text: Callable[[str, str], str], line: str, message: str
) -> None:
    lines = SWF.splitlines()
    lines[8] = line  # the third job record, line 9 of the file
    path = write_text("t.swf", "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value) == f"{path}:9: {message}"


def test_bad_lines_can_be_skipped_and_are_still_reported(
    write_text: Callable[[str, str], str],
) -> None:
    path = write_text("t.swf", SWF + "oops\n6 50 -1 10 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 -1\n")
    trace = read_trace(path, skip_bad_lines=True)
    assert [j.trace_id for j in trace.jobs] == ["1", "2", "6"]
    assert trace.bad_lines == [f"{path}:11: expected 18 fields, found 1"]
    with pytest.raises(TraceError, match=":11: expected 18 fields"):
        read_trace(path)


GPU_CSV = """job_id,submission_time,duration,num_gpu
a,100,50,1
b,90,3600,16
c,120,0,8
"""


def test_a_gpu_csv_is_read_in_submission_order(write_text: Callable[[str, str], str]) -> None:
    trace = read_trace(write_text("c.csv", GPU_CSV))
    assert trace.format == "gpu-csv" and trace.unit == "gpus"
    assert [(j.trace_id, j.submit, j.run, j.size) for j in trace.jobs] == [
        ("b", 90, 3600, 16),
        ("a", 100, 50, 1),
    ]
    assert all(j.estimate is None for j in trace.jobs)
    assert trace.skipped == {"run time <= 0": 1}


def test_a_gpu_csv_without_header_uses_the_three_columns_in_order(
    write_text: Callable[[str, str], str],
) -> None:
    trace = read_trace(write_text("c.csv", "0,10,2\n5,20,4\n"), fmt="gpu-csv")
    assert [(j.submit, j.run, j.size) for j in trace.jobs] == [(0, 10, 2), (5, 20, 4)]


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (GPU_CSV + "d,130,10\n", 5, "expected 4 columns, found 3"),
        (GPU_CSV + "d,130,ten,1\n", 5, "duration is not a number: 'ten'"),
        (GPU_CSV + "\nd,130,10,1.5\n", 6, "num_gpu is not a whole number: '1.5'"),
        ("job_id,submission_time,num_gpu\nx,1,2\n", 1, "the header lacks column(s) duration"),
    ],
)
def test_a_malformed_csv_line_is_reported_with_its_line_number(
    write_text: Callable[[str, str], str], text: str, where: int, message: str
) -> None:
    path = write_text("c.csv", text)
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value) == f"{path}:{where}: {message}"


def _tarball(path: pathlib.Path, files: dict[str, str]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_one_cluster_is_read_out_of_a_tarball(tmp_path: pathlib.Path) -> None:
    path = _tarball(
        tmp_path / "t.tar.gz",
        {
            "cluster01.csv": GPU_CSV,
            "cluster02.csv": "job_id,submission_time,duration,num_gpu\nz,1,2,3\n",
            "LICENSE": "MIT",
        },
    )
    trace = read_trace(path, cluster="cluster02")
    assert trace.name.endswith(":cluster02.csv")
    assert [j.trace_id for j in trace.jobs] == ["z"]
    assert len(read_trace(path, cluster="cluster01.csv").jobs) == 2


def test_a_tarball_needs_a_cluster_and_names_the_ones_it_has(tmp_path: pathlib.Path) -> None:
    path = _tarball(tmp_path / "t.tar.gz", {"cluster01.csv": GPU_CSV, "cluster02.csv": GPU_CSV})
    with pytest.raises(TraceError, match="choose one with --cluster \\(cluster01, cluster02\\)"):
        read_trace(path)
    with pytest.raises(TraceError, match="no cluster 'cluster09' in the tarball \\(it has cluster01, cluster02\\)"):
        read_trace(path, cluster="cluster09")


def test_cluster_is_refused_for_a_plain_file(write_text: Callable[[str, str], str]) -> None:
    with pytest.raises(TraceError, match="not one"):
        read_trace(write_text("c.csv", GPU_CSV), cluster="cluster01")


def test_the_format_is_detected_from_the_content() -> None:
    assert detect_format(SWF) == "swf"
    assert detect_format("1 0 -1 10 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 -1\n") == "swf"
    assert detect_format("\n" + GPU_CSV) == "gpu-csv"
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        detect_format("hello world\n", "x.txt")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such trace file"),
        ("directory", "is a directory"),
        ("binary", "binary data"),
        ("empty", "no job line found"),
        ("all skipped", "no replayable job in the trace \\(1 records: 1 run time <= 0\\)"),
        ("bad gzip", "cannot read the trace"),
    ],
)
def test_an_unreadable_trace_fails_clearly(tmp_path: pathlib.Path, setup: str, message: str) -> None:
    path = tmp_path / "t.swf"
    if setup == "directory":
        path.mkdir()
    elif setup == "binary":
        path.write_bytes(b"\x00\x01\x02" * 100)
    elif setup == "empty":
        path.write_text("; MaxProcs: 4\n")
    elif setup == "all skipped":
        path.write_text("1 0 -1 0 4 -1 -1 4 100 -1 1 1 1 -1 -1 -1 -1 -1\n")
    elif setup == "bad gzip":
        path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(TraceError, match=message):
        read_trace(str(path), fmt="swf" if setup == "empty" else None)


def test_an_unknown_format_is_refused(write_text: Callable[[str, str], str]) -> None:
    with pytest.raises(TraceError, match="unknown trace format 'json'"):
        read_trace(write_text("t.swf", SWF), fmt="json")
