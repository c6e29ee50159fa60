"""scontrol's record layouts (against Slurm 22.05's captures) and its commands' parsing."""

from __future__ import annotations

import pytest

from muster.cli import scontrol, scontrol_update
from muster.cli.common import CommandError

NOW = 1796227645.0


def _show_job(job: dict, details: bool = False, oneliner: bool = False) -> str:
    return scontrol.format_record(scontrol.job_record(job, details), oneliner)


def _slurm_text(stdout: str) -> str:
    """muster does not know the submitting session id that Slurm prints in AllocNode:Sid."""
    return stdout.replace("AllocNode:Sid=localhost:2422", "AllocNode:Sid=localhost:0")


@pytest.mark.parametrize(
    ("job_id", "capture", "run_time"),
    [
        (8653, "fmt_scontrol_show_job_running.txt", 4),
        (8654, "fmt_scontrol_show_job_pending.txt", 0),
        (8656, "fmt_scontrol_show_job_held.txt", 0),
        (8641, "fmt_scontrol_show_job_completed.txt", 0),
        (8642, "fmt_scontrol_show_job_failed.txt", 0),
    ],
)
def test_show_job_matches_slurm(jobs, reference, job_id, capture, run_time) -> None:
    stdout, _ = reference(capture)
    jobs[job_id]["run_time"] = run_time
    assert _show_job(jobs[job_id]) == _slurm_text(stdout)


def test_show_job_details_lists_gpu_indices(jobs, reference) -> None:
    stdout, _ = reference("fmt_scontrol_show_job_running_d.txt")
    jobs[8653]["run_time"] = 4
    assert _show_job(jobs[8653], details=True) == _slurm_text(stdout)


def test_show_job_oneliner(jobs, reference) -> None:
    stdout, _ = reference("fmt_scontrol_show_job_oneliner.txt")
    jobs[8653]["run_time"] = 4
    assert _show_job(jobs[8653], oneliner=True) == _slurm_text(stdout)


def test_show_job_extra_fields(job_factory) -> None:
    job = job_factory(
        5,
        spec={
            "comment": "hello",
            "gpus": 4,
            "gpu_type": "a100",
            "mem_per_node": 4096,
            "nodelist": ["n1", "n2"],
            "requeue": False,
        },
    )
    text = _show_job(job)
    assert "Comment=hello\n" in text
    assert "TresPerJob=gres:gpu:a100:4" in text
    assert "MinMemoryNode=4G" in text
    assert "ReqNodeList=n[1-2] ExcNodeList=(null)" in text
    assert "Requeue=0 " in text


def test_show_node_matches_slurm_where_muster_knows(nodes, reference) -> None:
    stdout, _ = reference("fmt_scontrol_show_node_alloc.txt")
    got = scontrol.format_node(scontrol.node_record(nodes[0]), False).splitlines()
    want = stdout.splitlines()
    # The same keys in the same places; values muster does not track (architecture, OS,
    # load, free memory) differ, and so do the reference's own times.
    assert [_keys(line) for line in got if not line.strip().startswith("OS=")] == [
        _keys(line) for line in want if not line.strip().startswith("OS=")
    ]
    assert "State=MIXED " in stdout and "   State=MIXED " in "\n".join(got)
    assert "   CfgTRES=cpu=32,mem=125G,billing=32,gres/gpu=8" in got
    assert "   AllocTRES=cpu=1,mem=1000M,gres/gpu=2" in got
    assert got[0] == "NodeName=node1 Arch=(null) CoresPerSocket=16 "


def _keys(line: str) -> list[str]:
    return [word.split("=", 1)[0] for word in line.split() if "=" in word]


def test_show_node_flags_and_reason(node_factory) -> None:
    node = node_factory(
        "node4",
        state="DOWN",
        drain=True,
        responding=False,
        reason="Not responding",
        reason_user="root",
        reason_time=NOW,
    )
    lines = scontrol.node_record(node)
    assert "State=DOWN+DRAIN+NOT_RESPONDING " in " ".join(lines)
    assert lines[-1] == "Reason=Not responding [root@2026-12-02T16:07:25]"


