"""Issue 4 end to end: srun and salloc against real daemons on loopback (each node its own
127.0.0.x address), as a user types them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from harness import Harness, wait_for
from muster.core.hostlist import expand

pytestmark = pytest.mark.integration


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def test_eight_ranks_on_one_node_see_all_eight_gpus_unless_bound(cluster: Harness) -> None:
    grep = " | grep -E '^ ?[0-9]: (CUDA_VISIBLE_DEVICES|SLURMD_NODENAME|RANK)='"
    out = cluster.run("srun -N1 -n8 --gres=gpu:8 -l env" + grep)
    assert out.returncode == 0, out.stderr
    cuda = dict(re.findall(r"^(\d): CUDA_VISIBLE_DEVICES=(\S+)$", out.stdout, re.M))
    assert sorted(cuda) == [str(i) for i in range(8)]
    # Slurm's default: every task sees all of the step's GPUs on its node
    assert set(cuda.values()) == {",".join(str(g) for g in range(8))}
    nodes = set(re.findall(r"SLURMD_NODENAME=(\S+)", out.stdout))
    assert len(nodes) == 1
    assert dict(re.findall(r"^(\d): RANK=(\d)$", out.stdout, re.M)) == {str(i): str(i) for i in range(8)}

    out = cluster.run("srun -N1 -n8 --gres=gpu:8 --gpu-bind=single:1 -l env" + grep)
    assert out.returncode == 0, out.stderr
    cuda = dict(re.findall(r"^(\d): CUDA_VISIBLE_DEVICES=(\S+)$", out.stdout, re.M))
    assert cuda == {str(i): str(i) for i in range(8)}


def _two_tasks(cluster: Harness, *opts: str) -> tuple[list[str], str]:
    """CUDA_VISIBLE_DEVICES of the two tasks of ``srun -N1 -n2 --gres=gpu:2 OPTS``."""
    out = cluster.run(
        ["srun", "-N1", "-n2", "--gres=gpu:2", *opts, "-l", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"]
    )
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(": ", 1) for line in lines_of(out.stdout))
    seen = []
    for task in ("0", "1"):
        cuda, step_gpus = rows[task.rjust(1)].split()
        assert cuda == step_gpus
        seen.append(cuda)
    return seen, out.stderr


def test_two_tasks_on_two_gpus_bind_as_gpu_bind_says(cluster: Harness) -> None:
    seen, _ = _two_tasks(cluster)
    assert seen[0] == seen[1] and len(seen[0].split(",")) == 2  # both see both: set_device(LOCAL_RANK)
    for opts, order in (
        (("--gpu-bind=single:1",), "up"),
        (("--gpu-bind=per_task:1",), "up"),
        (("--gpus-per-task=1",), "up"),  # Slurm's default then is per_task:1
        (("--gpu-bind=map_gpu:1,0",), "down"),
        (("--gpu-bind=mask_gpu:0x2,0x1",), "down"),
    ):
        seen, _ = _two_tasks(cluster, *opts)
        assert all("," not in s for s in seen), (opts, seen)
        assert (int(seen[0]) < int(seen[1])) == (order == "up"), (opts, seen)
    seen, _ = _two_tasks(cluster, "--gpus-per-task=1", "--gpu-bind=none")
    assert seen[0] == seen[1] and len(seen[0].split(",")) == 2
    seen, err = _two_tasks(cluster, "--gpu-bind=verbose,single:1")
    notes = sorted(re.findall(r"gpu-bind: usable_gres=0x[0-9a-f]+; .*local_inx=(\d); global_list=(\d+);", err))
    assert notes == [("0", seen[0]), ("1", seen[1])], err


@pytest.mark.parametrize("bad", ["bogus", "single", "map_gpu:x", "mask_gpu:0"])
def test_a_bad_gpu_bind_is_refused_with_slurms_error(cluster: Harness, bad: str) -> None:
    out = cluster.run(["srun", "-n2", "--gres=gpu:2", f"--gpu-bind={bad}", "true"])
    assert out.returncode == 255
    assert out.stderr.strip() == f"srun: error: Invalid --gpu-bind argument: {bad}"


def test_a_map_gpu_past_the_steps_gpus_refuses_the_step(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "-n2", "--gres=gpu:2", "--gpu-bind=map_gpu:0,2", "true"])
    assert out.returncode != 0
    assert "map_gpu names GPU 2 of a node with 2 GPUs in the step" in out.stderr


def test_gpus_per_task_binds_every_rank_across_two_nodes(cluster: Harness) -> None:
    out = cluster.run(
        "srun -N2 --ntasks-per-node=2 --gpus-per-task=1 -l "
        "bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $LOCAL_RANK $MASTER_ADDR'"
    )
    assert out.returncode == 0, out.stderr
    rows = sorted(lines_of(out.stdout))
    assert len(rows) == 4
    per_node: dict[str, set[str]] = {}
    masters = set()
    for row in rows:
        _label, node, cuda, local, master = row.split()
        per_node.setdefault(node, set()).add(cuda)
        assert cuda == local  # the first free GPUs of an idle node, one per local rank
        masters.add(master)
    assert len(per_node) == 2 and all(v == {"0", "1"} for v in per_node.values())
    assert len(masters) == 1 and masters.pop().startswith("127.0.0.")


def test_four_tasks_on_two_nodes_are_labelled(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N2", "-n4", "-l", "bash", "-c", "echo $SLURM_PROCID@$SLURMD_NODENAME"])
    assert out.returncode == 0, out.stderr
    got = sorted(lines_of(out.stdout))
    assert [g.split(": ")[0] for g in got] == ["0", "1", "2", "3"]
    assert all(g.split(": ")[1].startswith(g.split(": ")[0] + "@node") for g in got)
    assert len({g.split("@")[1] for g in got}) == 2
    assert out.stderr == ""


def test_a_failing_rank_makes_srun_fail_with_slurms_message(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "bash", "-c", "exit 7"])
    assert out.returncode == 7
    assert re.fullmatch(r"srun: error: node\d: task 0: Exited with exit code 7\n", out.stderr), out.stderr
    multi = cluster.run(["srun", "-N2", "-n4", "bash", "-c", "exit $SLURM_PROCID"])
    assert multi.returncode == 3
    assert len(re.findall(r"srun: error: node\d: task [123]: Exited with exit code [123]", multi.stderr)) == 3


def test_a_missing_command_and_a_killed_task(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "/no/such/binary"])
    assert out.returncode == 2
    assert re.search(r"slurmstepd-node\d: error: execve\(\): /no/such/binary: No such file or directory", out.stderr)
    killed = cluster.run(["srun", "bash", "-c", "kill -9 $$"])
    assert killed.returncode == 137 and "task 0: Killed" in killed.stderr


def test_srun_job_records_the_steps_exit(cluster: Harness) -> None:
    out = cluster.run(["srun", "-J", "recorded", "bash", "-c", "exit 5"])
    assert out.returncode == 5
    jobs = cluster.cluster.api("GET", "/v1/jobs?name=recorded&all=1")["jobs"]
    job = max(jobs, key=lambda j: j["job_id"])
    assert job["state"] == "FAILED" and job["exit_code"] == 5 and job["spec"]["interactive"]


def test_stdin_reaches_the_tasks_and_files_take_per_task_patterns(cluster: Harness) -> None:
    out = cluster.run(["srun", "-n2", "-l", "cat"], input="hello\n")
    assert out.returncode == 0, out.stderr
    assert sorted(lines_of(out.stdout)) == ["0: hello", "1: hello"]
    only = cluster.run(["srun", "-n2", "--input=1", "-l", "cat"], input="one\n")
    assert lines_of(only.stdout) == ["1: one"]
    pattern = os.path.join(cluster.workdir, "step-%j.%s.%t.out")
    files = cluster.run(["srun", "-n3", "-o", pattern, "bash", "-c", "echo out $SLURM_PROCID; echo err >&2"])
    assert files.returncode == 0 and files.stdout == ""
    made = sorted(f for f in os.listdir(cluster.workdir) if re.fullmatch(r"step-\d+\.0\.[0-2]\.out", f))
    assert len(made) == 3
    for name in made:
        task = name.split(".")[-2]
        assert cluster.read(name) == f"out {task}\nerr\n"


def test_a_file_naming_no_task_is_one_file_srun_reads_or_writes_for_all(cluster: Harness) -> None:
    src = os.path.join(cluster.workdir, "broadcast.in")
    with open(src, "w") as f:
        f.write("0123456789\n" * 500)
    dst = os.path.join(cluster.workdir, "all-%j.out")
    out = cluster.run(["srun", "-n4", "-N2", f"--input={src}", f"--output={dst}", "--error=/dev/null", "cat", "-"])
    assert out.returncode == 0 and out.stdout == "", out.stderr
    made = [f for f in os.listdir(cluster.workdir) if re.fullmatch(r"all-\d+\.out", f)]
    assert len(made) == 1 and os.path.getsize(os.path.join(cluster.workdir, made[0])) == 4 * 5500


def test_wait_reports_the_running_tasks_then_kills_them(cluster: Harness) -> None:
    out = cluster.run(["srun", "-n3", "-W1", "bash", "-c", "[ $SLURM_PROCID = 1 ] && exit 0; sleep 30"])
    assert "First task exited" in out.stderr
    assert re.search(r"StepId=\d+\.0 tasks 0,2: running", out.stderr), out.stderr
    assert re.search(r"StepId=\d+\.0 task 1: exited", out.stderr)
    assert re.search(r"tasks? [0-9,-]+: Killed", out.stderr) and "exit code 137" not in out.stderr


def test_kill_on_bad_exit_stops_the_other_ranks(cluster: Harness) -> None:
    t0 = time.monotonic()
    out = cluster.run(["srun", "-K", "-n2", "bash", "-c", "if [ $SLURM_PROCID = 1 ]; then exit 4; fi; sleep 60"])
    assert time.monotonic() - t0 < 30
    assert out.returncode == 4 and "task 1: Exited with exit code 4" in out.stderr


def test_srun_inside_a_batch_script_inherits_the_layout(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "steps.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2 --gres=gpu:2 -o steps-%j.out\n"
            "srun -l bash -c 'echo $RANK/$WORLD_SIZE $SLURM_STEP_ID $CUDA_VISIBLE_DEVICES'\n"
            "srun -n1 bash -c 'echo second step $SLURM_STEP_ID'\n"
        )
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id)
    assert job["state"] == "COMPLETED", cluster.read(f"steps-{job_id}.out")
    text = cluster.read(f"steps-{job_id}.out")
    ranks = sorted(re.findall(r"^(\d): (\d)/4 0 (\S+)$", text, re.M))
    assert [r[0] for r in ranks] == ["0", "1", "2", "3"] and [r[1] for r in ranks] == ["0", "1", "2", "3"]
    assert {r[2] for r in ranks} == {"0,1"}  # Slurm's default: each rank sees its node's 2 GPUs
    assert "second step 1" in text


def test_srun_output_patterns_inside_an_array_task_match_sbatchs(cluster: Harness) -> None:
    """submitit's ``srun -o %A_%a...`` inside an array task: %A the array, %a the task."""
    first = cluster.sbatch(
        "--array=2-3",
        "-o",
        "arrstep-batch-%A_%a.out",
        "--wrap",
        "srun -o arrstep-%A_%a_%b-%j-%J-%s-%t.out echo hi",
    )
    for offset, index in enumerate((2, 3)):
        job_id = first + offset
        job = cluster.wait_job(job_id)
        assert job["state"] == "COMPLETED", cluster.read(f"arrstep-batch-{first}_{index}.out")
        assert cluster.read(f"arrstep-{first}_{index}_{index}-{job_id}-{job_id}.0-0-0.out") == "hi\n"


