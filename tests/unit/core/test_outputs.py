"""Slurm's output filename patterns, resolved without touching a file."""

from __future__ import annotations

import pytest

from muster.core.outputs import (
    NO_ARRAY_TASK,
    PatternFields,
    expand_pattern,
    fields_for_task,
    output_paths,
)

FIELDS = PatternFields(job_id=42, job_name="train", user="alice", node="node3.cluster", node_index=0)
ARRAY = PatternFields(job_id=57, job_name="sweep", user="bob", node="gpu1", array_job_id=50, array_task_id=7)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("slurm-%j.out", "slurm-42.out"),
        ("%x-%j.log", "train-42.log"),
        ("%u/%N/%n", "alice/node3/0"),
        ("%5j.out", "00042.out"),
        ("%1j", "42"),
        ("%J", "42"),
        ("%s-%t", "batch-0"),
        ("100%%-%j", "100%-42"),
        ("%A", "42"),
        ("%a", str(NO_ARRAY_TASK)),
        ("%q stays", "%q stays"),
        ("%3x", "train"),
        ("no escapes", "no escapes"),
        ("trailing %", "trailing %"),
    ],
)
def test_a_pattern_expands_like_slurm(pattern: str, expected: str) -> None:
    assert expand_pattern(pattern, FIELDS) == expected


def test_an_array_task_names_its_master_and_index() -> None:
    assert expand_pattern("%A_%a-%3a-%b.out", ARRAY) == "50_7-007-7.out"


STEP = PatternFields(job_id=12, job_name="train", user="alice", node="node2.cluster", node_index=1, step_id=3, task=7)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("out-%j.%s.%t", "out-12.3.7"),
        ("%N-%n-%3t.log", "node2-1-007.log"),
        ("%J_%u_%x_%%", "12.3_alice_train_%"),
        ("%2s", "03"),
        ("%A-%q", "12-%q"),  # unknown escapes stay as written
        ("trailing%", "trailing%"),
    ],
)
def test_a_step_tasks_pattern_names_its_step_and_task(pattern: str, expected: str) -> None:
    assert expand_pattern(pattern, STEP) == expected


def test_an_srun_inside_an_array_task_sees_the_array_as_sbatch_does() -> None:
    """submitit's ``srun -o logs/%A_%a/%j`` inside array task 7_3 (job id 10), step 0."""
    grant = {
        "job_id": 10,
        "step_id": 0,
        "user": "alice",
        "job": {"name": "submitit", "array_job_id": 7, "array_task_id": 3},
    }
    fields = fields_for_task(grant, "node4", node_index=2, task=5)
    assert expand_pattern("%A_%a_%b/%j-%J-%s-%t-%n-%N-%x-%u", fields) == ("7_3_3/10-10.0-0-5-2-node4-submitit-alice")
    batch = PatternFields(job_id=10, job_name="submitit", user="alice", node="node4", array_job_id=7, array_task_id=3)
    assert expand_pattern("%A_%a/%j", fields) == expand_pattern("%A_%a/%j", batch) == "7_3/10"


def test_an_srun_outside_an_array_gets_its_own_job_as_master() -> None:
    fields = fields_for_task({"job_id": 10, "step_id": 2, "job": {}}, "n1", 0, 0)
    assert expand_pattern("%A.%a.%J", fields) == f"10.{NO_ARRAY_TASK}.10.2"


def test_a_backslash_turns_expansion_off() -> None:
    assert expand_pattern("lit\\eral-%j", FIELDS) == "literal-%j"


def _job(**spec: object) -> dict[str, object]:
    base = {"name": "train", "workdir": "/work/alice"}
    base.update(spec)
    return {"job_id": 42, "user": "alice", "uid": 1000, "spec": base}


def test_the_default_output_is_slurm_jobid_dot_out_in_the_workdir() -> None:
    assert output_paths(_job(), "node1") == ("/work/alice/slurm-42.out", "/work/alice/slurm-42.out")


def test_an_array_task_defaults_to_master_underscore_task() -> None:
    job = {**_job(), "array_job_id": 40, "array_task_id": 2}
    assert output_paths(job, "node1")[0] == "/work/alice/slurm-40_2.out"


def test_stderr_gets_its_own_file_only_when_asked() -> None:
    out, err = output_paths(_job(stdout="logs/%x.%j.out", stderr="/tmp/%j.err"), "node1")
    assert out == "/work/alice/logs/train.42.out"
    assert err == "/tmp/42.err"


def test_absolute_paths_ignore_the_workdir() -> None:
    assert output_paths(_job(stdout="/scratch/o-%j"), "n")[0] == "/scratch/o-42"
