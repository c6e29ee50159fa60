"""Slurm's commands and options that Slurm's own test files exposed as missing (issue 38),
each checked as its man page describes it, on one shared cluster."""

from __future__ import annotations

import os
import pwd
import sys
import tempfile
from collections.abc import Iterator

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration


# The site's TaskProlog (slurm.conf(5)): every step task runs it before srun's --task-prolog.
SITE_PROLOG = "#!/bin/sh\necho export SITE_PROLOG=ran\necho export WHO=site\n"
# The site's TaskEpilog: runs after srun's --task-epilog, once each task has ended.
SITE_EPILOG = '#!/bin/sh\n[ -n "$EPILOG_LOG" ] && echo "site $SLURM_PROCID" >> "$EPILOG_LOG.$SLURM_PROCID"\nexit 0\n'


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    root = tempfile.mkdtemp(prefix="muster-it-")
    prolog = os.path.join(root, "taskprolog.sh")
    epilog = os.path.join(root, "taskepilog.sh")
    for path, text in ((prolog, SITE_PROLOG), (epilog, SITE_EPILOG)):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    shape = ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000)
    h = Harness(shape, root=root, settings={"TaskProlog": prolog, "TaskEpilog": epilog})
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_salloc_no_shell_exits_at_once_and_leaves_the_allocation_running(cluster: Harness) -> None:
    # salloc(1): "--no-shell: immediately exit after allocating resources, without running a
    # command. However, the Slurm job will still be created and will remain active and will own
    # the allocated resources as long as it is active."
    h = cluster
    out = h.run(["salloc", "--no-shell", "-N1", "-t", "5"], timeout=120)
    assert out.returncode == 0, out.stderr
    granted = [line for line in out.stderr.splitlines() if "Granted job allocation" in line]
    assert granted, out.stderr
    job_id = int(granted[0].split()[-1])
    assert "Relinquishing" not in out.stderr
    job = h.wait_state(job_id, "RUNNING")
    assert job["spec"]["name"] == "no-shell"
    # "You can submit srun commands against this resource allocation, if you specify the
    # --jobid= option with the job id of this Slurm job."
    step = h.run(["srun", f"--jobid={job_id}", "-n1", "echo", "in-the-allocation"], timeout=120)
    assert step.returncode == 0, step.stderr
    assert step.stdout.strip() == "in-the-allocation"
    assert h.job(job_id)["state"] == "RUNNING"
    # "... or you can terminate the job manually using the scancel command."
    assert h.run(["scancel", str(job_id)]).returncode == 0
    assert h.wait_job(job_id)["state"] == "CANCELLED"


# Each task holds 40 MB (task 0) or 60 MB (task 1), says so in a file, and waits.
HOG = """\
import os, time
rank = int(os.environ["SLURM_PROCID"])
hold = b"x" * ((40 + 20 * rank) << 20)  # every page written: resident
open(f"ready.{os.environ['SLURM_JOB_ID']}.{rank}", "w").close()
time.sleep(600)
"""


def _wait_step_running(h: Harness, job_id: int, step: str) -> None:
    def running() -> bool:
        out = h.run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i"])
        return f"{job_id}.{step}" in out.stdout.split()

    wait_for(running, 120, what=f"step {job_id}.{step} to run")