def test_srun_works_when_only_slurm_job_id_is_set(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "bare.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -N2 -o bare-%j.out\n"
            "env -i PATH=$PATH MUSTER_CONF=$MUSTER_CONF SLURM_CONF=$SLURM_CONF SLURM_JOB_ID=$SLURM_JOB_ID "
            "srun -l hostname\n"
        )
    job_id = cluster.sbatch(script)
    assert cluster.wait_job(job_id)["state"] == "COMPLETED", cluster.read(f"bare-{job_id}.out")
    # Each task runs on its node, which (emulated, the tests run as root) has its own host
    # name: agent.nodeident.
    nodes = expand(cluster.job(job_id)["nodelist"])
    assert sorted(lines_of(cluster.read(f"bare-{job_id}.out")))[:2] == [f"0: {nodes[0]}", f"1: {nodes[1]}"]


def test_a_step_waits_for_its_jobs_resources(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "busy.sh")
    with open(script, "w") as f:
        f.write("#!/bin/bash\n#SBATCH -n2 -o busy-%j.out\nsrun -n2 sleep 2 &\nsleep 0.5\nsrun -n2 echo after\nwait\n")
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id)
    text = cluster.read(f"busy-{job_id}.out")
    assert job["state"] == "COMPLETED", text
    assert "step creation temporarily disabled, retrying (Requested nodes are busy)" in text
    assert f"Step created for job {job_id}" in text and text.count("after") == 2


