"""The last Slurm commands issue 38 found missing, each checked as its man page describes
it, on the session's shared cluster: sattach(1), srun(1) -Z/--no-allocate, and scontrol(1)
create/delete PartitionName."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import IO

import pytest

from harness import Harness, ensure_user
from waiting import wait_for

pytestmark = pytest.mark.integration

OTHER = "mustersattach"  # a user who does not own the watched job


class Reader:
    """Everything a pipe gives, collected by a thread (a test waits on its content)."""

    def __init__(self, pipe: IO[str]) -> None:
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.text += line

    def has(self, *parts: str) -> bool:
        return all(p in self.text for p in parts)


def _popen(h: Harness, argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=h.workdir,
        env=h.env,
        text=True,
        bufsize=1,
    )


@pytest.fixture
def echo_step(cluster: Harness) -> Iterator[tuple[int, subprocess.Popen[str], Reader, Reader]]:
    """A running step 0 of two tasks on one node, each echoing its stdin (``R:line``) on
    stdout and ``errR:line`` on stderr, with srun's stdin held open."""
    h = cluster
    name = f"sattach-{uuid.uuid4().hex[:8]}"
    script = 'while read l; do echo "$SLURM_PROCID:$l"; echo "err$SLURM_PROCID:$l" >&2; done'
    srun = _popen(h, ["srun", "-N1", "-n2", f"--job-name={name}", "-t", "5", "sh", "-c", script])
    out, err = Reader(srun.stdout), Reader(srun.stderr)  # type: ignore[arg-type]

    def job_id() -> int:
        got = h.run(["squeue", "-h", "-o", "%i", "-n", name]).stdout.split()
        return int(got[0]) if got else 0

    try:
        jid = wait_for(job_id, 120, what="the srun's job")
        wait_for(
            lambda: f"{jid}.0" in h.run(["squeue", "-h", "-s", "-o", "%i", "-j", str(jid)]).stdout,
            120,
            what="its step 0",
        )
        yield jid, srun, out, err
    finally:
        if srun.poll() is None:
            h.run(["scancel", str(jid)]) if "jid" in locals() else srun.kill()
            try:
                srun.wait(60)
            except subprocess.TimeoutExpired:
                srun.kill()
                srun.wait()


def test_sattach_shows_the_output_and_feeds_the_input_beside_srun(
    cluster: Harness, echo_step: tuple[int, subprocess.Popen[str], Reader, Reader]
) -> None:
    # sattach(1): "attaches to a running Slurm job step. By attaching, it makes available
    # the IO streams of all of the tasks of a running Slurm job step."
    h = cluster
    jid, srun, srun_out, _ = echo_step
    att = _popen(h, ["sattach", "-l", f"{jid}.0"])
    out, err = Reader(att.stdout), Reader(att.stderr)  # type: ignore[arg-type]
    try:
        assert att.stdin is not None
        att.stdin.write("from-sattach\n")
        att.stdin.flush()
        # -l, --label: "prepend task number to lines of stdout & stderr"
        wait_for(lambda: out.has("0: 0:from-sattach", "1: 1:from-sattach"), 60, what=f"sattach's output {out.text!r}")
        wait_for(lambda: err.has("0: err0:from-sattach", "1: err1:from-sattach"), 60, what="sattach's stderr")
        # srun keeps its own stream of the step: it sees the same answers
        wait_for(lambda: srun_out.has("0:from-sattach", "1:from-sattach"), 60, what="srun's output")
        # the end of sattach's input leaves the tasks' stdin open: srun's still feeds them
        att.stdin.close()
        assert srun.stdin is not None
        srun.stdin.write("from-srun\n")
        srun.stdin.flush()
        wait_for(lambda: out.has("0: 0:from-srun", "1: 1:from-srun"), 60, what="srun's input seen by sattach")
        srun.stdin.close()  # the tasks read their end: the step ends, and sattach with it
        assert att.wait(120) == 0, err.text
        assert srun.wait(120) == 0
    finally:
        if att.poll() is None:
            att.kill()
            att.wait()


def test_sattach_filters_layout_and_refusals(
    cluster: Harness, echo_step: tuple[int, subprocess.Popen[str], Reader, Reader]
) -> None:
    h = cluster
    jid, srun, _, _ = echo_step
    # --layout: "print task layout info and exit (does not attach to tasks)"
    layout = h.run(["sattach", "--layout", f"{jid}.0"])
    assert layout.returncode == 0, layout.stderr
    lines = layout.stdout.splitlines()
    assert lines[0] == "Job step layout:"
    assert lines[1].startswith("\t2 tasks, 1 nodes (")
    assert lines[3].startswith("\tNode 0 (") and lines[3].endswith("2 task(s): 0 1 ")
    # --output-filter / --error-filter / --input-filter: one task's stream only
    att = _popen(h, ["sattach", "--output-filter=1", "--error-filter=0", "--input-filter=1", f"{jid}.0"])
    out, err = Reader(att.stdout), Reader(att.stderr)  # type: ignore[arg-type]
    try:
        assert att.stdin is not None
        att.stdin.write("one-only\n")
        att.stdin.flush()
        wait_for(lambda: out.has("1:one-only"), 60, what="task 1's answer")
        assert srun.stdin is not None
        srun.stdin.write("both\n")
        srun.stdin.flush()
        wait_for(lambda: out.has("1:both") and err.has("err0:both"), 60, what="the filtered answers")
        assert "0:" not in out.text.replace("1:", "")  # no stdout of task 0
        assert "err1" not in err.text  # no stderr of task 1
        assert "0:one-only" not in out.text and "err0:one-only" not in err.text  # input to task 1 only
    finally:
        att.kill()
        att.wait()
    # only the job's user or root: another user is refused, and nothing is attached
    uid = ensure_user(OTHER)
    denied = h.run(["sattach", f"{jid}.0"], uid=uid)
    assert denied.returncode != 0
    assert "Access/permission denied" in denied.stderr
    # an unknown job or step: Slurm's message, non-zero
    for bad in ("999999.0", f"{jid}.7"):
        miss = h.run(["sattach", bad])
        assert miss.returncode == 1
        assert miss.stderr.strip() == "sattach: error: Could not get job step info: Invalid job id specified"


