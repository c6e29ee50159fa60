"""The commands against a real controller and agents on loopback: what a user types, what
they see, and that the controller did what the command said."""

from __future__ import annotations

import os

import pytest

from harness import Harness
from muster import __version__

pytestmark = pytest.mark.integration


def _ok(out) -> str:  # noqa: ANN001 - CompletedProcess
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    return out.stdout


def test_directives_environment_and_command_line_layer_like_slurm(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "layers.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "#SBATCH -J from-script --time=5\n"
            "#SBATCH --output=layers-%j.out  # a trailing comment\n"
            'echo "args:$1:$2 name:$SLURM_JOB_NAME"\n'
        )
    job_id = cluster.sbatch(script, "one", "two words", env={"SBATCH_JOB_NAME": "from-env", "SBATCH_TIMELIMIT": "7"})
    job = cluster.wait_job(job_id)
    assert job["state"] == "COMPLETED", job
    assert job["spec"]["name"] == "from-env"
    assert job["time_limit"] == 7 * 60
    assert cluster.read(f"layers-{job_id}.out") == "args:one:two words name:from-env\n"


def test_squeue_scontrol_and_update_agree_on_a_held_job(cluster: Harness) -> None:
    job_id = cluster.sbatch("-H", "-J", "rt-held", "-t", "10", "--wrap", "true")
    row = _ok(cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%i|%j|%t|%l|%r"]))
    assert row == f"{job_id}|rt-held|PD|10:00|JobHeldUser\n"

    _ok(cluster.run(["scontrol", "update", f"jobid={job_id}", "TimeLimit=7", "comment=changed"]))
    show = _ok(cluster.run(["scontrol", "show", "job", str(job_id)]))
    assert "TimeLimit=00:07:00" in show and "Comment=changed" in show

    _ok(cluster.run(["scontrol", "hold", str(job_id)]))  # root: an administrator's hold
    assert _ok(cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%r"])) == "JobHeldAdmin\n"
    _ok(cluster.run(["scancel", str(job_id)]))


def test_squeue_shows_the_same_jobs_whether_the_controller_or_squeue_selects_them(cluster: Harness) -> None:
    # squeue checks again only what its query could not say (Filters.by_query): states,
    # users and one name are the controller's; two names are checked by squeue itself.
    tag = f"flt{os.getpid()}"
    a = cluster.sbatch("-H", "-J", f"{tag}a", "--wrap", "true")
    b = cluster.sbatch("-H", "-J", f"{tag}b", "--wrap", "true")

    def ids(*args: str) -> list[str]:
        return _ok(cluster.run(["squeue", "-h", "-o", "%i", *args])).split()

    assert ids("-n", f"{tag}a") == [str(a)]
    assert ids("-n", f"{tag}a", "-t", "PD", "-u", "root") == [str(a)]
    assert ids("-n", f"{tag}a", "-t", "R") == []
    assert ids("-n", f"{tag}a,{tag}b") == [str(a), str(b)]
    _ok(cluster.run(["scancel", str(b)]))
    assert ids("-n", f"{tag}b") == []
    assert ids("-n", f"{tag}b", "-t", "CA") == [str(b)]
    assert ids("-n", f"{tag}a,{tag}b", "-t", "all") == [str(a), str(b)]
    _ok(cluster.run(["scancel", str(a)]))


def test_a_released_job_runs(cluster: Harness) -> None:
    job_id = cluster.sbatch("-H", "-J", "rt-release", "--wrap", "true")
    _ok(cluster.run(["scontrol", "release", str(job_id)]))
    job = cluster.wait_job(job_id, timeout=10)
    assert job["state"] == "COMPLETED"
    assert "JobState=COMPLETED" in _ok(cluster.run(["scontrol", "-o", "show", "job", str(job_id)]))


def test_scancel_cancels_a_running_job_and_is_quiet_about_unknown_ones(cluster: Harness) -> None:
    job_id = cluster.sbatch("-J", "rt-cancel", "--wrap", "sleep 120")
    cluster.wait_state(job_id, "RUNNING")
    running = _ok(cluster.run(["squeue", "-h", "-t", "R", "-o", "%i %T %N"]))
    assert any(line.startswith(f"{job_id} RUNNING node") for line in running.splitlines())
    out = cluster.run(["scancel", "-v", str(job_id)])
    assert (out.returncode, out.stderr) == (0, f"scancel: Terminating job {job_id}\n")
    assert cluster.wait_job(job_id)["state"] == "CANCELLED"

    quiet = cluster.run(["scancel", "999999"])
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    loud = cluster.run(["scancel", "-v", "999999"])
    assert loud.returncode == 0
    assert "Kill job error on job id 999999: Invalid job id specified" in loud.stderr


def test_scancel_by_name_and_state(cluster: Harness) -> None:
    ids = [cluster.sbatch("-H", "-J", "rt-byname", "--wrap", "true") for _ in range(2)]
    _ok(cluster.run(["scancel", "--name=rt-byname", "-t", "PENDING"]))
    for job_id in ids:
        assert cluster.wait_job(job_id)["state"] == "CANCELLED"


def test_errors_read_like_slurm(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "-p", "nosuch", "--wrap", "true"])
    assert (out.returncode, out.stderr) == (
        1,
        "sbatch: error: invalid partition specified: nosuch\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
    )
    out = cluster.run(["squeue", "-j", "999999"])
    assert (out.returncode, out.stderr) == (1, "slurm_load_jobs error: Invalid job id specified\n")
    out = cluster.run(["scontrol", "show", "job", "999999"])
    assert (out.returncode, out.stderr) == (1, "slurm_load_jobs error: Invalid job id specified\n")
    out = cluster.run(["scontrol", "show", "node", "nosuch"])
    assert (out.returncode, out.stdout) == (1, "Node nosuch not found\n")
    out = cluster.run(["squeue", "-p", "nosuch"])
    assert (out.returncode, out.stdout.count("\n")) == (0, 1)
    out = cluster.run(["scontrol", "hold", "999999"])
    assert (out.returncode, out.stderr) == (1, "Invalid job id specified for job 999999\n")


def test_sinfo_and_scontrol_describe_the_cluster(cluster: Harness) -> None:
    nodes = cluster.shape.nodes
    summary = _ok(cluster.run(["sinfo", "-s", "-h"]))
    fields = summary.split()
    assert fields[:3] == ["gpu*", "up", "infinite"]
    assert fields[3].split("/")[3] == str(nodes)
    assert fields[4] == f"node[1-{nodes}]"
    per_node = _ok(cluster.run(["sinfo", "-N", "-h", "-o", "%N %c %m %G"])).splitlines()
    assert (
        per_node[0]
        == f"node1 {cluster.shape.cpus_per_node} {cluster.shape.mem_per_node} gpu:{cluster.shape.gpus_per_node}"
    )
    show = _ok(cluster.run(["scontrol", "show", "node", "node1"]))
    assert show.startswith("NodeName=node1 ") and "Partitions=gpu " in show
    assert f" Version={__version__}\n" in show  # the node's agent, as it registered (a build from git)
    part = _ok(cluster.run(["scontrol", "show", "partition", "gpu"]))
    assert part.startswith("PartitionName=gpu\n") and "Default=YES" in part
    assert _ok(cluster.run(["scontrol", "ping"])).endswith(" is UP\n")
    config = _ok(cluster.run(["scontrol", "show", "config"]))
    assert "ClusterName             = muster" in config


def test_commands_work_over_tcp_with_an_agent_credential(cluster: Harness) -> None:
    """Without the controller's socket, a command asks the node agent to vouch for it."""
    conf = os.path.join(cluster.root, "tcp.conf")
    with open(cluster.cluster.conf_path) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace("CtldSocket=", "CtldSocket=/nonexistent/ctld.sock\n#was "))
    env = {"MUSTER_CONF": conf}
    job_id = cluster.sbatch("-H", "-J", "rt-tcp", "--wrap", "true", env=env)
    assert cluster.job(job_id)["user"] == "root"
    assert _ok(cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%j"], env=env)) == "rt-tcp\n"
    _ok(cluster.run(["scancel", str(job_id)], env=env))
    assert cluster.wait_job(job_id)["state"] == "CANCELLED"


def test_sbatch_wait_returns_the_jobs_exit_code(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "--wait", "--wrap", "exit 3"], timeout=60)
    assert out.returncode == 3 and out.stdout.startswith("Submitted batch job ")


