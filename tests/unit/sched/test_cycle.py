"""The scheduling pass, told as small stories on a SchedHarness."""

from __future__ import annotations

from muster.core.states import Reason
from muster.sched import SchedConfig, schedule
from muster.sched.testing import SchedHarness, job


def test_a_job_that_fits_an_idle_cluster_starts_in_the_first_pass() -> None:
    h = SchedHarness().gpu_nodes(2, gpus=8)
    j = h.submit(job().gpus(4).time("10:00"))
    d = h.schedule(at=0)
    assert h.started(d) == [j]
    (start,) = d.starts
    assert start.partition == "main"
    assert len(start.alloc[0].gpu_ids) == 4


def test_held_jobs_wait_with_the_holder_as_reason() -> None:
    h = SchedHarness().gpu_nodes(1)
    u = h.submit(job().held("user"))
    a = h.submit(job().held("admin"))
    d = h.schedule(at=0)
    assert d.starts == []
    assert d.reasons[u] is Reason.HELD_USER
    assert d.reasons[a] is Reason.HELD_ADMIN


def test_a_job_with_a_future_begin_time_waits_for_it() -> None:
    h = SchedHarness().gpu_nodes(1)
    j = h.submit(job().begin(100))
    assert h.schedule(at=0).reasons[j] is Reason.BEGIN_TIME
    assert h.started(h.schedule(at=100)) == [j]


def test_the_first_blocked_job_waits_for_resources_and_those_behind_it_for_priority() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    h.run_job(job().gpus(8).time("1:00:00"))
    b = h.submit(job().gpus(8).time("1:00:00"), at=1)
    c = h.submit(job().gpus(8).time("1:00:00"), at=2)
    d = h.schedule(at=3)
    assert d.reasons[b] is Reason.RESOURCES
    assert d.reasons[c] is Reason.PRIORITY


def test_gpus_are_never_given_twice_in_one_pass() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    ids = [h.submit(job().gpus(3), at=i) for i in range(3)]
    d = h.schedule(at=10)
    assert h.started(d) == ids[:2]
    given = [g for s in d.starts for a in s.alloc for g in a.gpu_ids]
    assert sorted(given) == sorted(set(given))


def test_a_gpu_type_request_only_lands_on_that_type() -> None:
    h = SchedHarness().gpu_nodes(1, gpu_type="v100").gpu_nodes(1, gpu_type="a100")
    j = h.submit(job().gpus("a100", 2))
    d = h.schedule(at=0)
    assert [s.alloc[0].node for s in d.starts if s.job_id == j] == ["gpu2"]


def test_exclusive_jobs_take_whole_idle_nodes() -> None:
    h = SchedHarness().gpu_nodes(2, gpus=8)
    h.run_job(job().gpus(1))
    j = h.submit(job().exclusive(), at=1)
    d = h.schedule(at=2)
    (start,) = d.starts
    assert start.job_id == j
    alloc = start.alloc[0]
    assert alloc.node == "gpu2"
    assert (alloc.cpus, len(alloc.gpu_ids)) == (64, 8)


def test_nodelist_and_exclude_steer_placement() -> None:
    h = SchedHarness().gpu_nodes(3)
    w = h.submit(job().nodelist("gpu3"))
    x = h.submit(job().nodes(2).exclude("gpu3"))
    d = h.schedule(at=0)
    placed = {s.job_id: sorted(a.node for a in s.alloc) for s in d.starts}
    assert placed[w] == ["gpu3"]
    assert placed[x] == ["gpu1", "gpu2"]


def test_schedule_is_exported_with_its_config() -> None:
    h = SchedHarness().gpu_nodes(1)
    h.submit(job())
    d = schedule(h.snapshot(), 0.0, SchedConfig())
    assert d.stats.pending_seen == 1 and d.stats.started == 1


def test_config_reads_slurm_conf_keys() -> None:
    c = SchedConfig.from_settings(
        {
            "SchedulerType": "sched/builtin",
            "SchedulerParameters": "bf_continue,bf_window=120,bf_resolution=30,bf_max_job_test=50,conservative",
            "PriorityType": "priority/basic",
            "PriorityWeightAge": "10",
            "PriorityWeightFairShare": "20",
            "PriorityWeightJobSize": "30",
            "PriorityWeightPartition": "40",
            "PriorityWeightQOS": "50",
            "PriorityMaxAge": "14-0",
            "PriorityFavorSmall": "YES",
        }
    )
    assert c.scheduler_type == "sched/builtin" and not c.backfill
    assert (c.bf_continue, c.bf_window, c.bf_resolution, c.bf_max_job_test) == (
        True,
        7200,
        30,
        50,
    )
    assert c.conservative
    assert c.priority_type == "priority/basic"
    assert (c.weight_age, c.weight_fairshare, c.weight_job_size) == (10, 20, 30)
    assert (c.weight_partition, c.weight_qos) == (40, 50)
    assert c.max_age == 14 * 86400 and c.favor_small


def test_config_keeps_defaults_for_unknown_or_unreadable_values() -> None:
    c = SchedConfig.from_settings(
        {
            "PriorityWeightAge": "lots",
            "SchedulerType": "sched/wiki",
            "Foo": "1",
            "PriorityMaxAge": "x",
        }
    )
    assert c == SchedConfig()


def test_a_job_without_a_partition_runs_in_the_default_one() -> None:
    h = SchedHarness().gpu_nodes(1)
    j = h.submit(job())
    h.pending[j].partition = ""
    assert h.schedule(at=0).starts[0].partition == "main"
    k = h.submit(job())
    h.pending[k].partition = ""
    h.partition("main", is_default=False)
    d = h.schedule(at=1)
    assert d.reasons[k] is Reason.BAD_CONSTRAINTS and k in d.never


def test_phases_are_timed_with_the_callers_timer() -> None:
    h = SchedHarness().gpu_nodes(1)
    h.submit(job())
    ticks = iter(range(100))
    d = schedule(h.snapshot(), 0.0, SchedConfig(), timer=lambda: float(next(ticks)))
    assert list(d.stats.phase_seconds) == [
        "1.profile",
        "2.eligibility",
        "3.priority",
        "4.placement",
    ]
    assert all(v == 1.0 for v in d.stats.phase_seconds.values())


def test_config_keys_are_case_insensitive_and_bf_conservative_is_accepted() -> None:
    c = SchedConfig.from_settings(
        {
            "schedulerparameters": "bf_conservative,bf_window=1440",
            "EnforcePartLimits": "YES",
            "PriorityMaxAge": "1:00:00",
        }
    )
    assert c.conservative and c.bf_window == 86400
    assert c.enforce_part_limits == "ALL"
    assert c.max_age == 3600


def test_pass_stats_count_what_the_pass_did() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    h.run_job(job().gpus(8).time("10:00"))
    h.submit(job().gpus(8).time("10:00"), at=1)
    h.submit(job().held(), at=2)
    h.submit(job().gpus(1).time("5:00"), at=3)
    s = h.schedule(at=4).stats
    assert (s.pending_seen, s.ineligible, s.examined) == (3, 1, 2)
    assert (s.started, s.blocked, s.planned, s.backfilled) == (0, 2, 2, 0)
