"""EnforcePartLimits has one reader (sched.config.part_limits_mode), used by the scheduler's
config, the controller's submit check and muster sim alike."""

from __future__ import annotations

import pytest

from muster.sched.config import SchedConfig, part_limits_mode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        (None, "NO"),
        ("", "NO"),
        ("NO", "NO"),
        ("no", "NO"),
        ("ANY", "ANY"),
        ("any", "ANY"),
        ("ALL", "ALL"),
        (" all ", "ALL"),
        ("YES", "ALL"),  # Slurm's older spelling of ALL
        ("Yes", "ALL"),
        # an unreadable value is Slurm's default, NO: before, the controller upper-cased it and
        # enforced anything but "NO" while the scheduler's config read NO
        ("sometimes", "NO"),
    ],
)
def test_the_modes(text: str | None, mode: str) -> None:
    assert part_limits_mode(text) == mode
    assert SchedConfig.from_settings({} if text is None else {"EnforcePartLimits": text}).enforce_part_limits == mode