def test_sstat_shows_what_a_running_steps_tasks_use(cluster: Harness) -> None:
    # sstat(1): "Status information for running jobs ... CPU, Task, Node, Resident Set Size
    # (RSS) and Virtual Memory (VM)"; Max*/Min*/Ave* over the tasks of the step, *Task the task.
    h = cluster
    with open(os.path.join(h.workdir, "hog.py"), "w") as f:
        f.write(HOG)
    hog = f"{sys.executable} hog.py"
    job_id = h.sbatch("-N1", "-n2", "-t", "5", "--wrap", f"srun -n2 {hog}")
    try:
        _wait_step_running(h, job_id, "0")
        wait_for(
            lambda: all(os.path.exists(os.path.join(h.workdir, f"ready.{job_id}.{t}")) for t in (0, 1)),
            120,
            what="both tasks to hold their memory",
        )
        fmt = "JobID,NTasks,MaxRSS,MaxRSSTask,MaxRSSNode,AveRSS,MaxVMSize,Nodelist,Pids"
        out = h.run(["sstat", "-j", str(job_id), "-n", "-P", "-o", fmt])
        assert out.returncode == 0, out.stderr
        row = dict(zip(fmt.split(","), out.stdout.strip().split("|"), strict=True))
        assert row["JobID"] == f"{job_id}.0" and row["NTasks"] == "2"
        max_rss = int(row["MaxRSS"].rstrip("K"))
        assert max_rss >= 60 << 10, row  # task 1 holds 60 MB, task 0 40 MB
        assert row["MaxRSSTask"] == "1"
        assert int(row["AveRSS"].rstrip("K")) < max_rss
        assert int(row["MaxVMSize"].rstrip("K")) >= max_rss
        job = h.job(job_id)
        assert row["MaxRSSNode"] == row["Nodelist"] == job["nodelist"]
        pids = [int(p) for p in row["Pids"].split(",")]
        for pid in pids:  # the tasks' own processes
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert f"SLURM_JOB_ID={job_id}".encode() in f.read().split(b"\0")
        # -a: every running step, the batch script first; -i: JobID, Nodelist, Pids
        every = h.run(["sstat", "-a", "-j", str(job_id), "-n", "-P", "-o", "JobID"])
        assert every.stdout.split() == [f"{job_id}.batch", f"{job_id}.0"], every
        pidrows = h.run(["sstat", "-i", "-P", "-j", f"{job_id}.0"]).stdout.splitlines()
        assert pidrows[0] == "JobID|Nodelist|Pids"
        assert pidrows[1].split("|")[2] == row["Pids"]
        # a step that does not run: Slurm's words, a non-zero exit
        missing = h.run(["sstat", "-j", f"{job_id}.7"])
        assert missing.returncode != 0
        assert f"StepId={job_id}.7 not found running" in missing.stderr
    finally:
        h.run(["scancel", str(job_id)])
    h.wait_job(job_id)
    gone = h.run(["sstat", "-j", str(job_id)])
    assert gone.returncode != 0 and "not running" in gone.stderr


def test_sstat_usage_help_and_fields(cluster: Harness) -> None:
    h = cluster
    usage = h.run(["sstat", "--usage"])
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: sstat [options] -j <job(.stepid)>")
    names = h.run(["sstat", "-e"]).stdout.split()
    for name in ("JobID", "MaxRSS", "AveCPU", "MinCPU", "Pids", "Nodelist", "TRESUsageInTot", "AveDiskRead"):
        assert name in names
    nothing = h.run(["sstat"])
    assert nothing.returncode != 0 and "sstat: error:" in nothing.stderr
    bad = h.run(["sstat", "-j", "1", "-o", "NoSuchField"])
    assert bad.returncode != 0 and 'Invalid field requested: "NoSuchField"' in bad.stderr