def test_squeue_and_scontrol_show_running_steps(cluster: Harness) -> None:
    proc = subprocess.Popen(
        ["srun", "-N2", "-n2", "-J", "longstep", "sleep", "30"],
        env=cluster.env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def shown_step() -> subprocess.CompletedProcess[str] | None:
            listing = cluster.run(["squeue", "-s"])
            return listing if "longstep" in listing.stdout else None

        out = wait_for(shown_step, 20, interval=0.1, what="squeue -s to show the step")
        assert out.stdout.splitlines()[0].split() == ["STEPID", "NAME", "PARTITION", "USER", "TIME", "NODELIST"]
        row = next(line for line in out.stdout.splitlines() if "longstep" in line).split()
        step_id = row[0]
        assert step_id.endswith(".0")
        shown = cluster.run(["scontrol", "show", "step", step_id])
        assert shown.returncode == 0
        assert f"StepId={step_id} " in shown.stdout and "Nodes=2 CPUs=2 Tasks=2 Name=longstep" in shown.stdout
        # Cancelling the job stops its step's tasks on every node, and srun says so.
        cluster.run(["scancel", step_id.split(".")[0]])
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert b"CANCELLED AT" in err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_two_ctrl_c_within_a_second_abort_the_step(cluster: Harness) -> None:
    ready = f"int-ready-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            "srun",
            "-n2",
            "-l",
            "bash",
            "-c",
            f"trap 'echo got INT' INT; touch {ready}.$SLURM_PROCID; while true; do sleep 0.1; done",
        ],
        env=cluster.env,
        cwd=cluster.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def trapped() -> bool:  # both tasks have set their trap
            assert proc.poll() is None, "srun ended before its tasks were ready"
            return all(os.path.exists(os.path.join(cluster.workdir, f"{ready}.{i}")) for i in (0, 1))

        wait_for(trapped, 30, what="both tasks to trap SIGINT")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # sleep: the second Ctrl-C comes within a second of the first: the behaviour
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert out.count(b"got INT") >= 2  # the first Ctrl-C reached both tasks
        assert b"interrupt (one more within 1 sec to abort)" in err
        assert b"Job step aborted" in err
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_salloc_runs_a_command_in_its_allocation_and_releases_it(cluster: Harness) -> None:
    out = cluster.run(
        ["salloc", "-N2", "bash", "-c", "echo job=$SLURM_JOB_ID nodes=$SLURM_NNODES; srun -l hostname; exit 3"]
    )
    assert out.returncode == 3, out.stderr
    job_id = int(re.search(r"salloc: Granted job allocation (\d+)", out.stderr).group(1))  # type: ignore[union-attr]
    assert f"salloc: Relinquishing job allocation {job_id}" in out.stderr
    assert f"job={job_id} nodes=2" in out.stdout
    assert len(re.findall(r"^[01]: ", out.stdout, re.M)) == 2
    job = cluster.wait_job(job_id)
    assert job["state"] == "FAILED" and job["exit_code"] == 3


