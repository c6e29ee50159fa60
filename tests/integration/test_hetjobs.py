"""Heterogeneous jobs with real daemons: ``#SBATCH hetjob`` and ``sbatch A : B``, the
components started together, the ``_HET_GROUP_<k>`` variables, ``N+k`` rows in squeue,
scontrol and sacct, scancel of the whole job, and the steps ``srun --het-group`` runs."""

from __future__ import annotations

import os
import time

import pytest

from harness import Harness, wait_for
from muster.core.hostlist import expand

pytestmark = pytest.mark.integration

HET_VARS = [
    "SLURM_JOB_ID",
    "SLURM_HET_SIZE",
    "SLURM_JOB_ID_HET_GROUP_0",
    "SLURM_JOB_ID_HET_GROUP_1",
    "SLURM_JOB_NODELIST_HET_GROUP_0",
    "SLURM_JOB_NODELIST_HET_GROUP_1",
    "SLURM_JOB_NUM_NODES_HET_GROUP_0",
    "SLURM_JOB_NUM_NODES_HET_GROUP_1",
    "SLURM_JOB_NAME_HET_GROUP_1",
]


def _write(cluster: Harness, name: str, text: str) -> str:
    path = os.path.join(cluster.workdir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _vars(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _until(check, timeout: float = 30.0):  # noqa: ANN001, ANN202
    return wait_for(check, timeout, interval=0.1)


def test_a_two_component_job_runs_one_script_with_every_components_variables(cluster: Harness) -> None:
    lines = "".join(f'echo "{v}=${{{v}-unset}}"\n' for v in HET_VARS)
    script = _write(
        cluster,
        "het_env.sh",
        "#!/bin/bash\n#SBATCH -N1 -J lead -o het-%j.out\n#SBATCH hetjob\n#SBATCH -N2 -J rest\n" + lines,
    )
    out = cluster.run(["sbatch", script])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Submitted batch job ")
    leader = int(out.stdout.split()[-1])
    job = cluster.wait_job(leader)
    assert job["state"] == "COMPLETED", job
    env = _vars(cluster.read(f"het-{leader}.out"))
    assert env["SLURM_JOB_ID"] == str(leader)
    assert env["SLURM_HET_SIZE"] == "2"
    assert env["SLURM_JOB_ID_HET_GROUP_0"] == str(leader)
    assert env["SLURM_JOB_ID_HET_GROUP_1"] == str(leader + 1)
    assert env["SLURM_JOB_NUM_NODES_HET_GROUP_0"] == "1"
    assert env["SLURM_JOB_NUM_NODES_HET_GROUP_1"] == "2"
    assert env["SLURM_JOB_NAME_HET_GROUP_1"] == "rest"
    # the leader's node and the other component's two are three distinct nodes
    other = cluster.wait_job(leader + 1)  # the component ends with its leader
    assert other["state"] == "COMPLETED" and other["het_job_id"] == leader and other["het_job_offset"] == 1
    assert env["SLURM_JOB_NODELIST_HET_GROUP_1"] == other["nodelist"]
    # accounting: one row per component, N+0 and N+1
    acct = cluster.run(["sacct", "-X", "-n", "-P", "-j", str(leader), "--format=JobID,JobName,State"])
    assert acct.returncode == 0, acct.stderr
    rows = [r.split("|") for r in acct.stdout.split()]
    assert rows == [[f"{leader}+0", "lead", "COMPLETED"], [f"{leader}+1", "rest", "COMPLETED"]]


def test_squeue_scontrol_show_components_and_scancel_ends_the_whole_job(cluster: Harness) -> None:
    script = _write(cluster, "het_sleep.sh", "#!/bin/bash\nsleep 300\n")
    out = cluster.run(["sbatch", "--parsable", "-N1", "-J", "a", ":", "-N1", "-J", "b", script])
    assert out.returncode == 0, out.stderr
    leader = int(out.stdout.strip())
    cluster.wait_state(leader, "RUNNING")
    cluster.wait_state(leader + 1, "RUNNING")
    sq = cluster.run(["squeue", "-h", "-j", str(leader), "-o", "%i %A %j %t"])
    assert sq.returncode == 0, sq.stderr
    assert sq.stdout.split("\n")[:-1] == [f"{leader}+0 {leader} a R", f"{leader}+1 {leader + 1} b R"]
    show = cluster.run(["scontrol", "show", "job", str(leader)])
    assert show.returncode == 0, show.stderr
    assert f"JobId={leader} HetJobId={leader} HetJobOffset=0 JobName=a" in show.stdout
    assert f"JobId={leader + 1} HetJobId={leader} HetJobOffset=1 JobName=b" in show.stdout
    assert show.stdout.count(f"HetJobIdSet={leader}-{leader + 1}") == 2
    one = cluster.run(["scontrol", "show", "job", f"{leader}+1"])
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith(f"JobId={leader + 1} ") and one.stdout.count("HetJobOffset=") == 1
    # once running, one component may be cancelled alone; the rest of the job goes on
    one = cluster.run(["scancel", f"{leader}+1"])
    assert one.returncode == 0, one.stderr
    assert cluster.wait_job(leader + 1)["state"] == "CANCELLED"
    time.sleep(1.5)  # sleep: time for a wrongly cancelled leader to end, which must NOT happen
    assert cluster.job(leader)["state"] == "RUNNING"
    acct = cluster.run(["sacct", "-X", "-n", "-P", "-j", f"{leader}+1", "--format=JobID,State"])
    assert acct.returncode == 0, acct.stderr
    assert acct.stdout.split()[0].startswith(f"{leader}+1|CANCELLED")
    cancel = cluster.run(["scancel", str(leader)])
    assert cancel.returncode == 0, cancel.stderr
    assert cluster.wait_job(leader)["state"] == "CANCELLED"


def test_nothing_starts_until_every_component_fits_and_a_pending_one_is_not_cancelled_alone(
    cluster: Harness,
) -> None:
    script = _write(cluster, "het_wait.sh", "#!/bin/bash\nsleep 1\n")
    # three whole nodes taken for a few seconds: one node is free, the second component needs two
    blocker = cluster.sbatch("-N3", "--exclusive", "--wrap", "sleep 5")
    cluster.wait_state(blocker, "RUNNING")
    out = cluster.run(["sbatch", "--parsable", "-N1", ":", "-N2", script])
    assert out.returncode == 0, out.stderr
    leader = int(out.stdout.strip())
    # a pass has seen it and left it waiting: its component 0 would fit, alone
    assert cluster.wait_job(leader, lambda j: j["reason"] != "None", timeout=10)["state"] == "PENDING"
    assert cluster.job(leader + 1)["state"] == "PENDING"
    refused = cluster.run(["scancel", f"{leader}+1"])
    assert refused.returncode != 0
    assert "Operation not permitted on individual component of heterogeneous job" in refused.stderr
    assert cluster.job(leader + 1)["state"] == "PENDING"
    # once the blocker is gone both start in the same pass, and end with the script
    first, second = cluster.wait_job(leader), cluster.wait_job(leader + 1)
    assert first["state"] == second["state"] == "COMPLETED"
    assert first["start_time"] == second["start_time"]
    assert first["start_time"] >= cluster.job(blocker)["end_time"]


def test_an_impossible_component_refuses_the_whole_submission(cluster: Harness) -> None:
    before = cluster.run(["squeue", "-h", "-o", "%i"]).stdout
    out = cluster.run(["sbatch", "-N1", ":", "-N9", "--wrap", "true"])
    assert out.returncode != 0
    assert "Requested node configuration is not available" in out.stderr
    assert cluster.run(["squeue", "-h", "-o", "%i"]).stdout == before


def test_srun_het_group_runs_one_step_over_both_components_with_ranks_across_them(cluster: Harness) -> None:
    probe = 'echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME job=$SLURM_JOB_ID ntasks=$SLURM_NTASKS het=$SLURM_HET_SIZE"'
    script = _write(
        cluster,
        "het_srun.sh",
        "#!/bin/bash\n#SBATCH -N1 -o het-srun-%j.out\n#SBATCH hetjob\n#SBATCH -N2\n"
        f"srun --het-group=0,1 bash -c '{probe}' | sort\n"
        "echo ---\n"
        "srun -l --het-group=0 echo first : --het-group=1 echo second | sort\n"
        "echo ---\n"
        "srun bash -c 'echo plain=$SLURM_JOB_ID/$SLURM_NTASKS'\n",
    )
    leader = cluster.sbatch(script)
    job = cluster.wait_job(leader)
    assert job["state"] == "COMPLETED", job
    other = cluster.job(leader + 1)
    first_node, other_nodes = job["nodelist"], other["nodelist"]
    one, two, three = cluster.read(f"het-srun-{leader}.out").split("---\n")
    rows = [dict(f.split("=", 1) for f in line.split()) for line in one.splitlines()]
    assert [r["rank"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["node"] == first_node and rows[0]["job"] == str(leader)
    assert {rows[1]["node"], rows[2]["node"]} <= set(expand(other_nodes))
    assert {r["job"] for r in rows[1:]} == {str(leader + 1)}
    assert {r["ntasks"] for r in rows} == {"3"} and {r["het"] for r in rows} == {"2"}
    # MPMD: each part its own command on its own component, labelled with global ranks
    assert two.splitlines() == ["0: first", "1: second", "2: second"]
    # a plain srun runs on component 0 only
    assert three.strip() == f"plain={leader}/1"


FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torchx", "two_roles.sbatch")


def test_the_script_torchx_generates_runs_each_replica_on_its_own_component(cluster: Harness) -> None:
    with open(FIXTURE) as f:
        script = _write(cluster, "torchx_two_roles.sbatch", f.read())
    leader = cluster.sbatch(script)  # torchx: sbatch --parsable <script>
    job = cluster.wait_job(leader)
    assert job["state"] == "COMPLETED", job
    assert cluster.wait_job(leader + 1)["state"] == "COMPLETED"
    rdzv = job["nodelist"]
    for replica in (0, 1):
        line = cluster.read(f"slurm-{leader}-trainer-{replica}.out").strip()
        fields = dict(f.split("=", 1) for f in line.split())
        assert fields["replica"] == str(replica) and fields["role"] == "trainer"
        assert fields["rank"] == str(replica)
        assert fields["job"] == str(leader + replica)
        assert fields["rdzv"] == rdzv  # SLURM_JOB_NODELIST_HET_GROUP_0, torchx's rank0_env
        assert fields["gpus"] != ""
    # what torchx's describe reads: sacct --parsable2 -j N, rows N+k with role-replica names
    acct = cluster.run(["sacct", "--parsable2", "-j", str(leader)])
    assert acct.returncode == 0, acct.stderr
    rows = [
        dict(zip(acct.stdout.splitlines()[0].split("|"), r.split("|"), strict=True))
        for r in acct.stdout.splitlines()[1:]
    ]
    mains = [r for r in rows if "." not in r["JobID"]]
    assert [(r["JobID"], r["JobName"], r["State"]) for r in mains] == [
        (f"{leader}+0", "trainer-0", "COMPLETED"),
        (f"{leader}+1", "trainer-1", "COMPLETED"),
    ]


def test_salloc_with_components_gives_a_het_allocation_and_releases_all_of_it(cluster: Harness) -> None:
    probe = "echo size=$SLURM_HET_SIZE g1=$SLURM_JOB_ID_HET_GROUP_1 n1=$SLURM_JOB_NUM_NODES_HET_GROUP_1; srun -l --het-group=0,1 true; srun --het-group=1 -l echo hi | sort"
    out = cluster.run(["salloc", "-N1", "-J", "inter", ":", "-N2", "bash", "-c", probe])
    assert out.returncode == 0, out.stderr
    leader = int(out.stderr.split("Granted job allocation ")[1].split()[0])
    lines = out.stdout.splitlines()
    assert lines[0] == f"size=2 g1={leader + 1} n1=2"
    assert lines[1:] == ["0: hi", "1: hi"]  # only component 1: its own two tasks, ranks from 0
    assert cluster.wait_job(leader)["state"] == "COMPLETED"
    second = cluster.wait_job(leader + 1)
    assert second["state"] == "COMPLETED" and second["spec"]["name"] == "inter"


def test_srun_parts_outside_an_allocation_make_a_het_job_run_the_step_and_end_it(cluster: Harness) -> None:
    out = cluster.run(["srun", "-N1", "-l", "-J", "mpmd", "echo", "a", ":", "-N2", "echo", "b"])
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["0: a", "1: b", "2: b"]
    rows = cluster.run(["sacct", "-X", "-n", "-P", "--name=mpmd", "--format=JobID,State"]).stdout.split()
    assert len(rows) == 2 and all(r.endswith("|COMPLETED") for r in rows), rows
    assert [r.split("|")[0].split("+")[1] for r in rows] == ["0", "1"]
    assert rows[0].split("+")[0] == rows[1].split("+")[0]  # one het job
