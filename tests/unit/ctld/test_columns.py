"""Nodes listed in columns (``ctld.columns``) and jobs narrowed to some fields
(``ctld.listing``): each row holds what ``node_wire`` holds under the same names, and
sinfo and squeue, reading only the fields their format needs, print byte for byte what
they print from whole wire dicts, for every letter, view, filter and sort."""

from __future__ import annotations

import contextlib
import io
import pathlib
from typing import Any

import pytest
from starlette.testclient import TestClient

from muster.cli import sinfo, squeue
from muster.cli.squeue_filters import SORT_KEYS
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.app import CtldApp
from muster.ctld.columns import NODE_FIELDS, PartitionCache, jobs_by_node, node_rows
from muster.ctld.controller import Identity
from muster.ctld.listing import BRIEF_KEYS
from muster.ctld.wire import node_wire, partition_wire
from muster.protocol.httpd import PEER_KEY
from muster.slurm.sinfo_fields import FIELDS, LONG_NAMES, NODE_KEYS, PARTITION_ONLY
from muster.slurm.squeue_fields import BASE_KEYS as SQUEUE_BASE
from muster.slurm.squeue_fields import BASE_ONLY, EXTRA_FIELDS, JOB_KEYS
from muster.slurm.squeue_fields import FIELDS as SQUEUE_FIELDS
from muster.slurm.squeue_fields import LONG_NAMES as SQUEUE_LONG

