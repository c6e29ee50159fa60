"""Policies are slurm.conf settings read by the controller's own SchedConfig.from_settings."""

from __future__ import annotations

import pytest

from muster.sim.policies import (
    build_settings,
    job_order,
    merge_parameters,
    sched_config,
    sjf_priority,
)


def test_fcfs_is_the_builtin_scheduler_in_submission_order() -> None:
    cfg = sched_config(build_settings("fcfs"))
    assert not cfg.backfill and not cfg.multifactor


def test_easy_plans_only_the_first_blocked_job() -> None:
    cfg = sched_config(build_settings("easy"))
    assert cfg.backfill and not cfg.conservative and cfg.bf_max_job_test == 1
    assert not cfg.multifactor


def test_conservative_plans_every_blocked_job() -> None:
    cfg = sched_config(build_settings("conservative"))
    assert cfg.backfill and cfg.conservative


def test_the_backfill_window_covers_the_longest_time_limit() -> None:
    assert sched_config(build_settings("easy", max_time_limit=216_000)).bf_window == 3600 * 60
    assert sched_config(build_settings("easy", max_time_limit=600)).bf_window == 86400


def test_a_conf_file_is_kept_and_the_policy_replaces_only_its_own_keys() -> None:
    conf = {"SchedulerParameters": "bf_window=120,conservative,bf_resolution=30", "PriorityWeightAge": "5"}
    settings = build_settings("easy", conf, max_time_limit=10**6)
    cfg = sched_config(settings)
    assert cfg.bf_window == 120 * 60 and cfg.bf_resolution == 30  # the file's window is kept
    assert not cfg.conservative and cfg.bf_max_job_test == 1
    assert settings["PriorityWeightAge"] == "5"
    assert sched_config(build_settings(None, conf)).conservative  # no policy: the file as is


def test_knobs_override_and_weights_switch_to_multifactor() -> None:
    settings = build_settings("easy", knobs={"PriorityWeightJobSize": "100"}, bf_max_job_test=50)
    cfg = sched_config(settings)
    assert cfg.multifactor and cfg.weight_job_size == 100 and cfg.bf_max_job_test == 50


def test_scheduler_parameters_merge_item_by_item() -> None:
    assert merge_parameters("a=1,b,c=3", {"b": None, "c": "4", "d": "5"}, ("a",)) == "b,c=4,d=5"
    assert merge_parameters("(null)", {"x": None}) == "x"


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy 'lottery'"):
        build_settings("lottery")


def test_sjf_is_easy_with_priorities_by_time_limit() -> None:
    assert build_settings("sjf") == build_settings("easy")
    assert job_order("sjf") == "sjf" and job_order("easy") == "fifo"
    assert sjf_priority(60) > sjf_priority(3600) > 0
    assert sjf_priority(10**12) == 1  # never 0, which would hold the job
