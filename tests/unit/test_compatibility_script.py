"""scripts/compatibility.py: two saved runs of Slurm's test files become one table."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("compatibility", ROOT / "scripts" / "compatibility.py")
assert spec is not None and spec.loader is not None
compat = importlib.util.module_from_spec(spec)
sys.modules["compatibility"] = compat  # its dataclasses look their module up
spec.loader.exec_module(compat)

SLURM = """\
run.sh: implementation: slurm (slurm-wlm 22.05.8), SLURM_CONF=/etc/slurm/slurm.conf
PASSED   test_1_1.py::test_a
PASSED   test_1_2.py::test_b[x y]
FAILED   test_1_3.py::test_c  -- boom
SKIPPED  test_1_4.py::test_d  -- needs a thing
"""
MUSTER = """\
run.sh: implementation: muster at /m
PASSED   test_1_1.py::test_a
FAILED   test_1_2.py::test_b[x y]  -- no such option
PASSED   test_1_3.py::test_c
SKIPPED  test_1_4.py::test_d  -- needs a thing
"""
RERUN = "PASSED   test_1_2.py::test_b[x y]\n"


def test_rows_summary_and_reruns(tmp_path: pathlib.Path) -> None:
    for name, text in (("s.log", SLURM), ("m.log", MUSTER), ("r.log", RERUN)):
        (tmp_path / name).write_text(text)
    out = tmp_path / "table.md"
    argv = ["table", "--slurm", str(tmp_path / "s.log"), "--muster", str(tmp_path / "m.log"), "--out", str(out)]
    assert compat.main(argv) == 0
    text = out.read_text()
    assert "| test_1_2.py | 1/0/0 | **0/1/0** | m.log | test_b[x y]: failed: no such option |" in text
    assert "Of the 2 files that pass on Slurm, 1 pass on muster and 1 do not; 1 more pass on muster only." in text
    assert compat.main([*argv, "--muster", str(tmp_path / "r.log")]) == 0
    assert "| test_1_2.py | 1/0/0 | 1/0/0 | r.log |  |" in out.read_text()


def test_a_log_without_rows_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "empty.log").write_text("nothing here\n")
    argv = ["table", "--slurm", str(tmp_path / "empty.log"), "--muster", str(tmp_path / "empty.log")]
    assert compat.main([*argv, "--out", str(tmp_path / "t.md")]) == 2
