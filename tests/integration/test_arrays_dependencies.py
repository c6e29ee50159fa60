"""Issue 7 with real daemons: job arrays, dependencies, and the small contract points that
real clients (submitit, dask-jobqueue) rely on."""

from __future__ import annotations

import os
import re

import pytest

from harness import Harness
from waiting import wait_for

pytestmark = pytest.mark.integration

ARRAY_ENV = (
    "SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN "
    "SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_STEP"
).split()


def _env_script(cluster: Harness, name: str) -> str:
    path = os.path.join(cluster.workdir, name)
    with open(path, "w") as f:
        f.write("#!/bin/bash\n")
        for var in ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_NNODES", "SLURM_NPROCS", *ARRAY_ENV]:
            f.write(f'echo "{var}=${{{var}-unset}}"\n')
    return path


def _vars(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _squeue(cluster: Harness, *args: str) -> list[str]:
    out = cluster.run(["squeue", "-h", *args])
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:-1]


def _until(check, timeout: float = 30.0):  # noqa: ANN001, ANN202
    return wait_for(check, timeout, interval=0.1)


# --- arrays ------------------------------------------------------------------------------


def test_each_array_task_is_a_job_with_its_own_id_and_array_variables(cluster: Harness) -> None:
    script = _env_script(cluster, "arr_env.sh")
    out = cluster.run(["sbatch", "--array=0-15:4", "-o", "arr-%A_%a-%j.out", script])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Submitted batch job ")
    first = int(out.stdout.split()[-1])
    for k, index in enumerate((0, 4, 8, 12)):
        job = cluster.wait_job(first + k)
        assert (job["array_job_id"], job["array_task_id"], job["state"]) == (first, index, "COMPLETED")
        env = _vars(cluster.read(f"arr-{first}_{index}-{first + k}.out"))
        assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == str(first + k)
        assert env["SLURM_ARRAY_JOB_ID"] == str(first)
        assert env["SLURM_ARRAY_TASK_ID"] == str(index)
        assert (
            env["SLURM_ARRAY_TASK_COUNT"],
            env["SLURM_ARRAY_TASK_MIN"],
            env["SLURM_ARRAY_TASK_MAX"],
            env["SLURM_ARRAY_TASK_STEP"],
        ) == ("4", "0", "12", "4")


def test_array_variables_are_only_set_for_array_tasks(cluster: Harness) -> None:
    script = _env_script(cluster, "plain_env.sh")
    job_id = cluster.sbatch("-o", "plain-%j.out", script)
    cluster.wait_job(job_id)
    env = _vars(cluster.read(f"plain-{job_id}.out"))
    assert all(env[v] == "unset" for v in ARRAY_ENV)
    # the legacy names clients still read
    job = cluster.job(job_id)
    assert env["SLURM_JOBID"] == str(job_id) and env["SLURM_NODELIST"] == job["nodelist"]
    assert (env["SLURM_NNODES"], env["SLURM_NPROCS"]) == ("1", "1")


def test_default_output_of_an_array_task_and_a_list_of_indices(cluster: Harness) -> None:
    first = cluster.sbatch("--array=1,3,5-6", "--wrap", "echo task $SLURM_ARRAY_TASK_ID")
    for k, index in enumerate((1, 3, 5, 6)):
        cluster.wait_job(first + k)
        assert cluster.read(f"slurm-{first}_{index}.out") == f"task {index}\n"


def test_the_throttle_caps_running_tasks_and_squeue_merges_pending_ones(cluster: Harness) -> None:
    first = cluster.sbatch("--array=0-5%2", "-J", "throttled", "--wrap", "sleep 30")
    try:
        _until(lambda: len(_squeue(cluster, "-j", str(first), "-t", "R")) == 2)
        rows = _squeue(cluster, "-j", str(first), "-o", "%i %t %r")
        assert f"{first}_[2-5%2] PD JobArrayTaskLimit" in rows
        assert {f"{first}_0 R None", f"{first}_1 R None"} <= set(rows)
        expanded = _squeue(cluster, "-r", "-j", str(first), "-o", "%i %F %K %A")
        assert f"{first}_3 {first} 3 {first + 3}" in expanded
        show = cluster.run(["scontrol", "show", "job", str(first)]).stdout
        assert f"ArrayJobId={first} ArrayTaskId=2-5%2 ArrayTaskThrottle=2" in show
        sacct = ["sacct", "-X", "-n", "-P", "-j", str(first), "-o", "JobID,State"]
        merged = cluster.run(sacct).stdout.split()
        assert merged == [f"{first}_0|RUNNING", f"{first}_1|RUNNING", f"{first}_[2-5%2]|PENDING"]
        one_each = cluster.run([*sacct, "--array"]).stdout.split()
        assert one_each[2:] == [f"{first}_{k}|PENDING" for k in range(2, 6)]
        cluster.wait_passes()  # passes that could start more: still only two run
        assert len(_squeue(cluster, "-j", str(first), "-t", "R")) == 2
    finally:
        cluster.run(["scancel", str(first)])
    for k in range(6):
        assert cluster.wait_job(first + k)["state"] == "CANCELLED"