def test_show_partition_matches_slurm(partitions, reference) -> None:
    stdout, _ = reference("fmt_scontrol_show_partition.txt")
    text = "".join(scontrol.format_node(scontrol.partition_record(p), False) for p in partitions)
    assert text == stdout


def test_show_config_lists_every_parameter_in_slurms_order_and_units(reference) -> None:
    stdout, _ = reference("fmt_scontrol_show_config.txt")
    slurm = [line.split("=", 1)[0].strip() for line in stdout.splitlines()[1:] if " = " in line]
    text = scontrol.config_text(
        {
            "ClusterName": "muster",
            "MinJobAge": "300",
            "SlurmdTimeout": "15",
            "DefMemPerCPU": "1000",
            "CtldSocket": "/run/muster.sock",
        },
        NOW,
        "vm",
        "/etc/muster/muster.conf",
        {"BOOT_TIME": "2026-12-02T15:33:15", "MaxNodeCount": "4", "SlurmctldHost[0]": "vm(127.0.0.1)"},
    )
    lines = text.splitlines()
    assert lines[0] == "Configuration data as of 2026-12-02T16:07:25"
    ours = [line.split("=", 1)[0].strip() for line in lines[1:] if " = " in line]
    # Slurm's keys in Slurm's order (those Slurm prints only for its own plugins aside),
    # then muster's own
    assert [k for k in ours if k in slurm] == [k for k in slurm if k in ours]
    assert [k for k in slurm if k not in ours] == []
    assert "MinJobAge               = 300 sec" in lines
    assert "SlurmdTimeout           = 15 sec" in lines
    assert "MaxArraySize            = 1001" in lines
    assert "KillWait                = 30 sec" in lines  # a default, with its unit
    assert "ClusterName             = muster" in lines
    assert "SlurmctldHost[0]        = vm(127.0.0.1)" in lines
    assert lines[-3] == "CtldSocket              = /run/muster.sock"
    assert lines[-1] == "Slurmctld(primary) at vm is UP"


def test_show_hostnames_of_an_empty_list_prints_nothing(capsys) -> None:
    assert scontrol.main(["show", "hostnames", ""]) == 0
    assert capsys.readouterr().out == ""


def test_show_hostnames_and_hostlist(capsys, monkeypatch) -> None:
    assert scontrol.main(["show", "hostnames", "node[1-3],gpu07"]) == 0
    assert capsys.readouterr().out == "node1\nnode2\nnode3\ngpu07\n"
    monkeypatch.setenv("SLURM_JOB_NODELIST", "a[1-2]")
    assert scontrol.main(["show", "hostnames"]) == 0
    assert capsys.readouterr().out == "a1\na2\n"
    assert scontrol.main(["show", "hostlist", "n3,n1,n2,x"]) == 0
    assert capsys.readouterr().out == "n[1-3],x\n"


def test_update_parses_keys_case_blind() -> None:
    ids, body = scontrol_update.parse_update(
        ["JobId=12", "timelimit=7", "Priority=5", "NAME=x", "NumNodes=2-4", "comment=hi there"]
    )
    assert ids == ["12"]
    assert body == {
        "time_limit": 420,
        "priority": 5,
        "name": "x",
        "min_nodes": 2,
        "comment": "hi there",
    }


def test_update_start_time_is_relative_to_now() -> None:
    _, body = scontrol_update.parse_update(["job=3", "StartTime=now+1hour"], now=NOW)
    assert body == {"begin_time": NOW + 3600}


