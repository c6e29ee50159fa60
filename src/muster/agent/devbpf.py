"""Device confinement on cgroup v2: a small eBPF program per job cgroup.

cgroup v2 has no ``devices.deny`` file: the kernel asks a ``BPF_PROG_TYPE_CGROUP_DEVICE``
program attached to the cgroup (and inherited by its children) on every open or mknod of a
device node, with ``(type | access << 16, major, minor)``; returning 0 refuses (EPERM).

``program(deny)`` assembles one (pure): for each denied ``(kind, major, minor)`` three
compares and a ``return 0``, then ``return 1``. ``attach(cgroup_dir, deny)`` loads it with
the ``bpf(2)`` system call and attaches it to the directory (``BPF_PROG_ATTACH``: it stays
attached, past the agent's exit, until the cgroup is removed). Raises ``OSError``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Sequence

__all__ = ["attach", "check", "program"]

_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_PROG_LOAD, _PROG_ATTACH = 5, 8
_PROG_TYPE_CGROUP_DEVICE = 15
_ATTACH_CGROUP_DEVICE = 6
_DEV_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR

# instruction opcodes (class | size/op | source)
_LDX_W = 0x61  # dst = *(u32 *)(src + off)
_AND_K = 0x57  # dst &= imm (64-bit)
_JNE_K = 0x55  # if dst != imm: pc += off
_MOV_K = 0xB7  # dst = imm (64-bit)
_EXIT = 0x95


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(deny: Sequence[tuple[str, int, int]]) -> bytes:
    """The program's instructions: refuse every device of ``deny``, allow the rest."""
    code = [
        _insn(_LDX_W, dst=2, src=1, off=0),  # r2 = access_type
        _insn(_AND_K, dst=2, imm=0xFFFF),  # r2 = its device type
        _insn(_LDX_W, dst=3, src=1, off=4),  # r3 = major
        _insn(_LDX_W, dst=4, src=1, off=8),  # r4 = minor
    ]
    for kind, major, minor in deny:
        code += [
            _insn(_JNE_K, dst=2, off=4, imm=_DEV_TYPE[kind]),  # not this one: the next rule
            _insn(_JNE_K, dst=3, off=3, imm=major),
            _insn(_JNE_K, dst=4, off=2, imm=minor),
            _insn(_MOV_K, dst=0, imm=0),  # refused
            _insn(_EXIT),
        ]
    code += [_insn(_MOV_K, dst=0, imm=1), _insn(_EXIT)]
    return b"".join(code)


def _bpf(cmd: int, attr: bytes) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(f"bpf(2): unknown system call number on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    result = int(libc.syscall(number, cmd, buf, 128))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf(2): {os.strerror(err)}")
    return result


def _load(deny: Sequence[tuple[str, int, int]]) -> int:
    insns = ctypes.create_string_buffer(program(deny))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    log = ctypes.create_string_buffer(4096)
    count = (len(insns) - 1) // 8  # create_string_buffer adds a NUL
    load = struct.pack(
        "<IIQQIIQ",
        _PROG_TYPE_CGROUP_DEVICE,
        count,
        ctypes.addressof(insns),
        ctypes.addressof(license_),
        1,  # log level: the verifier says why, should it refuse
        len(log),
        ctypes.addressof(log),
    )
    try:
        return _bpf(_PROG_LOAD, load)
    except OSError as exc:
        said = log.value.decode(errors="replace").strip().splitlines()
        raise OSError(exc.errno, f"{exc.strerror}{': ' + said[-1] if said else ''}") from None


def check() -> None:
    """Whether this kernel and this process may load device programs (raises ``OSError``)."""
    os.close(_load([("c", 1, 1)]))


def attach(cgroup_dir: str, deny: Sequence[tuple[str, int, int]]) -> None:
    """Load the program for ``deny`` and attach it to ``cgroup_dir`` (a v2 cgroup)."""
    prog = _load(deny)
    try:
        target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(_PROG_ATTACH, struct.pack("<IIII", target, prog, _ATTACH_CGROUP_DEVICE, 0))
        finally:
            os.close(target)
    finally:
        os.close(prog)
