"""GRES text has one reader (core.resources): what --gres, the API's gres and slurm.conf's
Gres= each relied on, pinned here."""

from __future__ import annotations

import pytest

from muster.core.resources import GRES_SPEC_ERROR, GresError, GresRequest, gpu_request, parse_gres, parse_gres_entry


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu", [GresRequest("gpu", None, 1)]),
        ("gpu:2", [GresRequest("gpu", None, 2)]),
        ("gpu:a100", [GresRequest("gpu", "a100", 1)]),
        ("gpu:a100:4", [GresRequest("gpu", "a100", 4)]),
        ("gpu:1g.5gb:2", [GresRequest("gpu", "1g.5gb", 2)]),  # a MIG slice's type
        ("gres/gpu:2", [GresRequest("gpu", None, 2)]),  # TRES spelling
        ("gres:gpu:2", [GresRequest("gpu", None, 2)]),  # older TRES spelling
        ("gpu:a100:4, nic", [GresRequest("gpu", "a100", 4), GresRequest("nic", None, 1)]),
        ("gpu:1k", [GresRequest("gpu", None, 1024)]),  # Slurm's count suffixes (x1024)
        ("nic:2M", [GresRequest("nic", None, 2 * 1024**2)]),
    ],
)
def test_requests_parse(text: str, expected: list[GresRequest]) -> None:
    assert parse_gres(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "gpu,",
        ":2",
        "2",
        "gpu:x:y:z",
        "gpu:a100:x",
        "gpu:-2",
        "gpu:1.5",  # a count that is not one: once read as a type named "1.5" by --gres
        "gpu:99999999999",
        "gpu:a100:\u00b2",
        "gpu:\u0663",  # a non-ASCII digit: int() would take it
        "gpu:2(S:0)",  # socket binding belongs to slurm.conf, not a request
    ],
)
def test_malformed_requests_are_refused_with_slurms_message(text: str) -> None:
    with pytest.raises(GresError, match=r"^Invalid generic resource \(gres\) specification$"):
        parse_gres(text)


def test_an_entry_says_whether_its_count_was_wrong() -> None:
    for bad_count in ("gpu:a100:x", "gpu:-2", "gpu:1.5", "gpu:99999999999T"):
        with pytest.raises(GresError) as e:
            parse_gres_entry(bad_count)
        assert e.value.count, bad_count
    for bad_shape in ("gpu:x:y:2", "", "2gpu:1", "gpu!:1"):
        with pytest.raises(GresError) as e:
            parse_gres_entry(bad_shape)
        assert not e.value.count, bad_shape


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:2", (2, None)),
        ("gpu:a100:4", (4, "a100")),
        ("gres/gpu:h100:8", (8, "h100")),
        ("gpu", (1, None)),
        ("none", (0, None)),  # srun/sbatch --gres=none
        ("NONE", (0, None)),
    ],
)
def test_a_jobs_gpu_request(text: str, expected: tuple[int, str | None]) -> None:
    assert gpu_request(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tpu:1", GRES_SPEC_ERROR),  # only GPUs are scheduled
        ("gpu:1,nic:1", GRES_SPEC_ERROR),
        # the API once took the larger of the two and the last type; --gres refused: refused
        ("gpu:a100:1,gpu:v100:2", f"{GRES_SPEC_ERROR}: one GPU type per job"),
        ("", GRES_SPEC_ERROR),
    ],
)
def test_a_jobs_gpu_request_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        gpu_request(text)
    assert str(e.value) == message