def test_update_rejects_unknown_keys() -> None:
    with pytest.raises(CommandError, match="not supported: Shared=yes"):
        scontrol_update.parse_update(["jobid=3", "Shared=yes"])
    with pytest.raises(CommandError, match="Invalid TimeLimit"):
        scontrol_update.parse_update(["jobid=3", "TimeLimit=soon"])
    with pytest.raises(CommandError, match="No job ID"):
        scontrol_update.parse_update(["TimeLimit=5"])


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("Nice=99999999999999", r"Nice value out of range \(\+/- 2147483645\). Value ignored"),
        ("Nice=-2147483646", r"Nice value out of range"),
        ("Nice=abc", "Invalid Nice value: abc"),
        ("Priority=-1", "Invalid Priority value: -1"),
        ("Priority=99999999999999999999", "Invalid Priority value"),
        ("TimeLimit=99999999999", "Invalid time limit specification"),
        ("NumNodes=99999999999", "Invalid NumNodes value"),
        ("NumNodes=\u00b2", "Invalid NumNodes value"),
        ("ArrayTaskThrottle=99999999999", "Invalid ArrayTaskThrottle value"),
    ],
)
def test_update_refuses_values_slurm_cannot_hold(word: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        scontrol_update.parse_update(["jobid=3", word.encode().decode("unicode_escape")])


def test_update_takes_nice_in_range() -> None:
    assert scontrol_update.parse_update(["jobid=3", "Nice=-2147483645"])[1] == {"nice": -2147483645}
    assert scontrol_update.parse_update(["jobid=3", "nice=+10"])[1] == {"nice": 10}


class _Fake:
    def __init__(self, error: Exception | None = None, answers: dict | None = None) -> None:
        self.error = error
        self.answers = answers or {}
        self.calls: list[tuple[str, str, object]] = []

    def get(self, path: str) -> object:
        self.calls.append(("GET", path, None))
        if self.error:
            raise self.error
        return self.answers.get(path, {})

    def post(self, path: str, body: object = None) -> object:
        self.calls.append(("POST", path, body))
        if self.error:
            raise self.error
        return {"ok": True}


def test_show_unknown_job(monkeypatch, capsys, reference) -> None:
    from muster.protocol.client import ApiError

    _, stderr = reference("fmt_err_scontrol_show_job_bad.txt")
    monkeypatch.setattr(
        scontrol,
        "connect",
        lambda *a: _Fake(ApiError(404, "Invalid job id specified", "invalid_job_id")),
    )
    assert scontrol.main(["show", "job", "999999"]) == 1
    assert capsys.readouterr().err == stderr


def test_show_unknown_node(monkeypatch, capsys, reference) -> None:
    stdout, _ = reference("fmt_err_scontrol_show_node_bad.txt")
    monkeypatch.setattr(scontrol, "connect", lambda *a: _Fake(answers={"/v1/nodes?name=nosuch": {"nodes": []}}))
    assert scontrol.main(["show", "node", "nosuch"]) == 1
    assert capsys.readouterr().out == stdout


def test_show_job_through_main(monkeypatch, capsys, jobs) -> None:
    fake = _Fake(answers={"/v1/jobs?job_id=8653": {"jobs": [jobs[8653]], "now": NOW}})
    monkeypatch.setattr(scontrol, "connect", lambda *a: fake)
    assert scontrol.main(["-o", "show", "job", "8653"]) == 0
    assert capsys.readouterr().out.startswith("JobId=8653 JobName=fmt_run UserId=root(0) ")
    assert scontrol.main(["show", "jobid=8653"]) == 0
    assert capsys.readouterr().out.startswith("JobId=8653 JobName=fmt_run\n   UserId=root(0)")


def test_hold_and_release_calls(monkeypatch) -> None:
    fake = _Fake()
    monkeypatch.setattr(scontrol, "connect", lambda *a: fake)
    assert scontrol.main(["hold", "5,6"]) == 0
    assert scontrol.main(["uhold", "7"]) == 0
    assert scontrol.main(["release", "jobid=8"]) == 0
    assert fake.calls == [
        ("POST", "/v1/jobs/5/hold", {"admin": True}),
        ("POST", "/v1/jobs/6/hold", {"admin": True}),
        ("POST", "/v1/jobs/7/hold", {"admin": False}),
        ("POST", "/v1/jobs/8/release", None),
    ]


def test_hold_unknown_job_reads_like_slurm(monkeypatch, capsys) -> None:
    from muster.protocol.client import ApiError

    monkeypatch.setattr(
        scontrol,
        "connect",
        lambda *a: _Fake(ApiError(404, "Invalid job id specified", "invalid_job_id")),
    )
    assert scontrol.main(["hold", "99999"]) == 1
    assert capsys.readouterr().err == "Invalid job id specified for job 99999\n"


def test_update_sends_the_body(monkeypatch) -> None:
    fake = _Fake()
    monkeypatch.setattr(scontrol, "connect", lambda *a: fake)
    assert scontrol.main(["update", "jobid=8653", "timelimit=7"]) == 0
    assert fake.calls == [("POST", "/v1/jobs/8653/update", {"time_limit": 420})]


def test_update_permission_error(monkeypatch, capsys) -> None:
    from muster.protocol.client import ApiError

    monkeypatch.setattr(
        scontrol,
        "connect",
        lambda *a: _Fake(ApiError(403, "Access/permission denied", "permission_denied")),
    )
    assert scontrol.main(["update", "job=4", "nice=10"]) == 1
    assert capsys.readouterr().err == "Access/permission denied for job 4\n"


def test_unknown_command_and_entity(capsys) -> None:
    assert scontrol.main(["frobnicate"]) == 1
    assert capsys.readouterr().err == "invalid keyword: frobnicate\n"
    assert scontrol.main(["show", "gizmo"]) == 1
    assert capsys.readouterr().err == "invalid entity:gizmo for keyword:show \n"


def test_unknown_option_matches_slurm(capsys, reference) -> None:
    # Slurm 22.05 did not know --json yet (captured); current Slurm does, and so does muster:
    # the capture still gives the words for an option nobody knows.
    _, stderr = reference("fmt_scontrol_show_job_json.txt")
    assert scontrol.main(["show", "job", "8653", "--bogus"]) == 1
    assert capsys.readouterr().err == stderr.replace("--json", "--bogus")


def test_version(capsys) -> None:
    assert scontrol.main(["--version"]) == 0
    assert scontrol.main(["version"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] and out[0].startswith("slurm 22.05.8 (muster ")


def _array_task(job: dict, job_id: int, task: int, state: str = "PENDING") -> dict:
    return {
        **job,
        "job_id": job_id,
        "array_job_id": 8655,
        "array_task_id": task,
        "array_throttle": 2,
        "state": state,
        "reason": "Resources",
    }


def test_show_job_of_an_array_merges_its_pending_tasks(monkeypatch, capsys, jobs) -> None:
    pending = jobs[8654]
    tasks = [_array_task(pending, 8655 + i, i) for i in range(10)]
    fake = _Fake(answers={"/v1/jobs?job_id=8655": {"jobs": tasks, "now": NOW}})
    monkeypatch.setattr(scontrol, "connect", lambda *a: fake)
    assert scontrol.main(["-o", "show", "job", "8655"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("JobId=8655 ArrayJobId=8655 ArrayTaskId=0-9%2 ArrayTaskThrottle=2 JobName=")
    assert out.count("\n") == 1  # one record


def test_array_task_ids_go_to_the_controller_encoded(monkeypatch) -> None:
    fake = _Fake()
    monkeypatch.setattr(scontrol, "connect", lambda *a: fake)
    assert scontrol.main(["requeue", "12_3"]) == 0
    assert scontrol.main(["hold", "12_[1-2,5]"]) == 0
    assert [c[1] for c in fake.calls] == ["/v1/jobs/12_3/requeue", "/v1/jobs/12_%5B1-2%2C5%5D/hold"]