def test_scontrol_listpids_lists_each_steps_processes_on_this_node(cluster: Harness) -> None:
    # scontrol(1): "listpids [job_id[.step_id]] [NodeName]: Print a listing of the process IDs
    # in a job step (if JOBID.STEPID provided), or all of the job steps in a job (if job_id is
    # provided) ... only for those processes spawned by Slurm and their descendants."
    h = cluster
    job_id = h.sbatch("-N1", "-n2", "-t", "5", "--wrap", "srun -n2 sleep 300")
    try:
        _wait_step_running(h, job_id, "0")
        node = h.job(job_id)["nodelist"]

        def step_rows() -> list[list[str]]:
            out = h.run(["scontrol", "listpids", f"{job_id}.0", node])
            if out.returncode != 0:  # the step runs, its tasks not yet: "does not exist on"
                assert f"StepId={job_id}.0 does not exist on node {node}" in out.stderr, out.stderr
                return []
            lines = out.stdout.splitlines()
            assert lines[0].split() == ["PID", "JOBID", "STEPID", "LOCALID", "GLOBALID"]
            rows = [line.split() for line in lines[1:]]
            return rows if {r[4] for r in rows} >= {"0", "1"} else []

        rows = wait_for(step_rows, 60, what="both tasks of step 0 listed")
        assert {r[1] for r in rows} == {str(job_id)} and {r[2] for r in rows} == {"0"}
        for pid, *_ in rows:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert f.read().split(b"\0")[0].endswith(b"sleep")
        # the whole job: the batch script's processes too; no job id: every job here
        whole = h.run(["scontrol", "listpids", str(job_id)]).stdout.split("\n")[1:]
        steps = {line.split()[2] for line in whole if line}
        assert steps == {"batch", "0"}, whole
        everything = h.run(["scontrol", "listpids"]).stdout
        assert all(line in everything for line in whole if line)
        gone = h.run(["scontrol", "listpids", f"{job_id}.10", node])  # no such step there
        assert gone.returncode != 0 and f"StepId={job_id}.10 does not exist on node {node}" in gone.stderr
        bad = h.run(["scontrol", "listpids", "x.y"])
        assert bad.returncode != 0 and "Invalid job id specified" in bad.stderr
    finally:
        h.run(["scancel", str(job_id)])
    h.wait_job(job_id)


