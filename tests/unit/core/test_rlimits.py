"""core.rlimits: Slurm's limit names, which limits propagate, the checks of a job's limits;
and the configuration's PropagateResourceLimits(Except) read with Slurm's rules."""

from __future__ import annotations

import pytest

from muster.core.config import ConfigError, parse_config
from muster.core.rlimits import NAMES, RlimitError, check, parse_names, propagated


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("ALL", set(NAMES)),
        ("all", set(NAMES)),
        ("NONE", set()),
        ("NOFILE", {"NOFILE"}),
        ("nofile,Stack", {"NOFILE", "STACK"}),
        ("RLIMIT_MEMLOCK NOFILE", {"MEMLOCK", "NOFILE"}),
        ("AS,CORE,CPU,DATA,FSIZE,MEMLOCK,NOFILE,NPROC,RSS,STACK", set(NAMES)),
    ],
)
def test_names_are_read_as_slurm_reads_them(text: str, names: set[str]) -> None:
    assert parse_names(text) == names


def test_an_unknown_name_is_slurms_bad_rlimit_name() -> None:
    with pytest.raises(RlimitError, match="^Bad rlimit name: BOGUS$"):
        parse_names("NOFILE,BOGUS")


@pytest.mark.parametrize(
    ("only", "excluded", "option", "names"),
    [
        (None, None, None, set(NAMES)),  # Slurm's default: ALL
        ("NOFILE,STACK", None, None, {"NOFILE", "STACK"}),
        (None, "NOFILE", None, set(NAMES) - {"NOFILE"}),
        ("NONE", None, None, set()),
        (None, "NOFILE", "NOFILE", {"NOFILE"}),  # --propagate overrides the configuration
        ("NONE", None, "", set(NAMES)),  # a bare --propagate is ALL
        (None, None, "NONE", set()),
    ],
)
def test_which_limits_propagate(only: str | None, excluded: str | None, option: str | None, names: set[str]) -> None:
    assert propagated(only, excluded, option) == names


def test_a_jobs_limits_are_checked() -> None:
    assert check({"nofile": 1000, "MEMLOCK": -1}) == {"NOFILE": 1000, "MEMLOCK": -1}
    with pytest.raises(RlimitError, match="Bad rlimit name: BOGUS"):
        check({"BOGUS": 1})
    for bad in (-2, 2**63, "1000", True, 1.5):
        with pytest.raises(RlimitError, match="Bad rlimit value for NOFILE"):
            check({"NOFILE": bad})
    with pytest.raises(RlimitError):
        check(["NOFILE"])


def test_the_configuration_checks_its_propagation_keys() -> None:
    cfg = parse_config("PropagateResourceLimitsExcept=NOFILE,MEMLOCK\n")
    assert cfg.get("PropagateResourceLimitsExcept") == "NOFILE,MEMLOCK"
    with pytest.raises(ConfigError, match=r"bad PropagateResourceLimits 'NOFILE,BOGUS': Bad rlimit name: BOGUS"):
        parse_config("PropagateResourceLimits=NOFILE,BOGUS\n")
    with pytest.raises(ConfigError, match="cannot both be set"):
        parse_config("PropagateResourceLimits=NOFILE\nPropagateResourceLimitsExcept=STACK\n")


def test_jobs_with_equal_limits_share_one_dict() -> None:
    from muster.core.job import JobSpec

    a = JobSpec.from_dict({"rlimits": {"NOFILE": 1000, "STACK": 16777216}})
    b = JobSpec.from_dict({"rlimits": {"STACK": 16777216, "NOFILE": 1000}})
    c = JobSpec.from_dict({"rlimits": {"NOFILE": 1001}})
    assert a.rlimits is b.rlimits and a.rlimits is not c.rlimits
    assert a.to_dict()["rlimits"] == {"NOFILE": 1000, "STACK": 16777216}
    assert a.to_dict()["rlimits"] is not a.rlimits  # what leaves is a copy
    assert JobSpec().rlimits is None
