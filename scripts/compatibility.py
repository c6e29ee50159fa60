"""Slurm's own test files, side by side: runs (or reads the saved logs of) Slurm's testsuite
against real Slurm and against muster, and writes the table in docs/compatibility.md.

The runner (`run.sh` of the slurm-testsuite tool) and the SchedMD/slurm git snapshot are
arguments or environment variables; this script reads nothing outside the repository by
default. Slurm's test files are GPL: the table names files only, never their code.

    # run both sides (one after the other: each is ~6 min on 2 cores), then write the table
    python scripts/compatibility.py run --runner PATH/run.sh --mirror GITDIR --rev REV \\
        --logs /tmp/compat
    # or write the table from saved run logs (stdout of run.sh); later muster logs (subset
    # reruns with ATF_ONLY=...) replace the rows of the files they ran
    python scripts/compatibility.py table --slurm slurm.log --muster full.log [--muster rerun.log]

Each row: file, Slurm's result (passed/failed/skipped counts), muster's result, and the
reason where muster's differs (a hand-written note from REASONS, else the first failure).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "compatibility.md"

# "PASSED   test_105_4.py::test_usage  -- message" (run.sh's summary rows)
ROW = re.compile(r"^(PASSED|FAILED|SKIPPED|XFAIL)\s+(test_[0-9_]+\.py)(?:::(.*?))?(?:  -- (.*))?$")
IMPL = re.compile(r"^run\.sh: implementation: (.*)$")

# Hand-written reasons for files whose muster result differs from Slurm's (or that both skip
# for a reason worth stating). Keyed by file name; a reason names the cause, not a promise.
REASONS: dict[str, str] = {
    "test_102_3.py": "skips on muster: its config does not say AccountingStorageType=accounting_storage/slurmdbd "
    "(muster's accounting is the controller's own store); Slurm runs the file (and fails it)",
    "test_105_8.py": "skips on muster for the same reason as test_102_3 (no slurmdbd named in the config)",
    "test_108_2.py": "Slurm fails on Debian's version string (slurm-wlm 22.05.8); muster prints slurm 22.05.8",
    "test_108_7.py": "skips on muster: the config states no SelectTypeParameters=CR_Core_Memory",
    "test_112_1.py": "skips on muster (no slurmdbd named in the config, as test_102_3); two of its tests pass on Slurm",
    "test_116_2.py": "skips on Slurm (its config names slurmdbd); passes on muster, which keeps account names in "
    "lower case as Slurm does (--account=MY_ACCT shows Account=my_acct; sacctmgr too)",
    "test_116_23.py": "test_multiple_jobs needs sudo, which this machine lacks, on both; test_single_job (srun "
    "--no-allocate) passes on both",
    "test_116_46.py": "fails on Slurm (the known race of proctrack/linuxproc); passes on muster",
    "test_118_2.py": "a test of SLUIDs (Slurm 26.05+): skips on both",
    "test_123_4.py": "fails on both at the same assertion, for different causes: the runner's test user is root, whom "
    "every reservation admits; Slurm starts the job in the 1-minute reservation (to cancel it at the end), muster keeps "
    "a job whose time limit outlasts the reservation pending, so srun times out without 'Access denied'",
    "test_123_7.py": "same tests as Slurm 22.05 pass: a reservation chosen by NodeCnt replaces its DOWN node with an "
    "idle one that no other reservation holds (REPLACE_DOWN, the default; MAINT, STATIC_ALLOC and named nodes keep "
    "theirs); the four xfail(< 25.11) tests fail on both as XPASS(strict), since neither takes nodes of a MAINT "
    "reservation",
    "test_123_12.py": "same result as Slurm 22.05: NodeCnt= with Flags=IGNORE_JOBS over a busy partition is created and an "
    "empty Features= accepted; without IGNORE_JOBS it is refused ('Requested nodes are busy'); the other test fails on "
    "both in the runner's atf shim (no get_reservation_parameter)",
    "test_130_1.py": "needs priority/basic (Slurm's cluster states it; a config naming no PriorityType gets it too, "
    "as in 22.05): muster up states priority/multifactor, so the run adds "
    "MUSTER_CONF_EXTRA=PriorityType=priority/basic; muster then orders jobs FIFO, a held job at priority 0",
}

# What the table's rows do not say: Slurm quirks matched, and where muster differs on purpose.
NOTES = """\
## Notes

