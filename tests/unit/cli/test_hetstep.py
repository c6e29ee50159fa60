"""srun's het steps, planned: which component each part runs on, with which options and
how many tasks; ordinary sruns are left alone."""

from __future__ import annotations

import pytest

from muster.cli import hetstep, srun
from muster.cli.common import CommandError

HET_ENV = {
    "SLURM_JOB_ID": "40",
    "SLURM_HET_SIZE": "2",
    "SLURM_JOB_ID_HET_GROUP_0": "40",
    "SLURM_JOB_ID_HET_GROUP_1": "41",
    "SLURM_JOB_NUM_NODES_HET_GROUP_0": "1",
    "SLURM_JOB_NUM_NODES_HET_GROUP_1": "2",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]",
    "SLURM_JOB_NODELIST": "n1",
    "SLURM_NNODES": "1",
    "SLURM_NTASKS": "1",
}


def plan(argv: list[str], env: dict[str, str] | None = None) -> list[hetstep.Part] | None:
    return hetstep.plan(argv, HET_ENV if env is None else env, srun.table())


def test_an_ordinary_srun_is_no_het_step() -> None:
    assert plan(["-n", "2", "hostname"]) is None


def test_het_group_list_runs_the_command_on_each_component_with_its_task_count() -> None:
    parts = plan(["--het-group=0,1", "-l", "hostname"])
    assert parts is not None
    assert [(p.group, p.argv, p.ntasks) for p in parts] == [(0, ["-l", "hostname"], 1), (1, ["-l", "hostname"], 2)]
    assert [p.group for p in plan(["--het-group", "0-1", "true"]) or []] == [0, 1]


def test_mpmd_parts_run_on_their_components_carrying_propagated_options() -> None:
    parts = plan(["-l", "-n1", "echo", "a", ":", "-n", "3", "echo", "b"])
    assert parts is not None
    assert [(p.group, p.argv, p.ntasks) for p in parts] == [
        (0, ["-l", "-n1", "echo", "a"], 1),
        (1, ["--label", "-n", "3", "echo", "b"], 3),  # -l carries over, -n does not
    ]


def test_a_part_without_a_command_runs_the_next_ones() -> None:
    parts = plan(["--het-group=0", ":", "--het-group=1", "hostname"])
    assert parts is not None and [p.argv for p in parts] == [["hostname"], ["hostname"]]


def test_the_child_sees_its_component_under_the_plain_names_and_where_its_ranks_start() -> None:
    parts = plan(["--het-group=0,1", "true"])
    assert parts is not None
    env = hetstep.child_environment(HET_ENV, parts[1], 1, 3, 2)
    assert env["SLURM_JOB_ID"] == "41" and env["SLURM_JOBID"] == "41"
    assert env["SLURM_JOB_NODELIST"] == "n[2-3]" and env["SLURM_NNODES"] == "2"
    assert "SLURM_NTASKS" not in env  # component 1 said nothing of its tasks
    assert env[hetstep.HET_STEP_VAR] == "1:3:2:1"
    run = srun.build(["true"], env, "/tmp")
    assert isinstance(run, srun.Run)
    assert run.job_id == 41 and run.het == {"first": 1, "total": 3, "size": 2, "group": 1}
    assert hetstep.HET_STEP_VAR not in run.env


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--het-group=2", "true"], HET_ENV, "het group value of 2, but the job allocation has maximum value of 1"),
        (["--het-group=x", "true"], HET_ENV, "Invalid hetjob group specification: x"),
        (["-n1", "a", ":", "-n1", "b"], {"SLURM_JOB_ID": "5"}, "needs a heterogeneous job allocation"),
        (["--het-group=0", ":", "--het-group=1"], HET_ENV, "No command given to execute."),
    ],
)
def test_bad_het_steps_are_refused_with_a_clear_message(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        plan(argv, env)


def test_outside_any_allocation_parts_ask_for_a_het_allocation_first() -> None:
    with pytest.raises(hetstep.NeedsAllocation):
        plan(["-n1", "a", ":", "-n1", "b"], {})
