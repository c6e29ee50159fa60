"""A job's resource limits at the controller's door (``ctld.bodies``: names and values
checked) and on the wire to its agent (``LaunchSpec.rlimits``: protocol 3 only)."""

from __future__ import annotations

import pytest

from muster.core.errors import InvalidRequest
from muster.ctld.bodies import SubmitBody
from muster.protocol import messages


def test_a_submission_carries_its_limits_into_the_job_spec() -> None:
    spec = SubmitBody.model_validate({"spec": {"rlimits": {"NOFILE": 1000, "MEMLOCK": -1}}}).spec.to_spec()
    assert spec.rlimits == {"NOFILE": 1000, "MEMLOCK": -1}
    assert spec.to_dict()["rlimits"] == {"NOFILE": 1000, "MEMLOCK": -1}
    assert SubmitBody.model_validate({"spec": {}}).spec.to_spec().rlimits is None


@pytest.mark.parametrize(
    ("limits", "words"),
    [({"BOGUS": 1}, "Bad rlimit name: BOGUS"), ({"NOFILE": -5}, "Bad rlimit value for NOFILE")],
)
def test_a_bad_limit_is_refused_naming_it(limits: dict[str, int], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        SubmitBody.model_validate({"spec": {"rlimits": limits}}).spec.to_spec()


def test_the_launch_payload_sends_limits_only_to_peers_that_read_them() -> None:
    job = messages.read(messages.LaunchJob, {"job_id": 5, "spec": {"rlimits": {"STACK": 16777216}}})
    assert messages.dump(job, 3)["spec"]["rlimits"] == {"STACK": 16777216}
    assert "rlimits" not in messages.dump(job, 2)["spec"]  # muster 0.2.0 refuses unknown fields
    plain = messages.read(messages.LaunchJob, {"job_id": 5})
    assert messages.dump(plain, 3)["spec"].get("rlimits") is None  # none: the reader sets nothing