def test_a_step_whose_srun_was_killed_ends_and_frees_its_resources(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "orphan.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -n2 -o orphan-%j.out\n"
            "srun -n2 sleep 100 &\nSRUN=$!\nsleep 1.5\nkill -9 $SRUN\n"
            "srun -n2 bash -c 'echo next $SLURM_STEP_ID'\n"
        )
    t0 = time.monotonic()
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id, timeout=60)
    text = cluster.read(f"orphan-{job_id}.out")
    assert job["state"] == "COMPLETED", text
    assert text.count("next 1") == 2, text
    assert time.monotonic() - t0 < 30
    steps = cluster.cluster.api("GET", f"/v1/steps?job_id={job_id}")["steps"]
    assert steps == []  # the job is over; nothing of it is left running


def test_scancel_of_a_step_stops_it_and_the_job_goes_on(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "stepcancel.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -n2 -o stepcancel-%j.out\n"
            "srun -n1 bash -c 'trap \"echo got USR1\" USR1; for i in $(seq 300); do sleep 0.1; done' &\n"
            "sleep 2\nscancel --signal=USR1 $SLURM_JOB_ID.0\nsleep 1\nscancel $SLURM_JOB_ID.0\n"
            "wait\necho srun-rc=$?\nsrun -n1 echo after\n"
        )
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id, timeout=60)
    text = cluster.read(f"stepcancel-{job_id}.out")
    assert job["state"] == "COMPLETED", text
    assert "got USR1" in text and f"*** STEP {job_id}.0 ON node" in text and "after" in text
    rows = cluster.run(["sacct", "-j", str(job_id), "--parsable2", "--noheader", "-o", "JobID,State"])
    assert f"{job_id}.0|CANCELLED" in rows.stdout, rows.stdout


