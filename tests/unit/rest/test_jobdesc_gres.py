"""A REST job's tres_per_node/tres_per_job/tres_per_task are read by core.resources' GRES
parser, the one --gres uses."""

from __future__ import annotations

import pytest

from muster.rest.jobdesc import JobDescError, job_request

SCRIPT = "#!/bin/sh\ntrue\n"


def _req(**job: object) -> dict[str, object]:
    spec, _ = job_request({"script": SCRIPT, "current_working_directory": "/tmp", **job}, None, "root")
    return spec


@pytest.mark.parametrize("text", ["gres/gpu:a100:2", "gres:gpu:a100:2", "gpu:a100:2"])
def test_tres_per_node_in_every_spelling(text: str) -> None:
    spec = _req(tres_per_node=text)
    assert spec["gpus_per_node"] == 2 and spec["gpu_type"] == "a100"


def test_tres_per_job_and_per_task_are_counts_not_types() -> None:
    # "gres/gpu:4" once reached --gpus as "gpu:4": a GPU type named "gpu"
    spec = _req(tres_per_job="gres/gpu:4")
    assert spec["gpus"] == 4 and "gpu_type" not in spec
    spec = _req(tres_per_job="gres/gpu:h100:8")
    assert spec["gpus"] == 8 and spec["gpu_type"] == "h100"
    spec = _req(tasks=2, tres_per_task="gres/gpu:1")
    assert spec["gpus_per_task"] == 1 and "gpu_type" not in spec


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ({"tres_per_node": "gres/gpu:x:y:z"}, r"tres_per_node: Invalid generic resource \(gres\) specification"),
        ({"tres_per_node": "gres/fpga:1"}, "only gres/gpu"),
        ({"tres_per_job": "gres/gpu:a100:1,gres/gpu:v100:1"}, "one GPU type per job"),
        ({"tres_per_task": 3}, "expected a string"),
    ],
)
def test_bad_tres_are_named(job: dict[str, object], words: str) -> None:
    with pytest.raises(JobDescError, match=words):
        _req(**job)