def test_scancel_of_one_task_a_range_and_the_whole_array(cluster: Harness) -> None:
    first = cluster.sbatch("--array=0-5", "--hold", "--wrap", "true")
    assert cluster.run(["scancel", f"{first}_1"]).returncode == 0
    assert cluster.run(["scancel", f"{first}_[3-4]"]).returncode == 0
    states = [cluster.job(first + k)["state"] for k in range(6)]
    assert states == ["PENDING", "CANCELLED", "PENDING", "CANCELLED", "CANCELLED", "PENDING"]
    assert _squeue(cluster, "-j", str(first), "-t", "PD", "-o", "%i") == [f"{first}_[0,2,5]"]
    # As in Slurm, a task cancelled while pending has no job record of its own left
    gone = cluster.run(["scontrol", "show", "job", f"{first}_1"])
    assert gone.returncode != 0 and "Invalid job id specified" in gone.stderr
    assert cluster.run(["scontrol", "show", "job", f"{first}_2"]).returncode == 0
    assert cluster.run(["scancel", str(first)]).returncode == 0
    assert "JobState=CANCELLED" in cluster.run(["scontrol", "show", "job", str(first)]).stdout
    assert all(cluster.job(first + k)["state"] == "CANCELLED" for k in range(6))
    # scancel of finished jobs, and of a task that does not exist, is silent success
    assert cluster.run(["scancel", str(first), f"{first}_9"]).returncode == 0


def test_an_array_over_max_array_size_is_refused(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "--array=1-5000", "--wrap", "true"])
    assert out.returncode == 1
    assert out.stderr == "sbatch: error: Batch job submission failed: Invalid job array specification\n"


def test_requeue_of_an_array_task_by_its_array_name(cluster: Harness) -> None:
    first = cluster.sbatch("--array=0-1", "--wrap", "sleep 30")
    try:
        cluster.wait_state(first + 1, "RUNNING")
        out = cluster.run(["scontrol", "requeue", f"{first}_1"])
        assert out.returncode == 0, out.stderr
        job = cluster.wait_job(first + 1, lambda j: j["restart_count"] == 1)
        assert job["array_task_id"] == 1
    finally:
        cluster.run(["scancel", str(first)])


# --- dependencies --------------------------------------------------------------------------


def test_afterok_on_an_array_waits_for_all_its_tasks(cluster: Harness) -> None:
    first = cluster.sbatch("--array=0-2", "--wrap", "sleep 1")
    after = cluster.sbatch(f"--dependency=afterok:{first}", "--wrap", "true")
    assert cluster.job(after)["state"] == "PENDING"
    job = cluster.wait_job(after)
    assert job["state"] == "COMPLETED"
    ends = [cluster.job(first + k)["end_time"] for k in range(3)]
    assert job["start_time"] >= max(ends)


def test_afternotok_and_any_of(cluster: Harness) -> None:
    bad = cluster.sbatch("--wrap", "exit 3")
    good = cluster.sbatch("--wrap", "true")
    notok = cluster.sbatch(f"--dependency=afternotok:{bad}", "--wrap", "true")
    either = cluster.sbatch(f"--dependency=afterok:{bad}?afterok:{good}", "--wrap", "true")
    assert cluster.wait_job(notok)["state"] == "COMPLETED"
    assert cluster.wait_job(either)["state"] == "COMPLETED"


def test_a_dependency_that_can_never_be_met_waits_or_is_cancelled(cluster: Harness) -> None:
    bad = cluster.sbatch("--wrap", "exit 1")
    cluster.wait_job(bad)
    waits = cluster.sbatch(f"--dependency=afterok:{bad}", "--wrap", "true")
    killed = cluster.sbatch(f"--dependency=afterok:{bad}", "--kill-on-invalid-dep=yes", "--wrap", "true")
    try:
        job = cluster.wait_job(waits, lambda j: j["reason"] == "DependencyNeverSatisfied", timeout=20)
        assert job["state"] == "PENDING"
        assert _squeue(cluster, "-j", str(waits), "-o", "%r") == ["DependencyNeverSatisfied"]
        assert cluster.wait_job(killed)["state"] == "CANCELLED"
    finally:
        cluster.run(["scancel", str(waits)])


