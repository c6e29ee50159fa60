"""Issue 3 with real daemons: the backfill seed scenario and reservations."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def four_by_eight() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=4, gpus_per_node=8, cpus_per_node=32, mem_per_node=128000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_backfill_starts_the_short_job_in_the_pass_its_submission_triggers(four_by_eight: Harness) -> None:
    h = four_by_eight
    gpu = ["--gres=gpu:8", "--exclusive"]
    a = h.sbatch(*gpu, "-N2", "-t", "10:00", "-J", "A", "--wrap", "sleep 6")
    job_a = h.wait_state(a, "RUNNING")
    b = h.sbatch(*gpu, "-N4", "-t", "2:00", "-J", "B", "--wrap", "sleep 1")
    job_b = h.wait_job(b, lambda j: j["reason"] == "Resources" and j["planned_start"] is not None, timeout=10)
    assert job_b["state"] == "PENDING"
    assert job_b["planned_start"] == pytest.approx(job_a["start_time"] + 600, abs=1.0)

    c = h.sbatch(*gpu, "-N1", "-t", "5:00", "-J", "C", "--wrap", "sleep 1")
    job_c = h.wait_state(c, "RUNNING", timeout=20)  # the submission's own pass, not a 30 s cycle
    assert job_c["scheduler"] == "Backfill"

    d = h.sbatch(*gpu, "-N1", "-t", "60:00", "-J", "D", "--wrap", "sleep 1")
    # a pass has considered D (its submission's own) and left it waiting: it would delay B
    job_d = h.wait_job(d, lambda j: j["reason"] != "None", timeout=10)
    assert job_d["state"] == "PENDING", job_d

    start = h.run(["squeue", "--start", "-h", "-j", str(b), "-o", "%i %S"]).stdout.split()
    assert start[0] == str(b) and start[1] != "N/A"

    job_b = h.wait_job(b, timeout=60)
    job_d = h.wait_job(d, timeout=60)
    assert job_b["state"] == job_d["state"] == "COMPLETED"
    assert job_b["start_time"] >= h.job(a)["end_time"]
    assert job_b["start_time"] < job_d["start_time"]


def test_a_reservation_keeps_other_jobs_off_its_nodes(four_by_eight: Harness) -> None:
    h = four_by_eight
    out = h.run(
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=bigrun",
            "StartTime=now",
            "Duration=60",
            "Users=root",
            "NodeCnt=3",
        ]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Reservation created: bigrun\n"
    show = h.run(["scontrol", "show", "reservation", "bigrun"]).stdout
    assert show.startswith("ReservationName=bigrun StartTime=") and "NodeCnt=3" in show
    reserved = set(h.cluster.api("GET", "/v1/reservations")["reservations"][0]["nodes"])

    inside = h.sbatch("--reservation=bigrun", "-N3", "-t", "10:00", "--wrap", "sleep 1")
    outside = h.sbatch("-N1", "-t", "10:00", "--gres=gpu:8", "--exclusive", "--wrap", "sleep 1")
    blocked = h.sbatch("-N2", "-t", "10:00", "--wrap", "sleep 1")
    assert {a["node"] for a in h.wait_job(inside)["alloc"]} == reserved
    assert {a["node"] for a in h.wait_job(outside)["alloc"]}.isdisjoint(reserved)
    h.wait_passes()  # passes with the outside job's node free again
    assert h.job(blocked)["state"] == "PENDING"

    other = h.run(
        [
            "scontrol",
            "create",
            "reservation",
            "StartTime=now",
            "Duration=10",
            "Users=root",
            "Nodes=" + sorted(reserved)[0],
        ]
    )
    assert other.returncode == 1 and "Requested nodes are busy" in other.stderr
    denied = h.run(
        ["scontrol", "create", "reservation", "StartTime=now", "Duration=10", "Users=nobody", "NodeCnt=1"], uid=65534
    )
    assert denied.returncode == 1 and "Access/permission denied" in denied.stderr

    assert h.run(["scontrol", "delete", "ReservationName=bigrun"]).returncode == 0
    assert h.wait_job(blocked)["state"] == "COMPLETED"
    assert h.run(["scontrol", "show", "reservation"]).stdout == "No reservations in the system\n"

    # scontrol(1)'s short keys and an empty Features=; a reservation chosen by count swaps a
    # DOWN node for an idle one (REPLACE_DOWN, the default), in the controller's node checks
    spare = h.run(
        ["scontrol", "create", "reservation", "res=spare", "start=now", "dur=5", "user=root", "nodecnt=1", "Features="]
    )
    assert spare.returncode == 0, spare.stderr

    def spare_nodes() -> list[str]:
        return [r["nodes"] for r in h.cluster.api("GET", "/v1/reservations")["reservations"] if r["name"] == "spare"][0]

    (first,) = spare_nodes()
    assert h.run(["scontrol", "update", f"NodeName={first}", "State=DOWN", "Reason=test"]).returncode == 0
    try:
        (second,) = wait_for(lambda: [n for n in spare_nodes() if n != first], timeout=60, what="a replacement node")
        assert second != first
    finally:
        assert h.run(["scontrol", "update", f"NodeName={first}", "State=RESUME"]).returncode == 0
    assert h.run(["scontrol", "delete", "ReservationName=spare"]).returncode == 0
