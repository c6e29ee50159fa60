"""GPU detection: nvidia-smi's CSV parsed tolerantly, emulation when the hardware is silent."""

from __future__ import annotations

import pytest

from muster.agent.gpus import GpuInfo, detect, parse_nvidia_smi, type_from_name

# `nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader` on real hosts.
H100_X4 = """\
0, NVIDIA H100 80GB HBM3, GPU-5f5a1e2b-8c3d-4e6f-9a0b-1c2d3e4f5a6b, 81559 MiB
1, NVIDIA H100 80GB HBM3, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 81559 MiB
2, NVIDIA H100 80GB HBM3, GPU-11111111-2222-3333-4444-555555555555, 81559 MiB
3, NVIDIA H100 80GB HBM3, GPU-66666666-7777-8888-9999-000000000000, 81559 MiB
"""
H200_X1 = "0, NVIDIA H200, GPU-9d8c7b6a-5f4e-3d2c-1b0a-f9e8d7c6b5a4, 143771 MiB\n"
A100_ODD = (
    "\n"
    "WARNING: infoROM is corrupted at gpu 0000:07:00.0\n"
    "1, NVIDIA A100-SXM4-80GB, GPU-bbbbbbbb-0000-0000-0000-000000000001, 81920 MiB\r\n"
    "0, NVIDIA A100-SXM4-80GB, GPU-bbbbbbbb-0000-0000-0000-000000000000, [N/A]\r\n"
)
DRIVER_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def test_a_four_gpu_host_parses_in_index_order() -> None:
    gpus = parse_nvidia_smi(H100_X4)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0] == GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-5f5a1e2b-8c3d-4e6f-9a0b-1c2d3e4f5a6b", 81559)


def test_warnings_blank_lines_crlf_and_missing_memory_are_tolerated() -> None:
    gpus = parse_nvidia_smi(A100_ODD)
    assert [(g.index, g.memory_mb) for g in gpus] == [(0, None), (1, 81920)]
    assert gpus[1].name == "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize("text", ["", DRIVER_DOWN, "No devices were found\n"])
def test_no_gpu_lines_means_no_gpus(text: str) -> None:
    assert parse_nvidia_smi(text) == []


def test_a_name_with_a_comma_survives() -> None:
    (gpu,) = parse_nvidia_smi("0, Odd, Name, GPU-x, 1024 MiB\n")
    assert (gpu.name, gpu.uuid, gpu.memory_mb) == ("Odd, Name", "GPU-x", 1024)


@pytest.mark.parametrize(
    ("name", "gres_type"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA H200", "h200"),
    ],
)
def test_gres_types_come_from_the_marketing_name(name: str, gres_type: str) -> None:
    assert type_from_name(name) == gres_type


def _no_nvml() -> list[GpuInfo]:
    return []


def test_detected_gpus_are_used_when_they_cover_the_configuration() -> None:
    inv = detect(4, None, runner=lambda argv: H100_X4, nvml=_no_nvml)
    assert (inv.source, inv.count, inv.gpu_type) == ("nvidia-smi", 4, "h100")


def test_the_configured_type_wins_over_the_detected_name() -> None:
    assert detect(2, "hopper", runner=lambda argv: H100_X4, nvml=_no_nvml).gpu_type == "hopper"


def test_more_detected_than_configured_uses_the_configured_count() -> None:
    inv = detect(2, None, runner=lambda argv: H100_X4, nvml=_no_nvml)
    assert [g.index for g in inv.gpus] == [0, 1]


def test_fewer_detected_than_configured_emulates_the_configuration_in_auto_mode() -> None:
    inv = detect(8, "h200", runner=lambda argv: H200_X1, nvml=_no_nvml)
    assert (inv.source, inv.count, inv.gpu_type) == ("emulated", 8, "h200")


def test_nvidia_mode_registers_exactly_what_was_found() -> None:
    inv = detect(8, None, mode="nvidia", runner=lambda argv: H200_X1, nvml=_no_nvml)
    assert (inv.source, inv.count, inv.gpu_type) == ("nvidia-smi", 1, "h200")


def test_a_failing_nvidia_smi_falls_back_to_nvml_then_emulation() -> None:
    def broken(argv: list[str]) -> str:
        raise RuntimeError("exit 9: driver not loaded")

    nvml = [GpuInfo(0, "NVIDIA A100-SXM4-80GB", "GPU-a", 81920), GpuInfo(1, "NVIDIA A100-SXM4-80GB", "GPU-b", 81920)]
    assert detect(2, None, runner=broken, nvml=lambda: nvml).source == "nvml"
    inv = detect(2, "a100", runner=broken, nvml=_no_nvml)
    assert (inv.source, [g.index for g in inv.gpus]) == ("emulated", [0, 1])


def test_emulation_never_asks_the_hardware() -> None:
    def forbidden(argv: list[str]) -> str:
        raise AssertionError("nvidia-smi must not run")

    assert detect(8, None, mode="emulate", runner=forbidden, nvml=forbidden).count == 8  # type: ignore[arg-type]
    assert detect(0, None, runner=forbidden, nvml=forbidden).count == 0  # type: ignore[arg-type]


def test_the_nvidia_smi_command_line_is_the_documented_query() -> None:
    seen: list[list[str]] = []
    detect(1, None, runner=lambda argv: seen.append(argv) or H200_X1, nvml=_no_nvml)
    assert seen == [["nvidia-smi", "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader"]]


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown GPU detection mode"):
        detect(1, None, mode="magic")