@pytest.mark.parametrize("kind", ["afterok", "afterany", "afternotok", "aftercorr"])
def test_a_dependency_on_a_job_that_never_existed_is_refused(cluster: Harness, kind: str) -> None:
    before = _squeue(cluster, "-o", "%i")
    out = cluster.run(["sbatch", f"--dependency={kind}:999999", "--wrap", "true"])
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "sbatch: error: Batch job submission failed: Job dependency problem\n"
    assert _squeue(cluster, "-o", "%i") == before


@pytest.mark.parametrize("spec", ["afterok", "afterok:", "bogus:12", "afterok:12?afterany:3,after:4"])
def test_a_malformed_dependency_is_refused(cluster: Harness, spec: str) -> None:
    out = cluster.run(["sbatch", f"--dependency={spec}", "--wrap", "true"])
    assert out.returncode == 1
    assert out.stderr == "sbatch: error: Batch job submission failed: Job dependency problem\n"


def test_singleton_runs_one_job_of_a_name_at_a_time(cluster: Harness) -> None:
    a = cluster.sbatch("-J", "only-one", "--dependency=singleton", "--wrap", "sleep 2")
    b = cluster.sbatch("-J", "only-one", "--dependency=singleton", "--wrap", "true")
    job_b = cluster.wait_job(b)
    job_a = cluster.job(a)
    assert job_b["start_time"] >= job_a["end_time"]


def test_aftercorr_pairs_the_tasks_of_two_arrays(cluster: Harness) -> None:
    first = cluster.sbatch("--array=0-1", "--wrap", "sleep $((1 + 2 * SLURM_ARRAY_TASK_ID))")
    second = cluster.sbatch("--array=0-1", f"--dependency=aftercorr:{first}", "--wrap", "true")
    done0 = cluster.wait_job(second)
    assert done0["start_time"] >= cluster.job(first)["end_time"]
    assert done0["start_time"] < cluster.wait_job(first + 1)["end_time"]


# --- the contract clients rely on ------------------------------------------------------------


def test_squeue_all_states_and_sinfo_cpus(cluster: Harness) -> None:
    job_id = cluster.sbatch("--wrap", "true")
    cluster.wait_job(job_id)
    rows = _squeue(cluster, "-o", "%i %t", "-t", "all")
    assert f"{job_id} CD" in rows
    out = cluster.run(["sinfo", "-o", "%C"])
    assert out.returncode == 0
    header, value = out.stdout.split("\n")[:2]
    assert header == "CPUS(A/I/O/T)" and len(value.split("/")) == 4


def test_scancel_signal_reaches_the_tasks_not_the_batch_shell(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "sig_task.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -o sig-%j.out\n"
            "trap 'echo shell got USR2' USR2\n"
            'python3 -c "import signal, sys, time\n'
            "signal.signal(signal.SIGUSR2, lambda *a: (print('task got USR2', flush=True), sys.exit(0)))\n"
            "print('ready', flush=True)\n"
            'time.sleep(60)"\n'
            "echo shell done\n"
        )
    job_id = cluster.sbatch(script)
    _until(
        lambda: (
            "ready" in cluster.read(f"sig-{job_id}.out")
            if os.path.exists(os.path.join(cluster.workdir, f"sig-{job_id}.out"))
            else False
        )
    )
    out = cluster.run(["scancel", str(job_id), "--signal", "USR2"])
    assert out.returncode == 0, out.stderr
    assert cluster.wait_job(job_id)["state"] == "COMPLETED"
    lines = cluster.read(f"sig-{job_id}.out").splitlines()
    assert lines == ["ready", "task got USR2", "shell done"]


def test_missing_output_directories_are_created(cluster: Harness) -> None:
    job_id = cluster.sbatch("-o", "new/dir/%j/out.txt", "-e", "new/err/%j.err", "--wrap", "echo hi; echo oops >&2")
    assert cluster.wait_job(job_id)["state"] == "COMPLETED"
    assert cluster.read(f"new/dir/{job_id}/out.txt") == "hi\n"
    assert cluster.read(f"new/err/{job_id}.err") == "oops\n"