* Slurm quirks matched: `sacctmgr --usage` prints the whole help, as `--help` does; `scancel -v`
  names a signal by its number and a step as `step N.S` (`Signal 1 to job N`, `Terminating step N.0`);
  `sinfo -t drain` matches DRAINING and DRAINED nodes, `-t drained` only those with no job, and
  `a+b` (Slurm 25) as well as `a&b` (22.05) asks for nodes in every state listed; `salloc --no-shell`
  names its job `no-shell`; `sstat -j N` shows the lowest numbered normal step (not `batch`),
  `-a` every running step, and a step that does not run is `StepId=N.S not found running.`
* Added for these files, each with the project's own tests from the man pages
  (tests/integration/test_slurm_surface.py and unit tests): `sstat`, `sbcast` (as a job step of
  the job; `-C` compresses with gzip, Slurm's lz4 accepted and treated alike), `scontrol listpids`,
  `salloc --no-shell`, `srun --task-prolog`/`--task-epilog` with `TaskProlog`/`TaskEpilog`,
  `srun -m arbitrary` with `SLURM_HOSTFILE`, every `sinfo --states` name, Slurm's `--usage`/`--help`
  texts of `sacctmgr`, `sprio`, `sdiag`, and `scancel -v`'s lines; `strigger` (node events down,
  drained, up, idle, reconfig; job events fini, time, down/up; PERM; triggers kept by the controller
  across restarts, their programs run as the user who set them).
* `SchedulerParameters=requeue_delay` (Slurm 25.11; absent: `AuthInfo=cred_expire`, else 120 s,
  as in 22.05) delays every requeued job, as Slurm does: after a node failure, `scontrol requeue`,
  preemption (`PreemptMode=REQUEUE`) and a failed launch (a Prolog failure's hold keeps its reason,
  the delay behind it); `--requeue=expedite` counts under
  `SlurmctldParameters=enable_expedited_requeue` (docs/faults.md). A config that names no
  `PriorityType` gets `priority/basic` (FIFO by submission), as in 22.05; `muster up` states
  `priority/multifactor`.