def test_a_job_that_can_no_longer_end_by_its_deadline_ends_deadline(cluster: Harness) -> None:
    late = cluster.sbatch("--deadline=now+60", "-t", "2", "--wrap", "true")  # 2 minutes do not fit in 1
    job = cluster.wait_state(late, "DEADLINE", timeout=30)
    assert job["reason"] == "DeadLine" and job["start_time"] is None
    shown = cluster.run(["scontrol", "show", "job", str(late)]).stdout
    assert "JobState=DEADLINE Reason=DeadLine" in shown and "Deadline=N/A" not in shown
    assert cluster.run(["squeue", "-h", "-t", "DL", "-j", str(late), "-o", "%T"]).stdout.strip() in ("", "DEADLINE")
    fits = cluster.sbatch("--deadline=now+1hour", "-t", "1", "--hold", "--wrap", "true")
    assert cluster.job(fits)["state"] == "PENDING"
    assert cluster.run(["scancel", str(fits)]).returncode == 0
    bad = cluster.run(["sbatch", "--begin=now+2hours", "--deadline=now+1hour", "--wrap", "true"])
    assert bad.returncode == 1
    assert "Incompatible begin and deadline time specification" in bad.stderr


def test_json_outputs_of_scontrol_show_and_sinfo_use_data_parser_v0040(cluster: Harness) -> None:
    import json

    job_id = cluster.sbatch("--hold", "-J", "jsonjob", "--wrap", "true")
    try:
        doc = json.loads(_ok(cluster.run(["scontrol", "show", "job", str(job_id), "--json"])))
        assert doc["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.40" and doc["errors"] == []
        (job,) = doc["jobs"]
        assert job["job_id"] == job_id and job["name"] == "jsonjob" and job["job_state"] == ["PENDING"]
        nodes = json.loads(_ok(cluster.run(["scontrol", "show", "node", "--json"])))["nodes"]
        assert nodes and all(isinstance(n["state"], list) and n["cpus"] > 0 for n in nodes)
        parts = json.loads(_ok(cluster.run(["scontrol", "show", "partition", "--json"])))["partitions"]
        assert parts and parts[0]["nodes"]["total"] == len(nodes)
        info = json.loads(_ok(cluster.run(["sinfo", "--json"])))
        assert sum(e["nodes"]["total"] for e in info["sinfo"]) == len(nodes)
        assert {e["partition"]["name"] for e in info["sinfo"]} == {p["name"] for p in parts}
        refused = cluster.run(["scontrol", "show", "job", "--yaml"])
        assert refused.returncode != 0 and "--json" in refused.stderr
    finally:
        cluster.run(["scancel", str(job_id)])
