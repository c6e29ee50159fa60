"""What ``AuthType=auth/munge`` costs a command, and the controller (docs/security.md).

* a credential by itself, in a fresh interpreter (``python -S``, as the commands start): no
  credential, then ``protocol.munge.encode`` (the ``munge`` program through posix_spawn,
  what the commands use), then libmunge through ``ctypes`` (what they do not use: loading
  ``ctypes`` costs more than the program);
* ``squeue`` from a host without the controller's socket (TCP): with the local agent's
  credential, and from a login node with MUNGE's (no agent there); and through the
  controller's Unix socket, for scale;
* the controller's decoding of one MUNGE credential (libmunge, one round trip to munged).

munged runs with its own key and socket in a temporary directory (the benchmark needs root
and munge installed). Figures only; nothing here asserts a wall-clock bound.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import median

from harness import Harness
from muster.cluster.local import ClusterShape
from muster.protocol import munge

N_START = int(os.environ.get("BENCH_MUNGE_STARTS", "60"))
N_SQUEUE = int(os.environ.get("BENCH_MUNGE_SQUEUE", "30"))
N_DECODE = int(os.environ.get("BENCH_MUNGE_DECODE", "300"))

CTYPES_ENCODE = """
import ctypes
lib = ctypes.CDLL("libmunge.so.2")
lib.munge_ctx_create.restype = ctypes.c_void_p
lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
ctx = lib.munge_ctx_create()
lib.munge_ctx_set(ctypes.c_void_p(ctx), 8, ctypes.c_char_p(SOCK))
out = ctypes.c_char_p()
assert lib.munge_encode(ctypes.byref(out), ctx, b"x", 1) == 0
"""


def fresh(codes: list[str], n: int) -> list[float]:
    """Median ms of ``n`` runs of ``python -S -c code`` for each code, interleaved (the
    machine's load then weighs on each alike)."""
    times: list[list[float]] = [[] for _ in codes]
    for _ in range(n):
        for i, code in enumerate(codes):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", code], check=True)
            times[i].append((time.perf_counter() - t0) * 1000)
    return [median(t) for t in times]


def squeue_ms(h: Harness, conf: str, served: bool) -> float:
    env = {**h.env, "MUSTER_CONF": conf, **({} if served else {"MUSTER_CMD_SERVER": "0"})}
    t0 = time.perf_counter()
    p = subprocess.run(["squeue", "-h"], env=env, cwd=h.workdir, capture_output=True)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise RuntimeError(f"squeue failed: {p.stderr.decode()}")
    return ms


def main() -> int:
    munged = shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin")
    if munged is None or shutil.which("munge") is None:
        print("bench_munge: skipped: munge is not installed (apt-get install munge libmunge2)")
        return 0
    root = tempfile.mkdtemp(prefix="muster-bench-munge-")
    os.chmod(root, 0o755)
    key = os.path.join(root, "munge.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(os.urandom(1024))
    sock = os.path.join(root, "munge.sock")
    daemon = subprocess.Popen(
        [munged, "-F", "-f", f"--socket={sock}", f"--key-file={key}", f"--pid-file={root}/pid"]
        + [f"--seed-file={root}/seed", f"--log-file={root}/log"],
        stderr=subprocess.DEVNULL,
    )
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=1000),
        settings={"AuthType": "auth/munge", "AuthInfo": f"socket={sock}"},
    )
    try:
        while not os.path.exists(sock):
            time.sleep(0.01)
        src = os.path.dirname(os.path.dirname(os.path.dirname(munge.__file__)))
        print(f"credential in a fresh interpreter (median of {N_START}, ms):")
        head = f"import sys; sys.path.insert(0, {src!r}); from muster.protocol import munge\n"
        base, spawn, ctyp = fresh(
            [
                head,
                head + f"assert munge.encode({sock!r}, 'c', 1.0)",
                head + f"SOCK = {sock.encode()!r}\n" + CTYPES_ENCODE,
            ],
            N_START,
        )
        print(f"  python -S, muster.protocol.munge imported  {base:7.2f}")
        print(f"  + munge program (posix_spawn, chosen)      {spawn:7.2f}   (+{spawn - base:.2f})")
        print(f"  + libmunge through ctypes                  {ctyp:7.2f}   (+{ctyp - base:.2f})")

        h.up()
        with open(h.cluster.conf_path) as f:
            text = f.read()
        empty = os.path.join(root, "no-agents")
        os.makedirs(empty)
        tcp = os.path.join(root, "tcp.conf")
        login = os.path.join(root, "login.conf")
        with open(tcp, "w") as f:
            f.write(text + "\nCtldSocket=/nonexistent/ctld.sock\nAuthType=auth/muster\n")
        with open(login, "w") as f:
            f.write(text + f"\nCtldSocket=/nonexistent/ctld.sock\nAgentSocketDir={empty}\n")
        print(f"squeue (median of {N_SQUEUE}, fork/exec included, ms):")
        confs = {
            "Unix socket (head node)": h.cluster.conf_path,
            "TCP, agent's credential": tcp,
            "TCP, MUNGE (login node)": login,
        }
        runs: dict[tuple[str, bool], list[float]] = {(name, s): [] for name in confs for s in (True, False)}
        for _ in range(N_SQUEUE):  # interleaved, as above
            for name, served in runs:
                runs[name, served].append(squeue_ms(h, confs[name], served))
        print(f"  {'':<41} {'served':>7} {'direct':>7}  (the command server, or MUSTER_CMD_SERVER=0)")
        for name in confs:
            print(f"  {name:<41} {median(runs[name, True]):7.2f} {median(runs[name, False]):7.2f}")

        creds = [munge.encode(sock, "cluster", time.time()) or "" for _ in range(N_DECODE)]
        decoder = munge.MungeDecoder(sock)
        t0 = time.perf_counter()
        for c in creds:
            decoder.decode(c)
        per = (time.perf_counter() - t0) * 1000 / N_DECODE
        print(f"controller: decoding one MUNGE credential (mean of {N_DECODE}): {per:.3f} ms")
    finally:
        h.down()
        daemon.terminate()
        daemon.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
