"""squeue's output, filters and order, checked against Slurm 22.05's captures."""

from __future__ import annotations

import pytest

from muster.cli import squeue
from muster.cli.common import CommandError


def _lines(jobs: list[dict], argv: list[str], env: dict | None = None, now: float = 1796227645.0) -> list[str]:
    req = squeue.parse_args(argv, env or {})
    assert isinstance(req, squeue.Request)
    chosen = squeue.select(jobs, req)
    lines = squeue.render(chosen, req.cols, req.header)
    if req.long:
        lines.insert(0, squeue.long_header(now))
    return lines


def _queue(jobs: dict) -> list[dict]:
    # The controller's order is not the display order: feed them shuffled.
    return [jobs[8653], jobs[8656], jobs[8641], jobs[8654]]


def _without_array_job(text: str) -> list[str]:
    """The captures hold an array job (8655) that muster does not have yet."""
    return [line for line in text.splitlines() if "8655" not in line]


def test_default_output_matches_slurm(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_default.txt")
    assert _lines(_queue(jobs), []) == _without_array_job(stdout)


def test_default_format_spelled_out_is_the_same(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_o_default_fmt.txt")
    assert _lines(_queue(jobs), ["-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"]) == _without_array_job(stdout)


def test_long_output_matches_slurm(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_l.txt")
    assert _lines(_queue(jobs), ["-l"]) == _without_array_job(stdout)


def test_noheader_with_custom_format(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_h_noheader.txt")
    assert _lines(_queue(jobs), ["-h", "-o", "%i %T"]) == _without_array_job(stdout)


def test_custom_format_with_separators(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_o_custom.txt")
    got = _lines(_queue(jobs), ["--format=%i|%j|%T|%r|%S|%e|%D|%b|%N|%P|%a|%u|%l|%L|%M|%Q"])
    assert got == _without_array_job(stdout)


def test_long_format_names(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_O.txt")
    got = _lines(_queue(jobs), ["-O", "JobID,Name,State,Reason,StartTime,NumNodes,tres-per-node,NodeList"])
    assert got == _without_array_job(stdout)


def test_start_shows_pending_jobs_by_expected_start(jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_start.txt")
    assert _lines(_queue(jobs), ["--start"]) == _without_array_job(stdout)


def test_start_puts_known_start_times_first(jobs) -> None:
    jobs[8656]["planned_start"] = 1796231242.0
    got = _lines(_queue(jobs), ["--start", "-h", "-o", "%i %S"])
    assert got == ["8656 2026-12-02T17:07:22", "8654 N/A"]


def test_finished_jobs_are_hidden_unless_asked_for(jobs) -> None:
    assert "8641" not in " ".join(_lines(_queue(jobs), ["-h", "-o", "%i"]))
    assert _lines(_queue(jobs), ["-h", "-o", "%i %t", "-t", "CD"]) == ["8641 CD"]
    assert _lines(_queue(jobs), ["-h", "-o", "%i", "-j", "8641"]) == ["8641"]
    assert len(_lines(_queue(jobs), ["-h", "-t", "all"])) == 4


def test_state_filter_takes_short_and_long_names(jobs) -> None:
    assert _lines(_queue(jobs), ["-h", "-o", "%i", "-t", "running"]) == ["8653"]
    assert _lines(_queue(jobs), ["-h", "-o", "%i", "--states=PD"]) == ["8654", "8656"]


ALL_CODES = "PD R S CG CD CA F TO NF PR BF OOM DL CF RV SE RQ RS SI SO ST RD RF RH".split()
ALL_NAMES = (
    "PENDING RUNNING SUSPENDED COMPLETING COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED "
    "BOOT_FAIL OUT_OF_MEMORY DEADLINE CONFIGURING REVOKED SPECIAL_EXIT REQUEUED RESIZING "
    "SIGNALING STAGE_OUT STOPPED RESV_DEL_HOLD REQUEUE_FED REQUEUE_HOLD"
).split()


@pytest.mark.parametrize("text", ALL_CODES + ALL_NAMES + [c.lower() for c in ALL_CODES + ALL_NAMES])
def test_every_slurm_job_state_code_and_name_is_accepted(text: str) -> None:
    f = squeue.parse_args(["-t", text], {})
    assert not isinstance(f, str)


def test_the_state_list_is_read_as_long_names() -> None:
    from muster.core.states import parse_job_states

    assert parse_job_states("cf,RV,se,Requeued,rh,cg") == {
        "CONFIGURING",
        "REVOKED",
        "SPECIAL_EXIT",
        "REQUEUED",
        "REQUEUE_HOLD",
        "COMPLETING",
    }
    assert parse_job_states("R,all") is None
    assert squeue.parse_states(f"{','.join(ALL_CODES)}") == set(ALL_NAMES)


def test_a_state_slurm_lacks_matches_no_job(jobs) -> None:
    assert _lines(_queue(jobs), ["-h", "-o", "%i", "-t", "CF,RH"]) == []


def test_bad_state_is_an_error() -> None:
    with pytest.raises(CommandError, match="Invalid job state specified: XX"):
        squeue.parse_args(["-t", "XX"], {})


def test_completing_job_shows_cg_and_its_nodes(jobs) -> None:
    job = jobs[8653]
    job.update(state="CANCELLED", state_code="CG", completing=True)
    assert _lines([job], ["-h", "-o", "%t %T %R"]) == ["CG COMPLETING node[1-2]"]


def test_partition_filter_without_match_prints_only_the_header(jobs, reference) -> None:
    stdout, _ = reference("fmt_err_squeue_bad_partition.txt")
    assert _lines(_queue(jobs), ["-p", "nosuch"]) == stdout.splitlines()


def test_sort_by_partition_then_state_then_priority(job_factory) -> None:
    a = job_factory(1, partition="gpu", priority=5)
    b = job_factory(2, partition="debug", priority=1)
    c = job_factory(3, partition="gpu", priority=9)
    d = job_factory(4, partition="gpu", state="RUNNING", state_code="R", priority=99, nodes=["n1"])
    assert _lines([a, b, c, d], ["-h", "-o", "%i"]) == ["2", "3", "1", "4"]


def test_explicit_sort(job_factory) -> None:
    jobs = [job_factory(i, spec={"name": n}) for i, n in ((1, "b"), (2, "a"), (3, "c"))]
    assert _lines(jobs, ["-h", "-o", "%j", "-S", "j"]) == ["a", "b", "c"]
    assert _lines(jobs, ["-h", "-o", "%j", "--sort=-j"]) == ["c", "b", "a"]


def test_width_forms(job_factory) -> None:
    job = job_factory(7, spec={"name": "averyveryverylongname"})
    assert _lines([job], ["-h", "-o", "[%.5j][%-5j][%5j][%j]"]) == ["[avery][avery][avery][averyveryverylongname]"]


def test_node_lists_are_never_cut(job_factory) -> None:
    job = job_factory(7, nodes=["gpu-node-001", "gpu-node-003"], state="RUNNING", state_code="R")
    assert _lines([job], ["-h", "-o", "%.4N"]) == ["gpu-node-[001,003]"]


def test_percent_literal_and_trailing_text(job_factory) -> None:
    assert _lines([job_factory(3)], ["-h", "-o", "100%% %i!"]) == ["100% 3!"]


def test_unknown_format_letter_is_an_error() -> None:
    with pytest.raises(CommandError, match="Invalid job format specification"):
        squeue.parse_args(["-o", "%i %W"], {})


def test_user_and_name_filters(job_factory) -> None:
    jobs = [job_factory(1, user="alice"), job_factory(2, user="root", spec={"name": "x"})]
    assert _lines(jobs, ["-h", "-o", "%i", "-u", "root"]) == ["2"]
    assert _lines(jobs, ["-h", "-o", "%i", "-n", "x,y"]) == ["2"]


def test_the_controllers_answer_is_checked_only_on_what_its_query_could_not_say(job_factory) -> None:
    jobs = [job_factory(1, user="alice"), job_factory(2, user="root", state="COMPLETED")]
    for argv, queried in ((["-u", "root"], [1, 2]), (["-t", "PD"], [1, 2]), (["-n", "x,y"], []), (["-A", "z"], [])):
        req = squeue.parse_args(["-h", "-o", "%i", *argv], {})
        assert [j["job_id"] for j in squeue.select(jobs, req, queried=True)] == queried, argv


def test_unknown_user_is_an_error() -> None:
    with pytest.raises(CommandError, match="Invalid user: no-such-user-here"):
        squeue.parse_args(["-u", "no-such-user-here"], {})


def test_environment_format_and_sort(job_factory) -> None:
    jobs = [job_factory(2), job_factory(1)]
    assert _lines(jobs, ["-h"], {"SQUEUE_FORMAT": "%i", "SQUEUE_SORT": "-i"}) == ["2", "1"]


def test_server_query_carries_the_filters() -> None:
    req = squeue.parse_args(["-j", "5,6", "-u", "root", "-p", "gpu", "-n", "my job"], {})
    assert isinstance(req, squeue.Request)
    assert req.filters.query() == "?job_id=5,6&user=root&partition=gpu&name=my%20job"


@pytest.mark.parametrize(
    ("argv", "query"),
    [
        ([], "?state=PD,R,S,CG"),
        (["-t", "all"], ""),
        (["-t", "CD,CG"], "?state=COMPLETED,CG"),
        (["-j", "7"], "?job_id=7"),
        (["--start"], "?state=PENDING"),
    ],
)
def test_server_query_asks_only_for_the_states_shown(argv, query) -> None:
    req = squeue.parse_args(argv, {})
    assert isinstance(req, squeue.Request)
    assert req.filters.query() == query


def test_bad_job_id_is_an_error() -> None:
    with pytest.raises(CommandError, match="Invalid job id: abc"):
        squeue.parse_args(["-j", "abc"], {})


def test_unknown_option_exits_1_with_slurm_text(capsys, reference) -> None:
    _, stderr = reference("fmt_err_squeue_unknown_option.txt")
    assert squeue.main(["--bogus"]) == 1
    assert capsys.readouterr().err == stderr


class _FakeController:
    def __init__(self, answer: object = None, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.paths: list[str] = []

    def get(self, path: str) -> object:
        self.paths.append(path)
        if self.error:
            raise self.error
        return self.answer


def test_unknown_single_job_id_is_slurm_load_jobs_error(monkeypatch, capsys, reference) -> None:
    from muster.protocol.client import ApiError

    _, stderr = reference("fmt_err_squeue_bad_job.txt")
    fake = _FakeController(error=ApiError(404, "Invalid job id specified", "invalid_job_id"))
    monkeypatch.setattr(squeue, "connect", lambda prog: fake)
    assert squeue.main(["-j", "999999"]) == 1
    assert capsys.readouterr().err == stderr
    assert len(fake.paths) == 1 and fake.paths[0].startswith("/v1/jobs?job_id=999999&view=brief&fields=job_id,")


def test_unreachable_controller(monkeypatch, capsys) -> None:
    from muster.protocol.client import ConnectError

    fake = _FakeController(
        error=ConnectError("Unable to contact slurm controller (connect failure): /x.sock: No such file")
    )
    monkeypatch.setattr(squeue, "connect", lambda prog: fake)
    assert squeue.main([]) == 1
    assert capsys.readouterr().err.startswith(
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    )


def test_main_prints_the_queue(monkeypatch, capsys, jobs, reference) -> None:
    stdout, _ = reference("fmt_squeue_default.txt")
    # What the controller answers to the default query: the jobs not ended.
    shown = [j for j in _queue(jobs) if j["state"] in ("PENDING", "RUNNING", "SUSPENDED") or j.get("completing")]
    fake = _FakeController({"jobs": shown, "now": 1796227645.0})
    monkeypatch.setattr(squeue, "connect", lambda prog: fake)
    assert squeue.main([]) == 0
    assert "state=PD,R,S,CG" in fake.paths[0]
    assert capsys.readouterr().out.splitlines() == _without_array_job(stdout)


def test_json_is_data_parser_v0040(monkeypatch, capsys, jobs) -> None:
    import json

    fake = _FakeController({"jobs": [jobs[8653], jobs[8654]], "now": 1796227645.0})
    monkeypatch.setattr(squeue, "connect", lambda prog: fake)
    assert squeue.main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.40"
    assert (doc["errors"], doc["warnings"]) == ([], [])
    by_id = {j["job_id"]: j for j in doc["jobs"]}
    run, big = by_id[8653], by_id[8654]
    assert (run["job_id"], run["name"], run["user_name"], run["partition"]) == (8653, "fmt_run", "root", "gpu")
    assert (run["job_state"], run["state_reason"], run["nodes"]) == (["RUNNING"], "None", "node[1-2]")
    assert run["time_limit"] == {"set": True, "infinite": False, "number": 10}
    assert run["start_time"] == {"set": True, "infinite": False, "number": 1796227642}
    assert run["end_time"] == {"set": False, "infinite": False, "number": 0}
    assert run["array_job_id"]["number"] == 0 and run["array_task_id"]["set"] is False
    assert [n["nodename"] for n in run["job_resources"]["allocated_nodes"]] == ["node1", "node2"]
    assert (big["job_state"], big["state_reason"], big["nodes"]) == (["PENDING"], "Resources", "")
    assert big["start_time"]["set"] is False


def test_json_time_limit_unlimited_and_array_task(monkeypatch, capsys, job_factory) -> None:
    import json

    task = job_factory(20, state="RUNNING", state_code="R", array_job_id=19, array_task_id=1, nodes=["node3"])
    fake = _FakeController({"jobs": [task], "now": 1796227645.0})
    monkeypatch.setattr(squeue, "connect", lambda prog: fake)
    assert squeue.main(["--json", "-j", "19_1"]) == 0
    job = json.loads(capsys.readouterr().out)["jobs"][0]
    assert job["time_limit"] == {"set": True, "infinite": True, "number": 0}
    assert job["array_job_id"] == {"set": True, "infinite": False, "number": 19}
    assert job["array_task_id"] == {"set": True, "infinite": False, "number": 1}


def test_version(capsys) -> None:
    assert squeue.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("slurm 22.05")


# ``squeue -o %all``'s header from Slurm 22.05 (slurm-anchor), less the three fields muster
# has no value for: %s (no header), %W LICENSES and %X CORE_SPEC.
SLURM_ALL_HEADER = (
    "ACCOUNT|TRES_PER_NODE|MIN_CPUS|MIN_TMP_DISK|END_TIME|FEATURES|GROUP|OVER_SUBSCRIBE|JOBID|NAME|COMMENT|"
    "TIME_LIMIT|MIN_MEMORY|REQ_NODES|COMMAND|PRIORITY|QOS|REASON||ST|USER|RESERVATION|WCKEY|EXC_NODES|NICE|S:C:T|"
    "JOBID|EXEC_HOST|CPUS|NODES|DEPENDENCY|ARRAY_JOB_ID|GROUP|SOCKETS_PER_NODE|CORES_PER_SOCKET|THREADS_PER_CORE|"
    "ARRAY_TASK_ID|TIME_LEFT|TIME|NODELIST|CONTIGUOUS|PARTITION|PRIORITY|NODELIST(REASON)|START_TIME|STATE|UID|"
    "SUBMIT_TIME|LICENSES|CORE_SPEC|SCHEDNODES|WORK_DIR"
)


def test_format_all_prints_every_field_between_bars(jobs) -> None:
    lines = _lines(_queue(jobs), ["-o", "%all"])
    expected = SLURM_ALL_HEADER.replace("REASON||ST", "REASON|ST").replace("|LICENSES|CORE_SPEC|", "|")
    assert lines[0] == expected
    assert len(lines) > 1
    assert all(line.count("|") == expected.count("|") for line in lines)  # values unpadded, one per field
    assert squeue.render([], squeue.parse_args(["-o", "%allx"], {}).cols, True) == ["ACCOUNTllx"]  # "%all" alone


def test_a_narrowed_listing_asks_for_users_and_state_codes_only_when_read() -> None:
    def fields(argv: list[str]) -> list[str]:
        query = squeue.listing_query(squeue.parse_args(argv, {}))
        return query.split("&fields=")[1].split(",")

    plain = fields(["-h", "-o", "%i"])
    assert "user" not in plain and "state_code" not in plain and "state" in plain  # the sort reads the state
    assert "state_code" in fields(["-o", "%t"]) and "state_code" not in fields(["-o", "%i", "-S", "-t"])
    assert "user" in fields(["-o", "%i", "-u", "root"]) and "user" in fields(["-o", "%i", "-S", "u"])
    assert {"user", "state_code"} <= set(fields([]))  # the default format shows both


def test_the_default_order_is_partition_state_priority_down_then_job_id() -> None:
    """``sort_jobs``'s one-key default order is the four stable sorts Slurm's ``P,t,-p``
    means (the job id last), and a user's ``-S`` is applied on top of it."""
    import random

    from muster.cli.squeue_filters import SORT_KEYS, sort_jobs

    rng = random.Random(7)
    jobs = [
        {
            "job_id": i,
            "partition": rng.choice(["gpu", "debug", None]),
            "state": rng.choice(["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", None]),
            "priority": rng.choice([0, 1, 5, None]),
            "user": rng.choice(["a", "b"]),
        }
        for i in rng.sample(range(1, 500), 200)
    ]

    def by_layers(order: str) -> list[int]:
        out = sorted(jobs, key=lambda j: j["job_id"])
        for layer in ("P,t,-p", order):
            for key in reversed(layer.split(",")):
                out.sort(key=SORT_KEYS[key.lstrip("-")], reverse=key.startswith("-"))  # type: ignore[arg-type]
        return [j["job_id"] for j in out]

    assert [j["job_id"] for j in sort_jobs(jobs)] == by_layers("P,t,-p")
    assert [j["job_id"] for j in sort_jobs(jobs, "u,-i")] == by_layers("u,-i")
    with pytest.raises(CommandError, match="Invalid sort specification"):
        sort_jobs(jobs, "P,%")
