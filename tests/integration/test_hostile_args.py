"""Every command against hostile arguments: unknown options, empty strings, huge and negative
numbers, bytes that are not UTF-8, very long strings, bad dates and bad job ids. Whatever
the input, a command answers with a message, never a Python traceback; bad input exits
non-zero; and the cluster still answers afterwards. One cluster serves the whole module."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

HUGE = "99999999999999999999"
LONG = "x" * 20000
JUNK = os.fsdecode(b"\xff\xfe\x80junk\xc3")  # not UTF-8: reaches the command as raw bytes
BAD_IDS = ["1_", "_1", HUGE, "-1", "", "1.", ".1", "1_[", "1_[5-1]", "abc", JUNK]

# Every command with arguments it must refuse (non-zero exit, one clear message).
GENERIC = [["--no-such-option"], ["-\u00e9"], ["--" + LONG]]
REFUSED: dict[str, list[list[str]]] = {
    "sbatch": [
        ["-N", HUGE, "--wrap=true"],
        ["-N", "5", "--wrap=true"],  # the module's cluster has 4 nodes
        ["-N", "0", "--wrap=true"],
        ["-n", "-5", "--wrap=true"],
        ["-n", "\u00b2", "--wrap=true"],
        ["--time=99999999999", "--wrap=true"],
        ["--time=", "--wrap=true"],
        ["--qos=nosuch", "--wrap=true"],
        ["--begin=2026-13-45", "--wrap=true"],
        ["--begin=" + JUNK, "--wrap=true"],
        ["--array=1_", "--wrap=true"],
        ["--array=" + HUGE, "--wrap=true"],
        ["--mem=" + HUGE + "T", "--wrap=true"],
        ["--gres=gpu:-2", "--wrap=true"],
        ["--gres=gpu:" + HUGE, "--wrap=true"],
        ["--gpus=" + HUGE, "--wrap=true"],
        ["-c", HUGE, "--wrap=true"],
        ["--nice=" + HUGE, "--wrap=true"],
        ["--dependency=afterok:" + HUGE, "--wrap=true"],
        ["--dependency=" + JUNK, "--wrap=true"],
        ["-p", JUNK, "--wrap=true"],
        ["-w", "node[1-99999999999]", "--wrap=true"],
        ["--signal=" + HUGE, "--wrap=true"],
        ["/nonexistent/script.sh"],
        [""],
    ],
    "srun": [
        ["-n", "100000", "true"],
        ["-N", "5", "true"],
        ["-N", HUGE, "true"],
        ["--time=99999999999", "true"],
        ["--qos=nosuch", "true"],
        ["--jobid=" + HUGE, "true"],
        ["--jobid=1_", "true"],
        ["-w", JUNK, "true"],
        ["--gres=gpu:-2", "true"],
        ["--begin=bad", "true"],
        [],
    ],
    "salloc": [
        ["-N", HUGE, "true"],
        ["-N", "5", "true"],
        ["-n", "100000", "true"],
        ["--time=99999999999", "true"],
        ["--qos=nosuch", "true"],
    ],
    "squeue": [
        *(["-j", i] for i in BAD_IDS if i not in ("", "1.")),
        ["-t", "bogus"],
        ["-i", "-5"],
        ["-i", HUGE],
        ["-O", "nosuchfield"],
        ["--step", "1.x"],
    ],
    "scancel": [
        *([i] for i in BAD_IDS if i not in ("", HUGE)),
        ["-s", "BOGUS", "1"],
        ["-s", HUGE, "1"],
        ["-t", "COMPLETED", "1"],
        [],
    ],
    "sinfo": [
        ["-t", "bogus"],
        ["-i", "x"],
        ["-n", "node[1-99999999999]"],
        ["-O", "nosuchfield"],
    ],
    "scontrol": [
        *(["show", "job", i] for i in BAD_IDS if i),
        ["show", "node", JUNK],
        ["show", "node", LONG],
        ["show", "partition", JUNK],
        ["show", "step", "1." + HUGE],
        ["show", "bogus"],
        ["show", "hostnames", "node[1-99999999999]"],
        ["show", "hostnames", "node[5-1]"],
        ["update", "job", "1", "Nice=" + HUGE],
        ["update", "jobid=" + HUGE, "TimeLimit=5"],
        ["update", "jobid=1_", "TimeLimit=5"],
        ["update", "jobid=1", "TimeLimit=99999999999"],
        ["update", "nodename=" + JUNK, "state=drain", "reason=x"],
        ["update", "nodename=node1", "state=bogus"],
        ["hold", "_1"],
        ["release", HUGE],
        ["requeue", "1_"],
        ["suspend", ""],
        ["create", "reservation", "starttime=2026-13-45", "duration=1", "nodes=node1", "users=root"],
        ["bogus"],
    ],
    "sacct": [
        *(["-j", i] for i in BAD_IDS if i not in ("", "1_", "1.")),
        ["-S", "bad"],
        ["-S", "2026-13-45"],
        ["-E", JUNK],
        ["-S", HUGE],
        ["-o", "nosuchfield"],
        ["-s", "bogus"],
    ],
    "sacctmgr": [
        ["bogus"],
        ["show"],
        ["show", "bogus"],
        ["list", "user", "format=nosuch"],
        ["-i", "add", "account", JUNK],
        ["-i", "delete", "account"],
    ],
    "sshare": [["-o", "nosuchfield"], ["-u", JUNK, "-o", "%" + HUGE]],
    "sprio": [["-j", HUGE], ["-j", "1_"]],
    "sreport": [
        ["bogus"],
        ["cluster", "utilization", "start=bad"],
        ["cluster", "utilization", "start=2026-13-45"],
        ["cluster", "utilization", "start=" + HUGE],
        ["cluster", "bogus"],
        ["user", "top", "TopCount=" + HUGE],
        ["user", "top", "TopCount=abc"],
        ["job", "goodput", "group=nosuch"],
    ],
    "muster": [
        ["bogus"],
        [],
        ["up", "--nodes", "-5"],
        ["up", "--nodes", HUGE],
        ["down", "--state-dir", "/nonexistent/state"],
        ["status", "--state-dir", "/nonexistent/state"],
        ["sim", "/nonexistent/trace.swf"],
        ["sim", "--bogus"],
        ["keygen", ""],
    ],
}
# Arguments that may be accepted: only "no traceback" is asserted. Format widths are capped
# (cli.common). Slurm accepts these too: sprio prints a format without % as text, and sinfo
# reads -S one character at a time, passing over those that name no field.
SLURM_ACCEPTS: dict[str, list[list[str]]] = {
    "sprio": [["-w", "-o", "bogus"]],
    "sinfo": [["-S", JUNK]],
}
# Refused since an earlier session, as Slurm refuses them.
FORMERLY_ACCEPTED: dict[str, list[list[str]]] = {
    "sacct": [["-j", "1_"], ["-j", "1."], ["--units=Q"], ["-j", "1." + HUGE]],
    "sacctmgr": [
        ["-i", "modify", "account", "where", "name=root", "set", "MaxJobs=" + HUGE],
        ["-i", "modify", "account", "where", "name=root", "set", "MaxWall=99999999999"],
        ["-i", "add", "qos", "q1", "Priority=" + HUGE],
    ],
    "sbatch": [["-D", "", "--wrap=true"]],
    "scancel": [[HUGE], ["1." + HUGE]],
    "scontrol": [["create", "reservation", "starttime=now", "duration=" + HUGE, "nodes=node1", "users=root"]],
    "squeue": [["-j", ""], ["-j", "1."], ["-t", ""], ["-j", HUGE]],
}
for _command, _refused in FORMERLY_ACCEPTED.items():
    REFUSED.setdefault(_command, []).extend(_refused)
WIDE = "%" + HUGE
TOLERATED: dict[str, list[list[str]]] = {
    "squeue": [["-o", WIDE + "i"]],
    "sinfo": [["-o", WIDE + "N"]],
    "sprio": [["-o", WIDE + "i"]],
    "sacct": [["-o", "jobid" + WIDE]],
    "sacctmgr": [["list", "user", "format=user" + WIDE]],
}
for _table in (
    SLURM_ACCEPTS,
    {
        "sbatch": [["-J", JUNK, "--hold", "--wrap=true"], ["--comment", LONG, "--hold", "--wrap=true"]],
        "squeue": [["-u", JUNK], ["-n", LONG], ["-p", JUNK], ["-w", "node[1-2]"]],
        "sinfo": [["-p", JUNK], ["-n", JUNK]],
        "sacct": [["-S", "1970-01-01-00:00:01", "-E", "now"], ["-u", JUNK], ["-A", LONG]],
        "scancel": [["-u", JUNK], ["-n", LONG, "-u", "root"]],
        "sshare": [["-A", JUNK], ["-u", LONG]],
        "sprio": [["-u", JUNK]],
        "sreport": [["cluster", "utilization", "start=1970-01-01-00:00:01"]],
        "sacctmgr": [["list", "user", JUNK], ["-n", "-s", "list", "user", "root", "format=account"]],
    },
):
    for _command, _cases_of in _table.items():
        TOLERATED.setdefault(_command, []).extend(_cases_of)
COMMANDS = sorted(REFUSED)


def _cases(table: dict[str, list[list[str]]], generic: bool) -> list[tuple[str, list[str]]]:
    out = []
    for command in COMMANDS:
        for args in table.get(command, []) + (GENERIC if generic else []):
            out.append((command, args))
    return out


def _id(case: tuple[str, list[str]]) -> str:
    command, args = case
    text = " ".join(a if len(a) < 24 else a[:12] + "..." for a in args)
    return f"{command} {text}".encode("ascii", "backslashreplace").decode()


@pytest.fixture(scope="module")
def hostile() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=4, gpus_per_node=8, cpus_per_node=32, mem_per_node=128000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def _run(h: Harness, command: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"MUSTER_STATE_DIR": os.path.join(h.root, "nosuch-state")}
    try:
        return subprocess.run(
            [command, *args],
            input="",
            env={**h.env, **env},
            cwd=h.workdir,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} hung on {_id((command, args))!r}")


def _no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stdout, out.stdout[-3000:]


@pytest.mark.parametrize("case", _cases(REFUSED, generic=True), ids=_id)
def test_bad_input_is_refused_with_a_message(hostile: Harness, case: tuple[str, list[str]]) -> None:
    command, args = case
    out = _run(hostile, command, args)
    _no_traceback(out)
    assert out.returncode != 0, f"accepted: {out.stdout[-500:]}"
    assert out.stderr.strip() or out.stdout.strip(), "refused without a word"


@pytest.mark.parametrize("case", _cases(TOLERATED, generic=False), ids=_id)
def test_odd_but_harmless_input_gives_no_traceback(hostile: Harness, case: tuple[str, list[str]]) -> None:
    command, args = case
    _no_traceback(_run(hostile, command, args))


def test_the_cluster_still_answers_after_the_sweep(hostile: Harness) -> None:
    # Runs last in the module (pytest keeps file order).
    out = hostile.run(["sinfo", "-h", "-o", "%D %t"])
    assert out.returncode == 0 and out.stdout.split() == ["4", "idle"], out.stdout + out.stderr
    job = hostile.sbatch("--wrap", "true")
    assert hostile.wait_job(job)["state"] == "COMPLETED"