AFFINITY = "import os; print(sorted(os.sched_getaffinity(0)), os.environ.get('SLURM_CPU_BIND_LIST', '-'))"


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2,
    reason="two jobs or tasks can only get CPUs of their own on a host with two or more (CI has two)",
)
def test_cpu_bind_pins_each_task_to_cpus_of_its_own(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "-n2", "-c1", "--cpu-bind=verbose,cores", "-l", sys.executable, "-c", AFFINITY])
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(": ", 1) for line in lines_of(out.stdout))
    cpus = {task: eval(row.split("] ")[0] + "]") for task, row in rows.items()}  # noqa: S307 - our own print
    assert sorted(cpus) == ["0", "1"] and all(len(c) == 1 for c in cpus.values())
    assert cpus["0"] != cpus["1"]
    masks = {row.split("] ")[1] for row in rows.values()}
    assert len(masks) == 1 and masks.pop().count("0x") == 2  # SLURM_CPU_BIND_LIST: both tasks
    told = re.findall(r"cpu-bind=MASK - node\d, task +(\d) +(\d) \[\d+\]: mask (0x[0-9a-f]+) set", out.stderr)
    assert sorted(t for t, _local, _mask in told) == ["0", "1"], out.stderr
    for task, _local, mask in told:
        assert int(mask, 16) == 1 << cpus[task][0]


