"""``--propagate`` and PropagateResourceLimits(Except) as sbatch and srun read them: the
soft limits of the submitting process that the job carries (``slurm.jobrequest``)."""

from __future__ import annotations

import io
import resource
from pathlib import Path

import pytest

from muster.cli import sbatch
from muster.cli.common import CommandError
from muster.core.rlimits import NAMES


def _spec(argv: list[str], environ: dict[str, str] | None = None) -> dict[str, object]:
    result = sbatch.build([*argv, "--wrap", "true"], environ or {"HOME": "/h"}, "/work", io.StringIO(""), now=1.0)
    assert isinstance(result, sbatch.Submission)
    return result.spec


def _soft(name: str) -> int:
    soft = resource.getrlimit(getattr(resource, "RLIMIT_" + name))[0]
    return -1 if soft == resource.RLIM_INFINITY else soft


def test_by_default_every_soft_limit_travels() -> None:
    limits = _spec([])["rlimits"]
    assert limits == {name: _soft(name) for name in NAMES}


def test_propagate_names_the_limits_that_travel() -> None:
    assert _spec(["--propagate=NOFILE,stack"])["rlimits"] == {"NOFILE": _soft("NOFILE"), "STACK": _soft("STACK")}
    assert _spec(["--propagate"])["rlimits"] == {name: _soft(name) for name in NAMES}
    assert "rlimits" not in _spec(["--propagate=NONE"])


def test_a_bogus_name_is_refused_in_slurms_words() -> None:
    with pytest.raises(CommandError) as info:
        _spec(["--propagate=BOGUS"])
    assert (info.value.message, info.value.rc) == ("--propagate=BOGUS is not valid.", 1)


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("PropagateResourceLimitsExcept=NOFILE", set(NAMES) - {"NOFILE"}),
        ("PropagateResourceLimits=MEMLOCK,STACK", {"MEMLOCK", "STACK"}),
        ("PropagateResourceLimits=NONE", set()),
    ],
)
def test_the_configuration_chooses_unless_propagate_is_given(tmp_path: Path, line: str, names: set[str]) -> None:
    conf = tmp_path / "muster.conf"
    conf.write_text(f"ClusterName=c\n{line}\n")
    environ = {"HOME": "/h", "MUSTER_CONF": str(conf)}
    assert set(_spec([], environ).get("rlimits") or {}) == names  # type: ignore[arg-type]
    assert set(_spec(["--propagate=NOFILE"], environ)["rlimits"]) == {"NOFILE"}  # type: ignore[arg-type]