def test_scontrol_create_and_delete_partition(cluster: Harness) -> None:
    # scontrol(1): "create <SPECIFICATION>: Create a new partition or reservation. See the
    # full list of parameters below." and "delete <SPECIFICATION>: Delete the entry with the
    # specified SPECIFICATION. The two SPECIFICATION choices are PartitionName=<name> and
    # Reservation=<reservation>. On Dynamic Future Nodes ... Partitions with running or
    # pending jobs can not be deleted" (the words "Partition is in use" are slurmctld's).
    h = cluster
    part = f"made{uuid.uuid4().hex[:6]}"
    nodes = sorted(h.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split())[:2]
    made = h.run(["scontrol", "create", f"PartitionName={part}", f"Nodes={','.join(nodes)}", "State=UP", "MaxTime=10"])
    assert made.returncode == 0, made.stderr
    try:
        row = h.run(["sinfo", "-h", "-p", part, "-o", "%P %a %l %D"]).stdout.split()
        assert row == [part, "up", "10:00", "2"]
        shown = h.run(["scontrol", "show", "partition", part]).stdout
        assert f"PartitionName={part}" in shown and "MaxTime=00:10:00" in shown
        # the same name again, an unknown node, an unknown key: refused, nothing made
        again = h.run(["scontrol", "create", f"PartitionName={part}", f"Nodes={nodes[0]}"])
        assert again.returncode == 1
        assert again.stderr.strip() == "Error creating the partition: Invalid partition name specified"
        bad_node = h.run(["scontrol", "create", f"PartitionName={part}x", "Nodes=nosuchnode"])
        assert bad_node.stderr.strip() == "Error creating the partition: Invalid node name specified"
        bad_key = h.run(["scontrol", "create", f"PartitionName={part}x", "Bogus=1"])
        assert bad_key.returncode == 1 and "Update of this parameter is not supported: Bogus=1" in bad_key.stderr
        assert h.run(["sinfo", "-h", "-p", f"{part}x", "-o", "%P"]).stdout.strip() == ""
        # administrators only
        uid = ensure_user(OTHER)
        denied = h.run(["scontrol", "create", f"PartitionName={part}u", f"Nodes={nodes[0]}"], uid=uid)
        assert denied.returncode == 1 and denied.stderr.strip() == "Error creating the partition: Invalid user id"
        # a job in it: the partition cannot go until the job has
        jid = h.sbatch("-p", part, "-t", "5", "--wrap", "sleep 300")
        busy = h.run(["scontrol", "delete", f"PartitionName={part}"])
        assert busy.returncode == 1
        assert busy.stderr.strip() == f"delete_partition PartitionName={part}: Partition is in use"
        assert h.run(["scancel", str(jid)]).returncode == 0
        h.wait_job(jid)
    finally:
        gone = h.run(["scontrol", "delete", f"PartitionName={part}"])
    assert gone.returncode == 0, gone.stderr
    assert h.run(["sinfo", "-h", "-p", part, "-o", "%P"]).stdout.strip() == ""
    unknown = h.run(["scontrol", "delete", f"PartitionName={part}"])
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == f"delete_partition PartitionName={part}: Invalid partition name specified"


def test_srun_no_allocate_runs_on_the_named_nodes_without_a_job(cluster: Harness) -> None:
    # srun(1): "-Z, --no-allocate: Run the specified tasks on a set of nodes without creating
    # a Slurm "job" in the Slurm queue structure, bypassing the normal resource allocation
    # step. The list of nodes must be specified with the -w, --nodelist option. This is a
    # privileged option only available for the users "SlurmUser" and "root"."
    h = cluster
    nodes = sorted(h.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split())[:2]
    before = h.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    one = h.run(["srun", "-N1", f"--nodelist={nodes[0]}", "--no-allocate", "printenv", "SLURMD_NODENAME"], timeout=120)
    assert one.returncode == 0, one.stderr
    assert one.stdout == f"{nodes[0]}\n"
    script = 'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_JOB_ID"'
    three = h.run(["srun", "-Z", "-w", ",".join(nodes), "-n3", "sh", "-c", script], timeout=120)
    assert three.returncode == 0, three.stderr
    rows = sorted(line.split() for line in three.stdout.splitlines())
    assert [r[:2] for r in rows] == [["0", nodes[0]], ["1", nodes[0]], ["2", nodes[1]]]
    assert len({r[2] for r in rows}) == 1 and rows[0][2] not in before
    # no job was made for either
    assert rows[0][2] not in h.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    assert "Invalid job id" in h.run(["scontrol", "show", "job", rows[0][2]]).stderr
    # no node list: Slurm's error; another user: refused, nothing runs
    bare = h.run(["srun", "-Z", "true"])
    assert bare.returncode == 1
    assert bare.stderr.strip() == "srun: error: must specify a node list with -Z, --no-allocate."
    uid = ensure_user(OTHER)
    denied = h.run(["srun", "-Z", "-w", nodes[0], "echo", "ran"], uid=uid, timeout=120)
    assert denied.returncode == 1 and "ran" not in denied.stdout
    assert "srun: error: Application launch failed: Access/permission denied" in denied.stderr