def test_parsable_with_clusters_prints_the_cluster_and_an_unknown_one_is_refused(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "--parsable", "-M", "muster", "--hold", "--wrap", "true"])
    assert out.returncode == 0, out.stderr
    job_id, name = out.stdout.strip().split(";")
    assert name == "muster" and cluster.job(int(job_id))["state"] == "PENDING"
    plain = cluster.run(["sbatch", "--clusters=muster", "--hold", "--wrap", "true"])
    assert re.fullmatch(r"Submitted batch job \d+ on cluster muster\n", plain.stdout)
    before = len(cluster.cluster.api("GET", "/v1/jobs")["jobs"])
    bad = cluster.run(["sbatch", "-M", "elsewhere", "--wrap", "true"])
    assert bad.returncode == 1 and "'elsewhere' can't be reached now" in bad.stderr
    assert len(cluster.cluster.api("GET", "/v1/jobs")["jobs"]) == before
    cluster.run(["scancel", job_id, plain.stdout.split()[3]])


def test_sbatch_script_on_stdin_and_environment_precedence(cluster: Harness) -> None:
    script = "#!/bin/bash\n#SBATCH -J from-script # a comment\n#SBATCH --comment='two words'\necho $SLURM_JOB_NAME\n"
    job_id = cluster.sbatch(input=script)
    job = cluster.wait_job(job_id)
    assert job["spec"]["name"] == "from-script" and job["spec"]["comment"] == "two words"
    job_id = cluster.sbatch(input=script, env={"SBATCH_JOB_NAME": "from-env"})
    assert cluster.wait_job(job_id)["spec"]["name"] == "from-env"
    job_id = cluster.sbatch("-J", "from-cli", input=script, env={"SBATCH_JOB_NAME": "from-env"})
    assert cluster.wait_job(job_id)["spec"]["name"] == "from-cli"
    assert cluster.read(f"slurm-{job_id}.out") == "from-cli\n"


COUNT_USR2 = (
    "import signal, time\n"
    "got = []\n"
    "signal.signal(signal.SIGUSR2, lambda *a: got.append(time.time()))\n"
    "print('ready', flush=True)\n"
    "start = time.time()\n"
    "while time.time() - start < 40 and not (got and time.time() - got[0] > 2):\n"
    "    time.sleep(0.1)\n"
    "print('task got USR2 x', len(got), flush=True)\n"
)


@pytest.mark.parametrize("how", ["scancel", "time-limit warning"])
def test_a_signal_reaches_an_srun_task_once_and_spares_the_batch_shell(cluster: Harness, how: str) -> None:
    import shutil
    import sys

    if shutil.which("srun", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("needs srun (issue 4)")
    task = os.path.join(cluster.workdir, "count_usr2.py")
    with open(task, "w") as f:
        f.write(COUNT_USR2)
    script = os.path.join(cluster.workdir, "sig_step.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/bash\ntrap 'echo shell got USR2' USR2\nsrun {sys.executable} {task}\necho shell done\n")
    extra = ["--time=1", "--signal=USR2@55"] if how != "scancel" else []
    job_id = cluster.sbatch("-o", "sigstep-%j.out", *extra, script)
    out = os.path.join(cluster.workdir, f"sigstep-{job_id}.out")
    _until(lambda: os.path.exists(out) and "ready" in cluster.read(out))
    if how == "scancel":
        result = cluster.run(["scancel", "--signal=USR2", str(job_id)])
        assert result.returncode == 0, result.stderr
    assert cluster.wait_job(job_id, timeout=60)["state"] == "COMPLETED"
    lines = [x for x in cluster.read(out).splitlines() if not x.startswith("srun:")]
    assert lines == ["ready", "task got USR2 x 1", "shell done"]


def test_a_time_limit_warning_reaches_the_tasks_on_every_node(cluster: Harness) -> None:
    import shutil
    import sys

    if shutil.which("srun", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("needs srun (issue 4)")
    task = os.path.join(cluster.workdir, "count_usr2.py")
    with open(task, "w") as f:
        f.write(COUNT_USR2)
    script = os.path.join(cluster.workdir, "sig_two_nodes.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/bash\nsrun {sys.executable} {task}\necho shell done\n")
    job_id = cluster.sbatch("-N2", "--ntasks-per-node=1", "--time=1", "--signal=USR2@55", "-o", "sig2-%j.out", script)
    job = cluster.wait_job(job_id, timeout=60)
    assert job["state"] == "COMPLETED" and job["num_nodes"] == 2
    lines = sorted(x for x in cluster.read(f"sig2-{job_id}.out").splitlines() if not x.startswith("srun:"))
    assert lines == ["ready", "ready", "shell done", "task got USR2 x 1", "task got USR2 x 1"]