def test_cpu_bind_none_leaves_tasks_free_and_a_bad_value_is_refused(cluster: Harness) -> None:
    free = cluster.run(["srun", "-N1", "-n1", "--cpu-bind=none", sys.executable, "-c", AFFINITY])
    assert free.returncode == 0, free.stderr
    assert free.stdout.strip() == f"{sorted(os.sched_getaffinity(0))} -"
    bad = cluster.run(["srun", "-N1", "--cpu-bind=cors", "true"])
    assert bad.returncode != 0
    assert 'unrecognized --cpu-bind argument "cors"' in bad.stderr


def test_signal_before_the_time_limit_reaches_an_srun_allocations_tasks(cluster: Harness) -> None:
    out = cluster.run(
        [
            "srun",
            "-N1",
            "-n2",
            "-t",
            "1",
            "--signal=USR1@58",
            "-l",
            "bash",
            "-c",
            'trap "echo got-usr1; exit 0" USR1; for i in $(seq 150); do sleep 0.1; done; echo none',
        ],
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(lines_of(out.stdout)) == ["0: got-usr1", "1: got-usr1"]


def test_a_step_time_limit_inside_a_job_stops_the_step_not_the_job(cluster: Harness) -> None:
    job_id = cluster.sbatch(
        "-N1",
        "-t",
        "5",
        "-o",
        "limit-%j.out",
        "--wrap",
        'srun -t 0:02 sleep 60; echo "srun exited $?"; srun true && echo next-step-ran',
    )
    job = cluster.wait_job(job_id, timeout=60)
    assert job["state"] == "COMPLETED"
    out = cluster.read(f"limit-{job_id}.out")
    assert re.search(rf"\*\*\* STEP {job_id}\.0 ON node\d CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*", out), out
    assert re.search(r"srun exited [1-9]", out) and "next-step-ran" in out, out
    assert int(job["run_time"]) < 30
    rows = cluster.run(["sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State"]).stdout.split()
    assert f"{job_id}.0|TIMEOUT" in rows and f"{job_id}.1|COMPLETED" in rows


def test_multi_prog_runs_a_program_per_task(cluster: Harness) -> None:
    conf = os.path.join(cluster.workdir, "multi.conf")
    with open(conf, "w") as f:
        f.write("# rank  program\n0      echo server %t\n1-2    echo 'worker %t' offset=%o\n*      echo rest\n")
    out = cluster.run(["srun", "-N1", "-n4", "-l", "--multi-prog", conf])
    assert out.returncode == 0, out.stderr
    assert sorted(lines_of(out.stdout)) == ["0: server 0", "1: worker 1 offset=0", "2: worker 2 offset=1", "3: rest"]
    with open(conf, "w") as f:
        f.write("0-1 echo only-two\n")
    bad = cluster.run(["srun", "-N1", "-n3", "--multi-prog", conf])
    assert bad.returncode == 1 and "No executable program specified for task 2" in bad.stderr
    newest = max(cluster.cluster.api("GET", "/v1/jobs")["jobs"], key=lambda j: j["job_id"])
    ended = cluster.wait_job(newest["job_id"], timeout=10)  # its allocation ended with it
    assert ended["state"] == "FAILED" and ended["spec"]["interactive"]
    missing = cluster.run(["srun", "--multi-prog", "/nonexistent.conf"])
    assert missing.returncode == 1 and "Unable to open multi-prog config file" in missing.stderr


def test_pty_gives_task_zero_a_terminal_and_its_input(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "-n2", "--pty", "sh", "-c", 'tty; echo "rank $SLURM_PROCID"'])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.replace("\r", "").split()
    assert lines[0].startswith("/dev/pts/") and lines[1:] == ["rank", "0"]  # task 1's output dropped
    echo = cluster.run(["srun", "-N1", "--pty", "sh", "-c", "read line; echo got:$line"], input="hello\n")
    assert echo.returncode == 0, echo.stderr
    assert "got:hello" in echo.stdout.replace("\r", "")
