"""Bad input and small Slurm-surface gaps, against the session's real cluster (issue 38):
an oversized script, control characters in names and comments, a ``%0`` array throttle,
``SLURM_OPEN_MODE`` in the batch environment, the job-level cancel line, and the step row
of a job cancelled while its srun step ran."""

from __future__ import annotations

import os

import pytest

from harness import Harness, wait_for
from muster.protocol import client

pytestmark = pytest.mark.integration

SUBMIT_FAILED = "sbatch: error: Batch job submission failed: "


def _queued(cluster: Harness) -> list[str]:
    out = cluster.run(["squeue", "-h", "-o", "%i"])
    assert out.returncode == 0, out.stderr
    return sorted(out.stdout.split())


def _wait_for(what: str, check: object, timeout: float = 30) -> None:
    wait_for(check, timeout, what=what)  # type: ignore[arg-type]


def _step_running(cluster: Harness, step: str) -> bool:
    return step in cluster.run(["squeue", "-s", "-h", "-o", "%i"]).stdout.split()


def _sacct(cluster: Harness, job_id: int, fields: str = "JobID,State") -> list[list[str]]:
    out = cluster.run(["sacct", "-j", str(job_id), "--parsable2", "-n", "-o", fields])
    assert out.returncode == 0, out.stderr
    return [line.split("|") for line in out.stdout.splitlines()]


# --- item 1: a script over max_script_size ----------------------------------------------------


def test_a_script_over_max_script_size_gets_slurms_error_not_a_broken_pipe(cluster: Harness) -> None:
    before = _queued(cluster)
    path = os.path.join(cluster.workdir, "huge.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + ("# padding padding padding padding padding padding padding\n" * 300_000))
    size = os.path.getsize(path)  # about 17 MB: over the controller's 16 MB body limit too
    out = cluster.run(["sbatch", path])
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        f"{SUBMIT_FAILED}Pathname of a file, directory or other parameter too long "
        f"(the batch script has {size} bytes; max_script_size is 4194304)\n"
    )
    assert _queued(cluster) == before


def test_the_controller_answers_an_oversized_body_with_json_not_a_reset(cluster: Harness) -> None:
    cfg = cluster.cluster.config()
    body = {"spec": {"script": "#!/bin/sh\n" + "x" * (17 << 20)}}
    with pytest.raises(client.ApiError) as err:
        client.request("POST", "/v1/jobs", body, unix_path=cfg.ctld_socket, timeout=30)
    assert (err.value.status, err.value.code) == (413, "too_large")
    assert "Request body too large" in err.value.message
    body = {"spec": {"script": "#!/bin/sh\n" + "x" * (5 << 20), "workdir": cluster.workdir}}
    with pytest.raises(client.ApiError) as err:  # under the body limit, over max_script_size
        client.request("POST", "/v1/jobs", body, unix_path=cfg.ctld_socket, timeout=30)
    assert err.value.status == 400
    assert err.value.message.startswith("Pathname of a file, directory or other parameter too long (")
    assert cluster.run(["sinfo", "-h", "-o", "%D"]).returncode == 0


# --- item 2: control characters in names and comments ------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-J", "mine\n9999|alice|COMPLETED"], "Invalid job name: control character '\\n' at position 5"),
        (["--job-name=x\rforged"], "Invalid job name: control character '\\r' at position 2"),
        (["--comment", "ok\x1b[2Jwiped"], "Invalid comment: control character '\\x1b' at position 3"),
    ],
    ids=["newline", "cr", "escape"],
)
def test_a_name_or_comment_with_a_control_character_is_refused(cluster: Harness, args: list[str], message: str) -> None:
    before = _queued(cluster)
    out = cluster.run(["sbatch", *args, "--wrap", "true"])
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"{SUBMIT_FAILED}{message}\n"
    assert _queued(cluster) == before