CONF = """
ClusterName=t
StateSaveLocation={state}
NodeName=node[1-6] CPUs=32 RealMemory=128000 Gres=gpu:a100:8 Feature=fast,ib
NodeName=cpu[01-03] CPUs=8 RealMemory=16000 Weight=5
PartitionName=gpu Nodes=node[1-6] Default=YES MaxTime=INFINITE State=UP
PartitionName=all Nodes=ALL MaxTime=60 State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


class _Start:  # the scheduler's Start, reduced to what apply_starts reads
    def __init__(self, job_id: int, node: str, cpus: int, gpus: list[int]) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "gpu", False
        self.alloc = [NodeAlloc(node, cpus, 100, gpus)]


@pytest.fixture
def app(tmp_path: pathlib.Path) -> CtldApp:
    config = parse_config(CONF.format(state=tmp_path), str(tmp_path / "muster.conf"))
    ctld = CtldApp(config, b"k" * 32, ManualClock(1000.0), str(tmp_path / "muster.db"))
    ctl = ctld.controller
    for name in list(ctl.nodes)[:-1]:  # cpu03 never registers: UNKNOWN
        ctl.agents.register({"node": name, "gpus": 8 if name.startswith("node") else 0, "running": []})
    starts = []
    for node, cpus, gpus in (("node1", 32, [0]), ("node2", 2, [0, 1]), ("node3", 4, list(range(8)))):
        job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w"), ALICE)
        starts.append(_Start(job.job_id, node, cpus, gpus))
    ctl.launches.apply_starts(starts, ctl.clock.now())
    ctl.liveness.update_nodes(ROOT, ["node4"], "DRAIN", "disk full")
    ctl.liveness.update_nodes(ROOT, ["node2"], "DRAIN", "bad gpu")
    ctl.liveness.update_nodes(ROOT, ["cpu01"], "DOWN", "power")
    ctl.nodes["node5"].silent = True
    return ctld


def as_root(ctld: CtldApp) -> TestClient:
    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, PEER_KEY: (0, 0, 0)}
        await ctld.asgi(scope, receive, send)

    return TestClient(asgi)  # type: ignore[arg-type]


def test_each_row_holds_what_node_wire_holds(app: CtldApp) -> None:
    ctl = app.controller
    fields = list(NODE_FIELDS)
    on = jobs_by_node(ctl.jobs.values())
    rows = node_rows(ctl.nodes.values(), fields, ctl.jobs.values())["rows"]
    wire = [node_wire(n, on.get(n.name, [])) for n in ctl.nodes.values()]
    assert set(fields) == set(wire[0])  # every wire field can be asked for
    assert [dict(zip(fields, row, strict=True)) for row in rows] == wire
    assert node_rows(ctl.nodes.values(), ["name"], [])["rows"] == [[n] for n in ctl.nodes]
    with pytest.raises(InvalidRequest, match="unknown node field"):
        node_rows(ctl.nodes.values(), ["name", "secret"], [])


def test_the_route_answers_in_columns_and_refuses_unknown_fields(app: CtldApp) -> None:
    client = as_root(app)
    answer = client.get("/v1/nodes?fields=name,state,jobs").json()
    assert answer["fields"] == ["name", "state", "jobs"]
    assert answer["rows"][0] == ["node1", "ALLOCATED", [1]] and answer["rows"][-1] == ["cpu03", "UNKNOWN", []]
    assert client.get("/v1/nodes?fields=name,nope").status_code == 400
    assert len(client.get("/v1/nodes").json()["nodes"]) == 9  # the whole view, as before


def test_nodes_bring_the_partitions_along_when_asked(app: CtldApp, monkeypatch: pytest.MonkeyPatch) -> None:
    client = as_root(app)
    parts = client.get("/v1/partitions").json()["partitions"]
    assert client.get("/v1/nodes?partitions=1&fields=name").json()["partitions"] == parts
    assert client.get("/v1/nodes?partitions=1").json()["partitions"] == parts
    assert "partitions" not in client.get("/v1/nodes").json()
    asked: list[str] = []

    class Ctl:  # sinfo makes one request; a controller that ignores partitions=1, two
        def __init__(self, old: bool) -> None:
            self.old = old

        def get(self, path: str) -> dict[str, Any]:
            asked.append(path)
            answer = dict(client.get(path).json())
            if self.old and path.startswith("/v1/nodes"):
                answer.pop("partitions", None)
            return answer

    outputs = []
    for old in (False, True):
        asked.clear()
        monkeypatch.setattr(sinfo, "connect", lambda *a, old=old, **k: Ctl(old))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert sinfo.main([]) == 0
        outputs.append(out.getvalue())
        assert len(asked) == 1 + old and asked[0].startswith("/v1/nodes?partitions=1")
    assert outputs[0] == outputs[1]
    assert all(p["name"] in outputs[0] for p in parts)


def test_partition_lists_are_kept_per_configuration(app: CtldApp) -> None:
    ctl = app.controller
    cache = PartitionCache()
    for p in ctl.config.partitions:
        assert partition_wire(ctl.config, p.name, ctl.nodes, cache.lists) == partition_wire(
            ctl.config, p.name, ctl.nodes
        )
    first = cache.lists(ctl.config, "all", ())
    assert cache.lists(ctl.config, "all", ()) is first  # not computed again
    other = parse_config(CONF.format(state="/x").replace("node[1-6] Default", "node[1-2] Default"), "t.conf")
    gpu = other.partition("gpu")
    assert gpu is not None and cache.lists(other, "gpu", gpu.nodes) == (["node1", "node2"], "node[1-2]")


def test_every_letter_reads_the_partition_or_names_its_node_fields() -> None:
    assert set(FIELDS) <= set(NODE_KEYS) | PARTITION_ONLY
    assert set(NODE_KEYS) & PARTITION_ONLY == set()
    assert all(key in NODE_FIELDS for keys in NODE_KEYS.values() for key in keys)


ARGVS = [
    [],
    ["-l"],
    ["-s"],
    ["-N"],
    ["-N", "-l"],
    ["-R"],
    ["-R", "-l"],
    ["-t", "idle,drain"],
    ["-d"],
    ["-r"],
    ["-n", "node[2-4],cpu01"],
    ["-p", "all", "-S", "-t,N"],
    ["-S", "-C,m"],
    ["-o", "%" + " %".join(k for k in FIELDS if len(k) == 1)],
    ["-O", ",".join(LONG_NAMES)],
    ["-N", "-o", "%N %G %E %H %u %w %z %X %Y %Z %f %b %m %c %C %o %n"],
]


def _both_ways(command: Any, app: CtldApp, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """``command``'s output asking for the fields it reads, then asking for whole rows."""
    client = as_root(app)
    asked: list[str] = []

    class Ctl:
        def get(self, path: str) -> dict[str, Any]:
            asked.append(path)
            answer = client.get(path)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

    monkeypatch.setattr(command, "connect", lambda *a, **k: Ctl())

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert command.main(argv) == 0
        return out.getvalue()

    narrowed = run()
    assert any("fields=" in path for path in asked)
    monkeypatch.setattr(command, "wanted_fields", lambda req: None)
    asked.clear()
    whole = run()
    assert not any("fields=" in path for path in asked)
    return narrowed, whole


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: " ".join(a) or "default")
def test_sinfo_prints_the_same_from_columns_as_from_whole_nodes(
    app: CtldApp, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    compact, whole = _both_ways(sinfo, app, argv, monkeypatch)
    assert whole == compact


# --- squeue: a brief listing narrowed to the fields the format reads --------------------------

BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


@pytest.fixture
def queue(app: CtldApp) -> CtldApp:
    """Jobs of every kind squeue shows differently: running (one completing), pending with
    reasons and a planned start, an array's pending tasks, a heterogeneous job, held,
    another user's, specs with comments, dependencies, constraints, nice and limits."""
    ctl = app.controller
    submit = ctl.queue.submit
    base = {"script": "#!/bin/sh\ntrue\n", "workdir": "/w"}
    done = submit(JobSpec(**base, name="short", time_limit=60), ALICE)  # type: ignore[arg-type]
    run = submit(JobSpec(**base, name="train", comment="lr=3e-4", gpus_per_node=2, time_limit=3600), BOB)  # type: ignore[arg-type]
    ctl.launches.apply_starts([_Start(done.job_id, "node6", 1, [7]), _Start(run.job_id, "node6", 4, [5, 6])], 1000.0)
    ctl.launches.launch_done(run.job_id)
    ctl.clock.advance(125)  # type: ignore[attr-defined]
    ctl.queue.cancel(ctl.jobs[done.job_id], ALICE)  # completing until its node reports the end
    submit(JobSpec(**base, name="arr", array="1-6%2", mem_per_cpu=100, nice=5), ALICE)  # type: ignore[arg-type]
    dep = submit(JobSpec(**base, name="after", dependency=f"afterok:{run.job_id}", constraint="ib"), BOB)  # type: ignore[arg-type]
    ctl.queue.hold(ctl.jobs[dep.job_id], BOB, admin_hold=False)
    wide = submit(
        JobSpec(**base, name="wide", min_nodes=4, partitions=["all"], exclude=["node1"], nodelist=["node2"]), ALICE
    )  # type: ignore[arg-type]
    ctl.jobs[wide.job_id].planned_start = 9000.0
    ctl.hets.submit([JobSpec(**base, name="het"), JobSpec(**{**base, "script": None}, cpus_per_task=2)], BOB)  # type: ignore[arg-type]
    return app


SQUEUE_ARGVS = [
    [],
    ["-l"],
    ["-r"],
    ["--start"],
    ["-t", "all"],
    ["-p", "all", "-S", "-V"],
    ["-n", "train,arr"],
    ["-A", "alice", "-q", "normal"],
    ["-w", "node6"],
    ["-o", "%" + " %".join(SQUEUE_FIELDS)],
    ["-O", ",".join(SQUEUE_LONG) + "," + ",".join(n for n in EXTRA_FIELDS if n not in ("stdout", "stderr"))],
] + [["-S", ("-" if i % 2 else "") + key, "-t", "all"] for i, key in enumerate(SORT_KEYS)]
# Each letter alone, as a narrowed listing holds only what that one letter reads.
SQUEUE_ARGVS += [["-o", f"%i %{letter}", "-t", "all"] for letter in SQUEUE_FIELDS]


@pytest.mark.parametrize("argv", SQUEUE_ARGVS, ids=lambda a: " ".join(a) or "default")
def test_squeue_prints_the_same_from_narrowed_jobs_as_from_brief_ones(
    queue: CtldApp, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    narrowed, brief = _both_ways(squeue, queue, argv, monkeypatch)
    assert narrowed.count("\n") > 1
    assert brief == narrowed


def test_every_squeue_letter_and_name_is_mapped() -> None:
    mapped = set(JOB_KEYS) | BASE_ONLY
    assert set(SQUEUE_FIELDS) <= mapped and set(SORT_KEYS) <= mapped
    assert set(EXTRA_FIELDS) - {"stdout", "stderr"} <= mapped  # output paths: the whole view
    assert all(key in BRIEF_KEYS for keys in JOB_KEYS.values() for key in keys)
    assert all(key in BRIEF_KEYS for key in SQUEUE_BASE)


def test_narrowed_jobs_hold_the_brief_keys_asked_for_and_unknown_ones_are_refused(queue: CtldApp) -> None:
    client = as_root(queue)
    brief = client.get("/v1/jobs?view=brief").json()["jobs"]
    narrow = client.get("/v1/jobs?view=brief&fields=job_id,run_time,spec.name,spec.nice").json()["jobs"]
    assert len(narrow) == len(brief)
    for whole, part in zip(brief, narrow, strict=True):
        assert part["job_id"] == whole["job_id"] and part.get("run_time") == whole.get("run_time")
        spec = {k: whole["spec"][k] for k in ("name", "nice") if k in whole["spec"]}
        assert part["spec"] == spec and set(part) <= {"job_id", "run_time", "spec"}
    assert client.get("/v1/jobs?view=brief&fields=job_id,secret").status_code == 400
    assert client.get("/v1/jobs?fields=job_id").status_code == 400  # the whole view is not narrowed