def test_task_prolog_export_lines_reach_each_task(cluster: Harness) -> None:
    # srun(1) --task-prolog: "run executable just before launching each task. This will be
    # executed after any TaskProlog parameter in slurm.conf is executed. Besides the normal
    # environment variables, this has SLURM_TASK_PID available ... Standard output from this
    # program of the form "export NAME=value" will be used to set environment variables for
    # the task being spawned."
    h = cluster
    with open(os.path.join(h.workdir, "prolog.sh"), "w") as f:
        f.write(
            "#!/bin/sh\n"
            "echo export PROLOG_PID=$SLURM_TASK_PID\n"
            "echo export WHO=user\n"
            "echo unset DROP_ME\n"
            "echo print prolog says hi to $SLURM_PROCID\n"
        )
    os.chmod(os.path.join(h.workdir, "prolog.sh"), 0o755)
    task = "echo task=$SLURM_PROCID pid=$$ prolog=$PROLOG_PID who=$WHO site=$SITE_PROLOG drop=${DROP_ME:-unset}"
    out = h.run(
        ["srun", "-n2", "-N1", "--task-prolog=prolog.sh", "sh", "-c", task],
        env={"DROP_ME": "present"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert lines[:2] == ["prolog says hi to 0", "prolog says hi to 1"], lines
    for rank, line in enumerate(lines[2:]):
        fields = dict(word.split("=", 1) for word in line.split())
        assert fields["task"] == str(rank)
        assert fields["prolog"] == fields["pid"]  # SLURM_TASK_PID is the task's own pid
        assert fields["who"] == "user" and fields["site"] == "ran" and fields["drop"] == "unset"
    # SLURM_TASK_PROLOG is srun's input variable for the same option
    env_out = h.run(["srun", "-n1", "sh", "-c", "echo $WHO"], env={"SLURM_TASK_PROLOG": "prolog.sh"}, timeout=120)
    assert env_out.stdout.splitlines() == ["prolog says hi to 0", "user"], env_out
    # without one, only the site's runs
    plain = h.run(["srun", "-n1", "sh", "-c", "echo $WHO $SITE_PROLOG"], timeout=120)
    assert plain.stdout.strip() == "site ran", plain


def test_sbcast_copies_a_file_to_the_nodes_of_the_allocation(cluster: Harness) -> None:
    # sbcast(1): "transmit a file to all nodes allocated to the currently active Slurm job";
    # -C compresses it on the way, -f replaces an existing DEST, -p keeps times and modes.
    h = cluster
    alloc = h.run(["salloc", "--no-shell", "-N2", "-t", "5"], timeout=120)
    assert alloc.returncode == 0, alloc.stderr
    job_id = int(alloc.stderr.split("Granted job allocation")[1].split()[0])
    try:
        src, dest = os.path.join(h.workdir, "payload.bin"), os.path.join(h.workdir, "copied.bin")
        data = os.urandom(50_000) + b"\0" * 200_000  # compresses, and is not text
        with open(src, "wb") as f:
            f.write(data)
        os.chmod(src, 0o750)
        os.utime(src, (1_000_000_000, 1_100_000_000))
        out = h.run(["sbcast", "-j", str(job_id), "-f", "-C", "-p", src, dest], timeout=120)
        assert out.returncode == 0, out.stderr
        with open(dest, "rb") as f:
            assert f.read() == data
        st = os.stat(dest)
        assert st.st_mode & 0o7777 == 0o750 and int(st.st_mtime) == 1_100_000_000
        # without -f an existing DEST is refused, naming the node
        node = h.job(job_id)["alloc"][0]["node"]
        again = h.run(["sbcast", "-j", str(job_id), "-w", node, src, dest], timeout=120)
        assert again.returncode != 0 and f"{node}: {dest}: File exists" in again.stderr
        # in the job's environment the job is SLURM_JOB_ID's; a relative DEST is the cwd's
        inside = h.run(["sbcast", "-w", node, src, "relative.bin"], env={"SLURM_JOB_ID": str(job_id)}, timeout=120)
        assert inside.returncode == 0, inside.stderr
        with open(os.path.join(h.workdir, "relative.bin"), "rb") as f:
            assert f.read() == data
        # a node outside the job, and no job at all: clear errors
        outside = h.run(["sbcast", "-j", str(job_id), "-w", "nosuchnode", src, dest])
        assert outside.returncode != 0 and "is not part of job" in outside.stderr
        nojob = h.run(["sbcast", src, dest])
        assert nojob.returncode != 0 and "Need a job id" in nojob.stderr
    finally:
        h.run(["scancel", str(job_id)])
    h.wait_job(job_id)


def test_task_epilog_runs_after_each_task_then_the_sites(cluster: Harness) -> None:
    # srun(1) --task-epilog: "The slurmstepd daemon will run executable just after each task
    # terminates. This will be executed before any TaskEpilog parameter in slurm.conf is
    # executed."
    h = cluster
    log = os.path.join(h.workdir, f"epilog-{os.getpid()}")
    with open(os.path.join(h.workdir, "epilog.sh"), "w") as f:
        f.write('#!/bin/sh\necho "user $SLURM_PROCID $(id -u) $PWD" >> "$EPILOG_LOG.$SLURM_PROCID"\n')
    os.chmod(os.path.join(h.workdir, "epilog.sh"), 0o755)
    out = h.run(
        ["srun", "-n2", "-N1", "--task-epilog=epilog.sh", "sh", "-c", "exit 3"],
        env={"EPILOG_LOG": log},
        timeout=120,
    )
    assert out.returncode == 3, out.stderr  # the tasks' status, not the epilog's
    for rank in (0, 1):
        with open(f"{log}.{rank}") as f:  # written before srun heard of the task's end
            assert f.read().splitlines() == [f"user {rank} {os.getuid()} {h.workdir}", f"site {rank}"]


def test_arbitrary_distribution_follows_slurm_hostfile(cluster: Harness) -> None:
    # srun(1) -m arbitrary: "allocate processes in-order as listed in file designated by the
    # environment variable SLURM_HOSTFILE ... If not set the method will default to block."
    h = cluster
    hostfile = os.path.join(h.workdir, "hosts")
    with open(hostfile, "w") as f:
        f.write("node2\nnode1,node2\n")
    show = ["sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME $SLURM_DISTRIBUTION"]
    out = h.run(["srun", "-m", "arbitrary", *show], env={"SLURM_HOSTFILE": hostfile}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["0 node2 arbitrary", "1 node1 arbitrary", "2 node2 arbitrary"]
    # -n takes the file's first N; inside an allocation too
    alloc = h.run(["salloc", "--no-shell", "-N2", "-n4", "-t", "5"], timeout=120)
    assert alloc.returncode == 0, alloc.stderr
    job_id = int(alloc.stderr.split("Granted job allocation")[1].split()[0])
    try:
        two = h.run(
            ["srun", f"--jobid={job_id}", "-n2", "--distribution=arbitrary", *show],
            env={"SLURM_HOSTFILE": hostfile},
            timeout=120,
        )
        assert sorted(two.stdout.splitlines()) == ["0 node2 arbitrary", "1 node1 arbitrary"], two
        plain = h.run(["srun", f"--jobid={job_id}", "-n2", "-N1", "-m", "arbitrary", *show], timeout=120)
        assert sorted(line.split()[0] for line in plain.stdout.splitlines()) == ["0", "1"], plain  # block
        short = h.run(["srun", f"--jobid={job_id}", "-n4", "-m", "arbitrary", "true"], env={"SLURM_HOSTFILE": hostfile})
        assert short.returncode != 0 and "fewer than the 4 tasks" in short.stderr
    finally:
        h.run(["scancel", str(job_id)])
    h.wait_job(job_id)


def test_a_job_with_arbitrary_distribution_gets_the_hostfiles_nodes(cluster: Harness) -> None:
    # sbatch(1)/salloc(1) -m arbitrary: the job's nodes are those SLURM_HOSTFILE lists, and
    # its steps with -m arbitrary lay their tasks out in the file's order.
    h = cluster
    hostfile = os.path.join(h.workdir, "job-hosts")
    with open(hostfile, "w") as f:
        f.write("node2\nnode1\n")
    job_id = h.sbatch("-m", "arbitrary", "-t", "5", "--wrap", "sleep 300", env={"SLURM_HOSTFILE": hostfile})
    try:
        job = h.wait_state(job_id, "RUNNING", timeout=120)
        assert sorted(a["node"] for a in job["alloc"]) == ["node1", "node2"]
        out = h.run(
            ["srun", f"--jobid={job_id}", "-l", "--distribution=arbitrary", "printenv", "SLURMD_NODENAME"],
            env={"SLURM_HOSTFILE": hostfile},
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split("\n")[:-1]) == ["0: node2", "1: node1"], out.stdout
    finally:
        h.run(["scancel", str(job_id)])
    h.wait_job(job_id)


def test_strigger_runs_programs_for_job_and_node_events(cluster: Harness) -> None:
    # strigger(1): "--fini: Trigger an event when the specified job completes execution";
    # "--drained: ... if the specified node goes into a DRAINED state"; "A hostlist expression
    # for the nodelist or job ID is passed as an argument to the program"; an event is
    # triggered once (the trigger is then purged) unless --flags=PERM; --get lists, --clear deletes.
    h = cluster
    log = os.path.join(h.workdir, "trigger.log")
    prog = os.path.join(h.workdir, "trigger.sh")
    with open(prog, "w") as f:
        f.write(f'#!/bin/sh\necho "$1 $2 $(id -un)" >> {log}\n')
    os.chmod(prog, 0o755)
    job = h.run(["sbatch", "--parsable", "-t", "5", "--wrap", "sleep 600"])
    assert job.returncode == 0, job.stderr
    job_id = int(job.stdout.strip())
    node = "node2"
    try:
        fini = h.run(["strigger", "--set", f"--jobid={job_id}", "--fini", f"--program={prog} fini"])
        assert fini.returncode == 0, fini.stderr
        drained = h.run(["strigger", "--set", f"-n{node}", "--drained", f"--program={prog} drained", "--flags=PERM"])
        assert drained.returncode == 0, drained.stderr
        listed = h.run(["strigger", "--get"]).stdout.splitlines()
        assert listed[0].split() == ["TRIG_ID", "RES_TYPE", "RES_ID", "TYPE", "OFFSET", "USER", "FLAGS", "PROGRAM"]
        rows = [line.split() for line in listed[1:]]
        assert [r[1:5] for r in rows] == [["job", str(job_id), "fini", "0"], ["node", node, "drained", "0"]]
        assert rows[1][6] == "PERM"
        only_job = h.run(["strigger", "--get", "-N", f"--jobid={job_id}"]).stdout.splitlines()
        assert len(only_job) == 1 and only_job[0].split()[2] == str(job_id)
        bad = h.run(["strigger", "--set", "--time", f"--program={prog}"])
        assert bad.returncode != 0 and "require --jobid" in bad.stderr
        assert h.run(["scancel", str(job_id)]).returncode == 0
        me = h.run(["id", "-un"]).stdout.strip()

        def lines() -> list[str]:
            return open(log).read().splitlines() if os.path.exists(log) else []

        wait_for(lambda: f"fini {job_id} {me}" in lines(), timeout=120, what="the --fini program")
        assert h.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=trig"]).returncode == 0
        wait_for(lambda: f"drained {node} {me}" in lines(), timeout=120, what="the --drained program")
        # the job's trigger fired and was purged; the PERM one stays until cleared
        left = h.run(["strigger", "--get", "-N"]).stdout.splitlines()
        assert [r.split()[3] for r in left] == ["drained"]
        trig_id = left[0].split()[0]
        assert h.run(["strigger", "--clear", f"--id={trig_id}"]).returncode == 0
        assert h.run(["strigger", "--get", "-N"]).stdout == ""
        gone = h.run(["strigger", "--clear", f"--id={trig_id}"])
        assert gone.returncode != 0 and gone.stderr
    finally:
        h.run(["scancel", str(job_id)])
        h.run(["scontrol", "update", f"nodename={node}", "state=resume"])
        h.run(["strigger", "--clear", "-Q", "--user=" + h.run(["id", "-un"]).stdout.strip()])
    wait_for(
        lambda: "IDLE" in h.run(["sinfo", "-h", "-n", node, "-o", "%T"]).stdout.upper(), timeout=60, what="node2 idle"
    )


def test_strigger_time_trigger_runs_as_the_user_who_set_it(cluster: Harness) -> None:
    # strigger(1): "--time: Trigger an event when the specified job's time limit is reached"
    # with "--offset: ... Specify a negative value if action should preceded the event";
    # "The program will be executed as the user who sets the trigger"; "Only user root or
    # the trigger's creator can delete a trigger."
    h = cluster
    uid = ensure_user("mustertest")
    log = os.path.join(h.workdir, "time-trigger.log")
    prog = os.path.join(h.workdir, "time-trigger.sh")
    with open(prog, "w") as f:
        f.write(f'#!/bin/sh\necho "$1 $(id -un)" >> {log}\n')
    os.chmod(prog, 0o755)
    job_id = h.sbatch("-t", "5", "--wrap", "sleep 600", uid=uid)
    try:
        h.wait_state(job_id, "RUNNING", timeout=120)
        # 5 minutes less 290 s: due 10 s after the start
        out = h.run(["strigger", "--set", "-j", str(job_id), "--time", "--offset=-290", f"-p{prog}"], uid=uid)
        assert out.returncode == 0, out.stderr
        (row,) = h.run(["strigger", "--get", "-N", "--user=mustertest"]).stdout.splitlines()
        assert row.split()[1:6] == ["job", str(job_id), "time", "-290", "mustertest"]
        ensure_user("mustertest2")
        other = h.run(["strigger", "--clear", f"--jobid={job_id}"], uid=pwd.getpwnam("mustertest2").pw_uid)
        assert other.returncode != 0 and other.stderr
        wait_for(
            lambda: os.path.exists(log) and f"{job_id} mustertest" in open(log).read().splitlines(),
            timeout=120,
            what="the --time program, as mustertest",
        )
        assert h.job(job_id)["state"] == "RUNNING"  # the trigger runs a program, nothing more
    finally:
        h.run(["scancel", str(job_id)])
        h.run(["strigger", "--clear", "-Q", "--user=mustertest"])
    h.wait_job(job_id)
