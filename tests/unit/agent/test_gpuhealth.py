"""GPU health checks: the fault file, nvidia-smi's answers and NVML (a fake module)."""

from __future__ import annotations

import pathlib
from types import SimpleNamespace
from typing import Any

from muster.agent.gpuhealth import GpuFault, GpuHealth, parse_fault_file, parse_smi_health
from muster.agent.gpus import GpuInfo, GpuInventory, emulate


def inventory(source: str, n: int = 4) -> GpuInventory:
    return GpuInventory([GpuInfo(i, "NVIDIA H100") for i in range(n)], source=source)


def test_the_fault_file_names_gpus_and_causes_in_drain_reason_words() -> None:
    text = "# made to fail by a test\n3 xid 79\n1 ecc\n\n2 remap\n0 lost\nbad line\n"
    assert [f.reason for f in parse_fault_file(text)] == [
        "GPU 0: fallen off the bus",
        "GPU 1: uncorrected ECC errors",
        "GPU 2: row remapping failed",
        "GPU 3: XID 79 (fallen off the bus)",
    ]


def test_emulated_gpus_fail_by_the_file_and_recover_when_it_goes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gpu-faults"
    health = GpuHealth(emulate(4, "h100"), str(path))
    assert health.check() == []
    path.write_text("3 xid 79\n9 xid 79\n")  # GPU 9 is not this node's: ignored
    assert health.check() == [GpuFault(3, "XID 79 (fallen off the bus)")]
    path.unlink()
    assert health.check() == []


def test_nvidia_smi_answers_become_faults() -> None:
    text = "0, 0, No\n1, 12, No\n2, 0, Yes\nUnable to determine the device handle for GPU 0000:3B:00.0: GPU is lost\n"
    faults = parse_smi_health(text, [0, 1, 2, 3])
    assert [f.reason for f in faults] == [
        "GPU 1: uncorrected ECC errors (12)",
        "GPU 2: row remapping failed",
        "GPU 3: missing (not detected)",
    ]
    assert parse_smi_health("0, [N/A], [N/A]\n", [0]) == []


def test_a_driver_that_does_not_answer_fails_every_gpu(tmp_path: pathlib.Path) -> None:
    def runner(argv: list[str]) -> str:
        return "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"

    health = GpuHealth(inventory("nvidia-smi", 2), str(tmp_path / "none"), runner=runner)
    assert [f.index for f in health.check()] == [0, 1]


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNVML:
    """Enough of pynvml for the checks: 4 GPUs, GPU 2 lost, GPU 1 with ECC errors, one
    queued XID 79 on GPU 0 and one application XID 13 on GPU 3."""

    NVML_ERROR_GPU_IS_LOST = 15
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, count: int = 4) -> None:
        self.count = count
        self.events = [SimpleNamespace(eventData=79, device=0), SimpleNamespace(eventData=13, device=3)]
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == 2:
            raise NVMLError(15)
        return i

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return 5 if h == 1 else 0

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        if h == 3:
            raise NVMLError(3)  # not supported on this GPU
        return (0, 0, 0, 0)

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, events: Any) -> None:
        if h == 2:
            raise NVMLError(15)

    def nvmlEventSetWait(self, events: Any, timeout: int) -> Any:
        if not self.events:
            raise NVMLError(10)  # NVML_ERROR_TIMEOUT
        return self.events.pop(0)


def test_nvml_finds_lost_gpus_ecc_errors_and_critical_xids(tmp_path: pathlib.Path) -> None:
    fake = FakeNVML()
    health = GpuHealth(inventory("nvml"), str(tmp_path / "none"), nvml=fake)
    assert [f.reason for f in health.check()] == [
        "GPU 0: XID 79 (fallen off the bus)",
        "GPU 1: uncorrected ECC errors (5)",
        "GPU 2: XID 79 (fallen off the bus)",
    ]  # XID 13 is the program's: not a node fault
    assert health.check() == [GpuFault(1, "uncorrected ECC errors (5)"), GpuFault(2, "XID 79 (fallen off the bus)")]
    assert fake.inits == 1


def test_nvml_with_fewer_gpus_than_registered_reports_the_missing(tmp_path: pathlib.Path) -> None:
    fake = FakeNVML(count=2)
    fake.events = []
    health = GpuHealth(inventory("nvml"), str(tmp_path / "none"), nvml=fake)
    assert [f.reason for f in health.check()][-2:] == ["GPU 2: missing (not detected)", "GPU 3: missing (not detected)"]


def test_nvml_that_cannot_start_degrades_to_no_answer(tmp_path: pathlib.Path) -> None:
    class Broken(FakeNVML):
        def nvmlInit(self) -> None:
            raise NVMLError(9)  # driver not loaded

    health = GpuHealth(inventory("nvml"), str(tmp_path / "none"), nvml=Broken())
    assert health.check() == []
