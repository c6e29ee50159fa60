from __future__ import annotations

import pytest

from muster.core.events import EventKind, ended_kind
from muster.core.states import JobState


def test_a_kind_is_stored_as_the_same_text_as_before_the_enum() -> None:
    assert EventKind.SUBMIT == "submit" and EventKind.LAUNCH_FAILED == "launch_failed"
    assert f"{EventKind.HOLD_NODES}" == "hold_nodes"


@pytest.mark.parametrize(
    "state",
    [JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.CANCELLED],
)
def test_an_ended_batch_script_is_recorded_under_its_final_state(state: JobState) -> None:
    assert ended_kind(state) == str(state).lower()


def test_a_state_no_end_records_is_refused() -> None:
    with pytest.raises(ValueError, match="running"):
        ended_kind(JobState.RUNNING)
