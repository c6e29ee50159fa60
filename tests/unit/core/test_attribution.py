"""The failure ledger's rules (``core.attribution``): whose fault, and when a node is quarantined."""

from __future__ import annotations

from muster.core.attribution import (
    JOB,
    NODE,
    UNKNOWN,
    Failure,
    attribute,
    in_collective,
    off_collective,
    quarantine_due,
)

DAY = 86400.0


def test_the_same_job_failing_the_same_way_on_different_nodes_is_the_jobs_fault() -> None:
    fs = [Failure(100.0 + i, f"node{i}", "prolog", job_id=7, user="alice") for i in range(1, 4)]
    assert [attribute(f, fs, DAY) for f in fs] == [JOB, JOB, JOB]
    assert all(quarantine_due(f"node{i}", fs, 200.0, 1, DAY) == [] for i in range(1, 4))


def test_a_node_failing_for_different_jobs_is_the_nodes_fault() -> None:
    fs = [Failure(100.0, "node1", "launch", job_id=7), Failure(200.0, "node1", "launch", job_id=8)]
    assert [attribute(f, fs, DAY) for f in fs] == [NODE, NODE]
    assert quarantine_due("node1", fs, 300.0, 2, DAY) == fs


def test_a_first_failure_alone_is_unknown_and_node_evidence_is_the_nodes() -> None:
    one = Failure(100.0, "node1", "node_fail", job_id=7)
    assert attribute(one, [one], DAY) == UNKNOWN
    for kind in ("gpu", "health", "preflight", "epilog"):
        f = Failure(100.0, "node1", kind, evidence="x")
        assert attribute(f, [f], DAY) == NODE


def test_node_evidence_never_follows_a_job() -> None:
    fs = [Failure(100.0, f"node{i}", "gpu", job_id=7) for i in (1, 2)]
    assert [attribute(f, fs, DAY) for f in fs] == [NODE, NODE]


def test_a_different_kind_on_another_node_does_not_clear_the_node() -> None:
    fs = [Failure(100.0, "node1", "launch", job_id=7), Failure(110.0, "node2", "prolog", job_id=7)]
    assert [attribute(f, fs, DAY) for f in fs] == [UNKNOWN, UNKNOWN]


def test_hangs_count_by_user() -> None:
    one_user = [Failure(100.0 + i, "node1", "hang", job_id=i, user="alice") for i in range(3)]
    assert quarantine_due("node1", one_user, 200.0, 2, DAY) == []
    two = [*one_user, Failure(150.0, "node1", "hang", job_id=9, user="bob")]
    assert len(quarantine_due("node1", two, 200.0, 2, DAY)) == 4
    moving = [
        Failure(100.0, "node1", "hang", job_id=1, user="alice"),
        Failure(200.0, "node2", "hang", job_id=1, user="alice"),
    ]
    assert [attribute(f, moving, DAY) for f in moving] == [JOB, JOB]


def test_a_job_that_followed_its_nodes_is_no_evidence_against_another_node() -> None:
    storm = [Failure(100.0 + i, f"node{i}", "launch", job_id=7) for i in range(1, 4)]
    other = Failure(200.0, "node1", "launch", job_id=8)
    assert attribute(other, [*storm, other], DAY) == UNKNOWN
    assert quarantine_due("node1", [*storm, other], 300.0, 2, DAY) == []


def test_the_window_the_threshold_and_the_resume() -> None:
    fs = [Failure(0.0, "node1", "node_fail", job_id=1), Failure(10.0, "node1", "node_fail", job_id=2)]
    assert quarantine_due("node1", fs, 20.0, 2, DAY)
    assert quarantine_due("node1", fs, 20.0, 3, DAY) == []
    assert quarantine_due("node1", fs, DAY + 5.0, 2, DAY) == []  # the first has left the window
    assert quarantine_due("node1", fs, 20.0, 2, DAY, since=5.0) == []  # resumed after the first
    assert quarantine_due("node1", fs, 20.0, 0, DAY) == []  # 0: never
    resumed = [*fs, Failure(15.0, "node1", "resume"), Failure(16.0, "node1", "replacement", job_id=3)]
    assert len(quarantine_due("node1", resumed, 20.0, 2, DAY)) == 2  # neither is a fault


def test_the_stalled_ranks_of_one_hung_run_on_two_nodes_are_not_the_jobs_fault() -> None:
    one_run = [
        Failure(100.0, "node1", "hang", job_id=4, user="alice"),
        Failure(100.0, "node2", "hang", job_id=4, user="alice"),
    ]
    assert [attribute(f, one_run, DAY) for f in one_run] == [UNKNOWN, UNKNOWN]


def test_a_big_job_losing_different_nodes_blames_no_job() -> None:
    lost = [Failure(100.0, "node1", "node_fail", job_id=4), Failure(900.0, "node2", "node_fail", job_id=4)]
    assert [attribute(f, lost, DAY) for f in lost] == [UNKNOWN, UNKNOWN]  # a node that stops answering


def test_a_hang_that_singles_a_node_out_is_the_nodes() -> None:
    hangs = [
        Failure(100.0, "node1", "hang", job_id=4, user="alice", behind=True),
        Failure(900.0, "node2", "hang", job_id=4, user="alice", behind=True),
    ]
    assert [attribute(f, hangs, DAY) for f in hangs] == [NODE, NODE]
    assert quarantine_due("node1", hangs, 1000.0, 1, DAY)  # one user's hangs count once: 1 >= 1
    assert quarantine_due("node1", hangs, 1000.0, 2, DAY) == []


def test_a_stack_inside_a_torch_distributed_collective_is_recognised_in_both_dump_formats() -> None:

    faulthandler = (
        "Thread 0x01 (most recent call first):\n"
        '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce\n'
        '  File "/w/train.py", line 40 in main\n'
    )
    py_spy = 'Thread 12 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2806)\n    main (train.py:40)\n'
    assert in_collective(faulthandler) and in_collective(py_spy)
    assert in_collective('  File "/w/mpi.py", line 3 in Allreduce\n')
    ddp = (  # DistributedDataParallel waits for the gradients' all-reduce at the end of backward
        '  File "/v/site-packages/torch/autograd/graph.py", line 829 in _engine_run_backward\n'
        '  File "/v/site-packages/torch/autograd/__init__.py", line 364 in backward\n'
        '  File "/w/train.py", line 40 in main\n'
    )
    assert in_collective(ddp)
    assert in_collective('  File "/v/site-packages/torch/nn/parallel/distributed.py", line 9 in forward\n')
    assert not in_collective('Thread 0x01 (most recent call first):\n  File "/w/train.py", line 37 in main\n')
    assert not in_collective("")


def test_the_nodes_whose_ranks_are_outside_the_collective_the_others_wait_in_are_singled_out() -> None:

    assert off_collective({"n1": [1, 0], "n2": [0, 1], "n3": [1, 0]}) == ["n2"]
    assert off_collective({"n1": [1, 1], "n2": [2, 0]}) == ["n1"]  # one of n1's two ranks stayed out
    assert off_collective({"n1": [0, 1], "n2": [0, 1]}) == []  # nobody inside: a hang of another kind
    assert off_collective({"n1": [1, 0], "n2": [1, 0]}) == []  # all inside: none singled out
    assert off_collective({"n1": [1, 1], "n2": [1, 1]}) == []  # everyone has a rank outside
    assert off_collective({}) == []