* Added for issue 38's last commands (tests/integration/test_attach_partitions.py, unit tests):
  `sattach` (output from the attach on beside srun's own stream, stdin to the tasks, the three
  filters, `--label`, `--layout`, `-Q`; the job's user, root or SlurmUser only; Slurm's stepd
  also replays recent output, muster's agent does not) and `scontrol create|delete PartitionName`
  (admins only, kept by the controller across restarts and reconfigures; a delete is refused
  while jobs or reservations use the partition, `Partition is in use`), `srun --no-allocate`
  (`-Z`: a step on `-w`'s nodes without a job, root and SlurmUser only).
* `scontrol create reservation` takes scontrol(1)'s keys by any unambiguous prefix (`start=now`),
  every StartTime form (`now+N units`, `teatime`, `MMDDYY`, ISO ...), every Duration form (seconds
  rounded up to a minute; `UNLIMITED` kept as a year), `NodeCnt` with a `k` suffix, `Features`
  (`a&b`, `a|b`; empty is none), `PartitionName` alone (all its nodes), and the flags MAINT,
  IGNORE_JOBS, OVERLAP, REPLACE, REPLACE_DOWN, STATIC_ALLOC, FLEX, HOURLY, DAILY, WEEKLY (SPEC_NODES
  shown for named nodes); Slurm's other keys (CoreCnt, Licenses, TRES, Groups, QOS, ...) and flags
  are refused by name (tests/unit/ctld/test_reservation_keys.py).
* sacctmgr keeps user names in lower case unless slurmdbd.conf's `Parameters=PreserveCaseUser`
  (muster.conf's `DbdParameters`, docs/accounting.md).
* Checked beyond the list, the same way (a copy of the runner with its own list): Slurm's files
  test_104_1, 106_1, 106_3, 106_4, 107_4, 108_9, 111_6, 113_1, 116_21, 116_37, 116_44, 116_5,
  117_1, 117_2 and 117_4 (sattach, sbcast, scancel -v, listpids, sinfo states, sprio, task
  prolog/epilog, host file, sstat). muster passes every one (test_104_1, sattach's usage line,
  since sattach was added); Slurm
  fails test_113_1 and test_117_1 (Debian's version string). test_116_5 and test_108_9 found
  `sbatch -m arbitrary` and listpids' wording missing; both were fixed.
* A skip counts as neither pass nor failure. Where both sides skip, each skips for a Slurm
  release after 22.05 or for configuration its cluster's file does not state (the runner never
  reconfigures); the first such gate a test meets may differ between the two configs (36 tests
  in the first runs: e.g. Slurm's is CR_Core_Memory, muster's names no slurmdbd).
"""


@dataclass
class FileResult:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: str = ""
    first_skip: str = ""
    run: str = ""
    tests: dict[str, tuple[str, str]] = field(default_factory=dict)  # test -> (status, message)

    def counts(self) -> str:
        return f"{self.passed}/{self.failed}/{self.skipped}"

    def verdict(self) -> str:
        """pass: nothing failed and something passed; fail: something failed; skip: all skipped."""
        if self.failed:
            return "fail"
        if self.passed:
            return "pass"
        return "skip"


@dataclass
class Run:
    label: str
    implementation: str = ""
    files: dict[str, FileResult] = field(default_factory=dict)


def parse_log(path: Path, label: str) -> Run:
    """Read run.sh's stdout: its implementation line and its per-test summary rows."""
    run = Run(label=label)
    for line in path.read_text(errors="replace").splitlines():
        if m := IMPL.match(line):
            run.implementation = m.group(1)
            continue
        m = ROW.match(line)
        if not m:
            continue
        status, name, test, why = m.group(1), m.group(2), m.group(3) or "", m.group(4) or ""
        res = run.files.setdefault(name, FileResult(run=label))
        res.tests[test] = (status, why)
        if status == "PASSED":
            res.passed += 1
        elif status == "FAILED":
            res.failed += 1
            if not res.first_failure:
                res.first_failure = f"{test}: {why}" if test else why
        else:
            res.skipped += 1
            if not res.first_skip:
                res.first_skip = why
    return run


def merge(runs: list[Run]) -> dict[str, FileResult]:
    """Later runs replace the rows of the files they ran (subset reruns after a fix)."""
    merged: dict[str, FileResult] = {}
    for run in runs:
        merged.update(run.files)
    return merged


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reason(name: str, slurm: FileResult | None, muster: FileResult | None) -> str:
    if name in REASONS:
        return REASONS[name]
    if muster is None:
        return "not run on muster"
    if slurm is None:
        return "not run on Slurm"
    if slurm.verdict() == muster.verdict() and slurm.counts() == muster.counts():
        return ""
    lost = [t for t, (st, _w) in slurm.tests.items() if st == "PASSED" and muster.tests.get(t, ("",))[0] != "PASSED"]
    if lost:
        status, why = muster.tests.get(lost[0], ("not run", ""))
        more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        return _cell(f"{lost[0]}{more}: {status.lower()}: {why}")
    if muster.failed:
        return _cell(muster.first_failure)
    if muster.verdict() == "skip" and slurm.verdict() != "skip":
        return _cell("muster skips: " + muster.first_skip)
    return ""


def render(slurm: Run, musters: list[Run], command: str) -> str:
    s_files = slurm.files
    m_files = merge(musters)
    names = sorted(set(s_files) | set(m_files), key=_order)
    lines: list[str] = []
    both_pass = regress = extra = 0
    s_pass = sum(1 for r in s_files.values() if r.verdict() == "pass")
    for name in names:
        s, m = s_files.get(name), m_files.get(name)
        sv, mv = (s.verdict() if s else "-"), (m.verdict() if m else "-")
        if sv == "pass" and mv == "pass":
            both_pass += 1
        elif sv == "pass":
            regress += 1
        elif mv == "pass":
            extra += 1
        mark = "**" if sv == "pass" and mv != "pass" else ""
        lines.append(
            f"| {name} | {s.counts() if s else '-'} | {mark}{m.counts() if m else '-'}{mark} | "
            f"{m.run if m else ''} | {reason(name, s, m)} |"
        )
    tot = lambda files, attr: sum(getattr(r, attr) for r in files.values())  # noqa: E731
    head = [
        "# Slurm's own test files: real Slurm and muster side by side",
        "",
        "Generated by `scripts/compatibility.py`; do not edit the table by hand (reasons live in",
        "the script's `REASONS`). Regenerated with:",
        "",
        "```",
        command,
        "```",
        "",
        f"* Slurm: {slurm.implementation or slurm.label} (run `{slurm.label}`)",
    ]
    for run in musters:
        head.append(f"* muster run `{run.label}` ({len(run.files)} files): {run.implementation}")
    head += [
        "",
        "Counts are passed/failed/skipped tests of the file. A file *passes* when nothing failed and",
        "something passed. Bold: passes on Slurm, not on muster. The run column says which muster",
        "run the row comes from (a later subset run replaces a file's row).",
        "",
        f"**Summary:** {len(names)} files. Slurm: {tot(s_files, 'passed')} passed, "
        f"{tot(s_files, 'failed')} failed, {tot(s_files, 'skipped')} skipped tests; "
        f"{s_pass} files pass. muster: {tot(m_files, 'passed')} passed, "
        f"{tot(m_files, 'failed')} failed, {tot(m_files, 'skipped')} skipped tests. "
        f"Of the {s_pass} files that pass on Slurm, {both_pass} pass on muster and {regress} do not; "
        f"{extra} more pass on muster only.",
        "",
        NOTES,
        "## The files",
        "",
        "| file | Slurm p/f/s | muster p/f/s | muster run | reason when muster differs |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + lines) + "\n"


def _order(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def run_side(runner: str, target: str, mirror: str, rev: str, log: Path, only: str) -> None:
    env = dict(os.environ, SLURM_MIRROR=mirror, SLURM_REV=rev)
    if only:
        env["ATF_ONLY"] = only
    with log.open("w") as out:
        subprocess.run(["bash", runner, target], env=env, stdout=out, stderr=subprocess.STDOUT, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="write the table from saved run.sh logs")
    t.add_argument("--slurm", required=True, type=Path, help="run.sh slurm's stdout")
    t.add_argument("--muster", required=True, type=Path, action="append", help="run.sh CHECKOUT's stdout (repeatable)")
    t.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r = sub.add_parser("run", help="run both sides with run.sh, then write the table")
    r.add_argument(
        "--runner", default=os.environ.get("SLURM_TESTSUITE_RUNNER"), help="run.sh [$SLURM_TESTSUITE_RUNNER]"
    )
    r.add_argument("--mirror", default=os.environ.get("SLURM_MIRROR"), help="SchedMD/slurm git dir [$SLURM_MIRROR]")
    r.add_argument("--rev", default=os.environ.get("SLURM_REV", "HEAD"))
    r.add_argument("--checkout", default=str(REPO))
    r.add_argument("--logs", type=Path, required=True, help="directory for the two run logs")
    r.add_argument("--only", default="", help="ATF_ONLY subset for both sides")
    r.add_argument("--skip-slurm", action="store_true", help="reuse LOGS/slurm.log")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    if a.cmd == "run":
        if not a.runner or not a.mirror:
            p.error("run needs --runner and --mirror (or SLURM_TESTSUITE_RUNNER and SLURM_MIRROR)")
        a.logs.mkdir(parents=True, exist_ok=True)
        if not a.skip_slurm:
            run_side(a.runner, "slurm", a.mirror, a.rev, a.logs / "slurm.log", a.only)
        run_side(a.runner, a.checkout, a.mirror, a.rev, a.logs / "muster.log", a.only)
        slurm_log, muster_logs = a.logs / "slurm.log", [a.logs / "muster.log"]
    else:
        slurm_log, muster_logs = a.slurm, a.muster
    for f in [slurm_log, *muster_logs]:
        if not f.is_file():
            print(f"compatibility: no such log: {f}", file=sys.stderr)
            return 2
    slurm = parse_log(slurm_log, slurm_log.name)
    musters = [parse_log(f, f.name) for f in muster_logs]
    if not slurm.files or not any(m.files for m in musters):
        print("compatibility: a log has no result rows (is it run.sh's stdout?)", file=sys.stderr)
        return 2
    cmd = "python scripts/compatibility.py table --slurm " + str(slurm_log.name)
    cmd += "".join(f" --muster {f.name}" for f in muster_logs)
    a.out.write_text(render(slurm, musters, cmd))
    print(f"compatibility: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
