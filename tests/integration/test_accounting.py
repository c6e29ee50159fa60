"""Accounting end to end with real daemons and the real commands, on SQLite and on
PostgreSQL: sacctmgr sets up two accounts with equal shares, a flood from one is overtaken
by the other (sprio shows the fair-share factor doing it), GrpTRES holds an account's ninth
GPU with AssocGrpGRES, a QOS MaxWall holds (or with DenyOnLimit refuses) a long job, and
sacct's parsable rows have Slurm's shape."""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

import waiting
from harness import Harness
from muster.cluster.local import ClusterShape
from stores import NO_PG, pg_dsn

pytestmark = pytest.mark.integration

SETTINGS = """
AccountingStorageEnforce=associations,limits,qos
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightAge=100
DefMemPerCPU=1000
SchedulerInterval=1
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def acct_cluster(request: pytest.FixtureRequest) -> Iterator[Harness]:
    extra = SETTINGS
    database = None
    if request.param == "postgresql":
        dsn = pg_dsn()
        if dsn is None:
            pytest.skip(NO_PG)
        import psycopg

        database = "muster_it_" + uuid.uuid4().hex[:10]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
        url = re.sub(r"dbname=\S+", f"dbname={database}", dsn)
        extra += f'AccountingStorageURL="{url}"\n'
    h = Harness(ClusterShape(nodes=2, gpus_per_node=8, cpus_per_node=8, mem_per_node=16000))
    h.cluster.create(h.shape)
    with open(h.cluster.conf_path, "a") as f:
        f.write(extra)
    h.up()
    try:
        for words in (
            "add account A,B,C Fairshare=1",
            "add user root account=A,B,C",
            "modify account where name=C set GrpTRES=gres/gpu=8",
            "add qos short MaxWall=00:10:00",
            "add qos strict MaxWall=00:10:00 Flags=DenyOnLimit",
        ):
            ok(h.run(["sacctmgr", "-i", *words.split()]))
        yield h
    finally:
        h.down()
        if database is not None:
            import psycopg

            with psycopg.connect(pg_dsn(), autocommit=True) as conn:  # type: ignore[arg-type]
                conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def ok(out) -> str:  # noqa: ANN001 - CompletedProcess
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    return out.stdout


def reason(h: Harness, job_id: int) -> str:
    return ok(h.run(["squeue", "-h", "-j", str(job_id), "-o", "%r"])).strip()


def wait_for(check, timeout: float = 30.0):  # noqa: ANN001, ANN201
    return waiting.wait_for(check, timeout, interval=0.2)


def test_sacctmgr_builds_the_tree_and_refuses_unknown_accounts(acct_cluster: Harness) -> None:
    h = acct_cluster
    again = ok(h.run(["sacctmgr", "-i", "add", "account", "A"]))
    assert again.strip() == "Nothing new added."
    tree = ok(h.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,share"]))
    # accounts are kept in lower case, as Slurm keeps them (added as A and B)
    assert {"a||1", "a|root|1", "b||1", "b|root|1"} <= set(tree.splitlines())
    bad = h.run(["sbatch", "-A", "nosuch", "--wrap", "true"])
    assert bad.returncode == 1
    assert bad.stderr.strip().endswith(
        "Batch job submission failed: Invalid account or account/partition combination specified"
    )


def test_the_quiet_account_overtakes_a_flood(acct_cluster: Harness) -> None:
    h = acct_cluster
    flood = [h.sbatch("-A", "A", "-J", "flood", "--gres=gpu:8", "--wrap", "sleep 4") for _ in range(5)]
    wait_for(lambda: h.job(flood[1])["state"] == "RUNNING")
    time.sleep(1.0)  # sleep: A accrues usage while its jobs run; B has none
    late = h.sbatch("-A", "B", "-J", "late", "--gres=gpu:8", "--wrap", "sleep 1")

    def factors() -> dict[int, tuple[int, int]] | None:  # once usage reaches the factors
        rows = ok(h.run(["sprio", "-h", "-o", "%i %F %Y"])).split()
        table = {int(rows[i]): (int(rows[i + 1]), int(rows[i + 2])) for i in range(0, len(rows), 3)}
        return table if late in table and flood[2] in table and table[late][0] > table[flood[2]][0] else None

    table = wait_for(factors, 30)
    assert table[late][0] > table[flood[2]][0], table  # FAIRSHARE: B's factor is the higher
    assert table[late][1] > table[flood[2]][1], table  # so is its priority
    header = ok(h.run(["sprio", "-w"])).splitlines()
    assert header[0].split()[:4] == ["JOBID", "PARTITION", "PRIORITY", "SITE"]
    assert "10000" in header[1].split()
    # When the first flood jobs end, the late job starts before the flood's waiting ones.
    late_job = h.wait_job(late, timeout=60)
    assert late_job["state"] == "COMPLETED"
    waited = [h.job(j) for j in flood[2:]]
    assert all(j["start_time"] is None or j["start_time"] >= late_job["start_time"] for j in waited)
    shares = ok(h.run(["sshare", "-a", "-P", "-n", "-o", "account,user,rawusage,fairshare"]))
    fs = {(row[0].strip(), row[1]): row for row in (line.split("|") for line in shares.splitlines())}
    assert float(fs[("a", "root")][2]) > 0 and float(fs[("a", "root")][3]) < float(fs[("b", "root")][3])
    for j in flood:
        h.wait_job(j, timeout=60)


def test_grp_tres_holds_the_ninth_gpu_with_assoc_grp_gres(acct_cluster: Harness) -> None:
    h = acct_cluster
    shown = ok(h.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", "account=C", "format=account,user,grptres"]))
    assert "c||gres/gpu=8" in shown.splitlines()
    ids = [h.sbatch("-A", "C", "-J", "grp", "--gres=gpu:4", "--wrap", "sleep 3") for _ in range(3)]
    wait_for(lambda: h.job(ids[1])["state"] == "RUNNING")
    assert wait_for(lambda: reason(h, ids[2]) == "AssocGrpGRES")
    assert h.wait_job(ids[2], timeout=60)["state"] == "COMPLETED"  # runs once GPUs free up


def test_a_qos_max_wall_holds_or_refuses_a_long_job(acct_cluster: Harness) -> None:
    h = acct_cluster
    long_job = h.sbatch("-A", "C", "--qos=short", "-t", "20", "--wrap", "true")
    assert wait_for(lambda: reason(h, long_job) == "QOSMaxWallDurationPerJobLimit")
    refused = h.run(["sbatch", "-A", "C", "--qos=strict", "-t", "20", "--wrap", "true"])
    assert refused.returncode == 1
    assert "Job violates accounting/QOS policy" in refused.stderr
    ok(h.run(["scancel", str(long_job)]))
    qos = ok(h.run(["sacctmgr", "-P", "-n", "show", "qos", "format=name,maxwall,flags"]))
    assert "strict|00:10:00|DenyOnLimit" in qos.splitlines()


def test_sacct_parsable2_rows_have_slurms_shape(acct_cluster: Harness) -> None:
    h = acct_cluster
    good = h.sbatch("-A", "B", "-J", "fmt_ok", "--gres=gpu:2", "--wrap", "true")
    bad = h.sbatch("-A", "B", "-J", "fmt_fail", "--wrap", "exit 3")
    for j in (good, bad):
        h.wait_job(j)
    out = ok(
        h.run(
            ["sacct", "--parsable2", "--format=JobID,JobName,State,ExitCode,Elapsed,AllocTRES", "-j", f"{good},{bad}"]
        )
    )
    lines = out.splitlines()
    assert lines[0] == "JobID|JobName|State|ExitCode|Elapsed|AllocTRES"
    assert re.fullmatch(
        rf"{good}\|fmt_ok\|COMPLETED\|0:0\|\d\d:\d\d:\d\d\|billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1", lines[1]
    )
    assert re.fullmatch(
        rf"{good}\.batch\|batch\|COMPLETED\|0:0\|\d\d:\d\d:\d\d\|cpu=1,gres/gpu=2,mem=1000M,node=1", lines[2]
    )
    assert re.fullmatch(rf"{bad}\|fmt_fail\|FAILED\|3:0\|\d\d:\d\d:\d\d\|billing=1,cpu=1,mem=1000M,node=1", lines[3])
    assert re.fullmatch(rf"{bad}\.batch\|batch\|FAILED\|3:0\|\d\d:\d\d:\d\d\|cpu=1,mem=1000M,node=1", lines[4])
    default = ok(h.run(["sacct", "-j", str(good)])).splitlines()
    assert default[0] == "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode "
    assert default[2].split() == [str(good), "fmt_ok", "gpu", "b", "1", "COMPLETED", "0:0"]
    today = ok(h.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Account"])).splitlines()
    assert f"{good}|b" in today and f"{bad}|b" in today
    by_account = ok(h.run(["sacct", "-X", "-n", "-P", "-A", "B", "-o", "JobID"])).split()  # any case
    assert str(good) in by_account and str(bad) in by_account
    report = ok(
        h.run(
            [
                "sreport",
                "-P",
                "-n",
                "-T",
                "gres/gpu",
                "-t",
                "seconds",
                "user",
                "topusage",
                "start=now-1hours",
                "end=now",
            ]
        )
    )
    assert any(line.startswith("muster|root|") and "|a|gres/gpu|" in line for line in report.splitlines())
    util = ok(h.run(["sreport", "-T", "gres/gpu", "-t", "hours", "cluster", "utilization"]))
    assert "Usage reported in TRES Hours" in util


def test_sacct_shows_what_a_batch_script_used(acct_cluster: Harness) -> None:
    h = acct_cluster
    script = os.path.join(h.workdir, "burn.py")
    with open(script, "w") as f:
        f.write(
            "import time\n"
            "x = bytearray(64 * 1024 * 1024)\n"
            "for i in range(0, len(x), 4096): x[i] = 1\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.5: pass\n"
        )
    job_id = h.sbatch("-A", "A", "-c", "2", "--wrap", f"{sys.executable} {script}")
    assert h.wait_job(job_id)["state"] == "COMPLETED"
    rows = ok(
        h.run(["sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,MaxRSS,UserCPU,TotalCPU,CPUTimeRAW,Elapsed"])
    ).splitlines()
    job, batch = (r.split("|") for r in rows[:2])
    assert batch[0] == f"{job_id}.batch" and re.fullmatch(r"\d+K", batch[1]), rows
    assert int(batch[1][:-1]) > 64 * 1024  # the 64 MiB it touched
    assert re.fullmatch(r"00:0\d\.\d{3}", batch[3]) and float(batch[3][3:]) >= 0.4, rows  # user + system
    assert re.fullmatch(r"00:0\d\.\d{3}", batch[2]), rows
    assert job[3] == batch[3] and job[1] == ""  # the job's TotalCPU is its steps'
    assert int(job[4]) == 2 * sum(int(x) * 60**i for i, x in enumerate(reversed(job[5].split(":"))))
    steps = h.sbatch("-A", "A", "-N2", "--ntasks-per-node=1", "--wrap", f"srun {sys.executable} {script}")
    assert h.wait_job(steps)["state"] == "COMPLETED"
    rows = ok(
        h.run(["sacct", "-j", str(steps), "-n", "-P", "-o", "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,TotalCPU"])
    ).splitlines()
    by_id = {r.split("|")[0]: r.split("|") for r in rows}
    step = by_id[f"{steps}.0"]
    assert int(step[1][:-1]) > 64 * 1024 and step[2] in ("node1", "node2") and step[3] in ("0", "1"), rows
    assert int(step[4][:-1]) > 64 * 1024 and float(step[5][3:]) >= 0.8, rows  # two tasks' CPU


def test_sreport_job_goodput_adds_up_what_jobs_reported(acct_cluster: Harness) -> None:
    h = acct_cluster
    # times given with the reports (the agent may read them a heartbeat later); the job runs on
    # long enough for a heartbeat to carry them before it ends
    steps = (
        'echo "step 1 $(date +%s)" >> "$MUSTER_PROGRESS"; sleep 1; '
        'echo "checkpoint 1 $(date +%s)" >> "$MUSTER_PROGRESS"; sleep 8'
    )
    reporting = h.sbatch("-A", "A", "--gres=gpu:2", "--wrap", steps)
    silent = h.sbatch("-A", "A", "--gres=gpu:1", "--wrap", "sleep 1")
    assert h.wait_job(reporting)["state"] == "COMPLETED"
    assert h.wait_job(silent)["state"] == "COMPLETED"
    argv = ["sreport", "-P", "-n", "-t", "seconds", "job", "goodput", "start=now-1hours", "end=now+1hours"]
    rows = [line.split("|") for line in ok(h.run(argv)).splitlines()]
    row = next(r for r in rows if r[1] == "a")
    assert int(row[2]) >= 2 and int(row[3]) >= 1  # jobs, of which reporting
    allocated, startup, lost, productive = map(int, row[4:8])
    assert lost == 0 and productive > 0 and allocated >= startup + productive
    assert row[8].endswith("%") and 0 < float(row[8][:-1]) <= 100
    by_user = ok(h.run([*argv, "group=user"]))
    assert any(line.split("|")[1] == "root" for line in by_user.splitlines())
    bad = h.run([*argv, "group=nosuch"])
    assert bad.returncode != 0 and "Unknown condition" in bad.stderr