def test_a_printable_name_comes_back_as_one_row_and_cannot_be_updated_into_two(cluster: Harness) -> None:
    job_id = cluster.sbatch("-J", "a|b c", "--comment", "x|y", "--hold", "--wrap", "true")
    try:
        out = cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%i|%j|%k"])
        assert out.stdout == f"{job_id}|a|b c|x|y\n"
        refused = cluster.run(["scontrol", "update", f"JobId={job_id}", "JobName=x\n9999|forged"])
        assert refused.returncode == 1
        assert "Invalid job name: control character '\\n' at position 2" in refused.stderr
        refused = cluster.run(["scontrol", "update", f"JobId={job_id}", "Comment=x\u2028y"])
        assert refused.returncode == 1 and "Invalid comment" in refused.stderr
        out = cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%j|%k"])
        assert out.stdout == "a|b c|x|y\n"
    finally:
        cluster.run(["scancel", str(job_id)])
    cluster.wait_job(job_id)
    assert _sacct(cluster, job_id, "JobID,JobName") == [[str(job_id), "a", "b c"]]


# --- item 4: a %0 throttle -------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["1-5%0", "1-5%", "0-3%00"])
def test_an_array_throttle_of_zero_is_refused(cluster: Harness, spec: str) -> None:
    before = _queued(cluster)
    out = cluster.run(["sbatch", f"--array={spec}", "--wrap", "true"])
    assert out.returncode == 1 and out.stdout == ""
    assert "Invalid job array specification" in out.stderr
    assert _queued(cluster) == before


# --- item 7: SLURM_OPEN_MODE -----------------------------------------------------------------


def test_open_mode_reaches_the_batch_script_and_a_requeued_jobs_step_appends(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "openmode.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH --open-mode=append -o openmode-%j.out\n"
            'echo "mode=${SLURM_OPEN_MODE-unset}"\n'
            'srun -o openmode-step-%j.out echo "step of attempt ${SLURM_RESTART_COUNT:-0}"\n'
            'if [ -z "$SLURM_RESTART_COUNT" ]; then scontrol requeue $SLURM_JOB_ID 2>&1 || echo "requeue: $?"; '
            "sleep 60; fi\n"
        )
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id, lambda j: j["state"] == "COMPLETED" and not j["completing"], timeout=90)
    assert job["restart_count"] == 1, cluster.read(f"openmode-{job_id}.out")
    assert cluster.read(f"openmode-step-{job_id}.out") == "step of attempt 0\nstep of attempt 1\n"
    modes = [x for x in cluster.read(f"openmode-{job_id}.out").splitlines() if x.startswith("mode=")]
    assert modes == ["mode=a", "mode=a"]
    truncating = cluster.sbatch("--open-mode=truncate", "-o", "trunc-%j.out", "--wrap", "echo $SLURM_OPEN_MODE")
    cluster.wait_job(truncating)
    assert cluster.read(f"trunc-{truncating}.out") == "t\n"
    plain = cluster.sbatch("-o", "plain-%j.out", "--wrap", 'echo "${SLURM_OPEN_MODE-unset}"')
    cluster.wait_job(plain)
    assert cluster.read(f"plain-{plain}.out") == "unset\n"


# --- items 8 and 9: a job cancelled while its srun step runs ----------------------------------


@pytest.mark.parametrize("body", ["srun sleep 300", "exec srun sleep 300"], ids=["srun", "exec-srun"])
def test_a_job_cancelled_while_its_step_runs(cluster: Harness, body: str) -> None:
    job_id = cluster.sbatch("-o", "cancelled-%j.out", "--wrap", body)
    try:
        _wait_for(f"step {job_id}.0", lambda: _step_running(cluster, f"{job_id}.0"))
    finally:
        cluster.run(["scancel", str(job_id)])
    cluster.wait_job(job_id)
    _wait_for(
        "the step's end in accounting",
        lambda: [str(job_id) + ".0", "CANCELLED"] in _sacct(cluster, job_id),
        timeout=10,
    )
    rows = _sacct(cluster, job_id)
    assert rows[0] == [str(job_id), "CANCELLED by 0"]
    assert [f"{job_id}.batch", "CANCELLED"] in rows and [f"{job_id}.0", "CANCELLED"] in rows
    lines = cluster.read(f"cancelled-{job_id}.out").splitlines()
    banner = [x for x in lines if f"*** JOB {job_id} ON " in x]
    assert len(banner) == 1, lines
    assert banner[0].startswith(f"slurmstepd: error: *** JOB {job_id} ON node")
    assert " CANCELLED AT 20" in banner[0] and banner[0].endswith(" ***")
