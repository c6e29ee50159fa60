"""What TLS (``TLSType=tls/muster``) costs: the same small cluster with plain links, then with TLS.

* ``squeue`` latency from a host without the controller's Unix socket (TCP: a credential
  from the local agent, then one request), fork/exec included, and the same request made
  in-process (no interpreter start-up), where the handshake weighs most;
* the controller's CPU per heartbeat (its utime+stime over ``N`` signed heartbeats sent as
  node1), over one kept-alive connection as the agents send them, and with a new
  connection (a full TLS handshake) per heartbeat, which is what keeping connections
  alive saves;
* the handshakes the agents make: distinct TCP connections from the agents to the
  controller while they heartbeat every second for a while (1 per agent when kept alive).

Figures only; nothing here asserts a wall-clock bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
from common import median, time_calls

from harness import Harness
from muster.cluster.local import ClusterShape
from muster.protocol.client import request
from muster.protocol.signing import load_key, sign_request
from muster.protocol.tls import client_context

N_SQUEUE = int(os.environ.get("BENCH_TLS_SQUEUE", "20"))
N_REQUESTS = int(os.environ.get("BENCH_TLS_REQUESTS", "100"))
N_HEARTBEATS = int(os.environ.get("BENCH_TLS_HEARTBEATS", "300"))
WATCH = float(os.environ.get("BENCH_TLS_WATCH", "8"))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tcp_conf(h: Harness) -> str:
    """A copy of the config whose controller socket is absent: the commands use TCP."""
    path = os.path.join(h.root, "tcp.conf")
    with open(h.cluster.conf_path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("CtldSocket=", "CtldSocket=/nonexistent/"))
    return path


def credential(h: Harness) -> str:
    sock = os.path.join(h.cluster.config().agent_socket_dir or "", "musterd-node1.sock")
    return str(request("POST", "/v1/credential", {}, unix_path=sock)["credential"])


def heartbeats(h: Harness, tls: bool, keep_alive: bool) -> float:
    """Controller CPU milliseconds per signed heartbeat from node1."""
    cfg = h.cluster.config()
    key = load_key(cfg.auth_key_file)
    scheme = "https" if tls else "http"
    url = f"{scheme}://{cfg.ctld_addr}:{cfg.ctld_port}/v1/agent/heartbeat"
    verify: object = client_context(cfg.tls.ca_cert, cfg.tls.node("node1")) if tls else True
    limits = httpx.Limits(max_keepalive_connections=1 if keep_alive else 0)
    ext = {"sni_hostname": "ctld"} if tls else None
    body = json.dumps({"node": "node1", "running": []}).encode()
    pid = h.cluster._alive("musterctld")
    assert pid is not None
    with httpx.Client(verify=verify, limits=limits, timeout=10) as client:  # type: ignore[arg-type]
        cpu0 = cpu_seconds(pid)
        for _ in range(N_HEARTBEATS):
            headers = sign_request(
                key, "POST", "/v1/agent/heartbeat", body, time.time(), sender="node1", receiver="ctld"
            )
            headers["content-type"] = "application/json"
            r = client.post(url, content=body, headers=headers, extensions=ext)
            assert r.status_code == 200, r.text
        cpu1 = cpu_seconds(pid)
    return (cpu1 - cpu0) * 1000 / N_HEARTBEATS


def agent_connections(h: Harness, seconds: float) -> int:
    """Distinct TCP connections to the controller's port seen while watching."""
    port = h.cluster.config().ctld_port
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                local, remote, state = line.split()[1:4]
                if int(remote.split(":")[1], 16) == port and state == "01":  # ESTABLISHED, agent side
                    seen.add(local)
        time.sleep(0.2)
    return len(seen)


def measure(tls: bool) -> dict[str, float]:
    shape = ClusterShape(nodes=2, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000)
    h = Harness(shape, tls=tls, settings={"HeartbeatInterval": "1"})
    h.up()
    try:
        out: dict[str, float] = {}
        conf = tcp_conf(h)
        env = {**h.env, "MUSTER_CONF": conf}  # the same cluster, seen from another host
        time_calls(h, ["squeue"], 2)  # warm the page cache
        t = []
        for _ in range(N_SQUEUE):
            t0 = time.perf_counter()
            p = subprocess.run(["squeue"], env=env, capture_output=True)
            t.append((time.perf_counter() - t0) * 1000)
            assert p.returncode == 0, p.stderr
        out["squeue over TCP (ms)"] = median(t)
        out["squeue over the Unix socket (ms)"] = median(time_calls(h, ["squeue"], N_SQUEUE))
        cfg = h.cluster.config()
        secure = (cfg.tls.ca_cert, "ctld") if tls else None
        t = []
        for _ in range(N_REQUESTS):
            cred = credential(h)
            t0 = time.perf_counter()
            request(
                "GET",
                "/v1/jobs",
                address=(cfg.ctld_addr, cfg.ctld_port),
                headers={"X-Muster-Credential": cred},
                tls=secure,
            )
            t.append((time.perf_counter() - t0) * 1000)
        out["one request in-process, TCP (ms)"] = median(t)
        out["ctld CPU per heartbeat, kept alive (ms)"] = heartbeats(h, tls, keep_alive=True)
        out["ctld CPU per heartbeat, new connection (ms)"] = heartbeats(h, tls, keep_alive=False)
        out[f"agent connections to ctld in {WATCH:.0f} s (2 agents)"] = agent_connections(h, WATCH)
        return out
    finally:
        h.down()


def main() -> None:
    plain = measure(tls=False)
    tls = measure(tls=True)
    print(f"{'':<48} {'plain':>9} {'TLS':>9} {'TLS/plain':>10}")
    for name in plain:
        a, b = plain[name], tls[name]
        ratio = f"{b / a:10.2f}" if a else f"{'-':>10}"
        print(f"{name:<48} {a:9.2f} {b:9.2f} {ratio}")


if __name__ == "__main__":
    main()
