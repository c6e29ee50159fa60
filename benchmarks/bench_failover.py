"""Issue 15 item 4's figures: how long a ``kill -9`` of the active controller interrupts service.

A local cluster with a primary and ``--backups`` standby controllers on one PostgreSQL store
(``MUSTER_TEST_PG_DSN`` or ``--dsn``; ``bash .ci/postgres.sh start DIR`` starts a throw-away
server). Each round kills the active controller while a batch job runs and measures, from
the kill:

* **takeover**: a standby answers as the active controller;
* **sbatch**: a submission started at the kill is acknowledged (the command fails over;
  read after the takeover, so never below it);
* **nodes**: every node's agent has registered again with the new active controller (it
  asks them to at once: issue 33 item 6);
* **started**: the job of that submission has started (scheduling resumed);
* **next**: how long the next command (``squeue``) took, from the same shell's user: it goes
  straight to the active controller (the client's memory, ``client.failover``).

With ``--hang`` the active controller is stopped (SIGSTOP: it accepts connections and
answers nothing) instead of killed, so the takeover waits for its lease to expire
(``SlurmctldTimeout``); it is continued afterwards and steps down. ``--slurmd-timeout``
(default 300, a heartbeat a minute) shows that none of this waits for a heartbeat.

The killed controller is started again (it stays a standby: no automatic failback), and the
next round kills whichever is active. Figures are printed, never asserted.

    python benchmarks/bench_failover.py [--rounds 5] [--nodes 4] [--backups 1] [--hang]
                                        [--slurmd-timeout 300] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402
from muster.protocol import client  # noqa: E402


def _url(dsn: str, schema: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(dsn)
    auth = str(d.get("user", "postgres")) + (f":{d['password']}" if d.get("password") else "")
    return (
        f"postgresql://{auth}@{d.get('host', '127.0.0.1')}:{d.get('port', 5432)}/{d.get('dbname', 'postgres')}"
        f"?options=-csearch_path%3D{schema}"
    )


def _wait(check, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.02)
    raise TimeoutError("not within the timeout")


def one_round(h: Harness, hang: bool = False) -> dict[str, float]:
    modes = h.cluster.controller_modes()
    active = modes.index("active")
    names = h.cluster.controllers()
    runner = h.sbatch("-o", "/dev/null", "--wrap", "sleep 60")
    h.wait_state(runner, "RUNNING", 30)
    pid = h.cluster._alive(names[active])
    assert pid is not None
    killed = time.monotonic()
    os.kill(pid, signal.SIGSTOP if hang else signal.SIGKILL)
    submit = subprocess.Popen(
        ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"],
        cwd=h.workdir,
        env=h.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Asked of the other controllers only: a stopped one would hold each question for its
    # timeout (the harness's own helpers ask every controller in turn).
    cfg = h.cluster.config()
    others = [i for i in range(len(names)) if i != active]

    def ask(index: int, path: str) -> Any:
        return client.request("GET", path, unix_path=cfg.ctld_socket_for(index), timeout=2.0)

    def new_active() -> int | None:
        for i in others:
            try:
                if (ask(i, "/v1/ping") or {}).get("mode") != "standby":
                    return i
            except (client.ConnectError, client.ApiError, OSError):
                continue
        return None

    _wait(lambda: new_active() is not None)
    takeover = time.monotonic() - killed
    now_active = new_active()
    assert now_active is not None
    out, err = submit.communicate(timeout=60)
    sbatch = time.monotonic() - killed  # bounded below by the takeover: waited for after it
    assert submit.returncode == 0, err
    begin = time.monotonic()
    h.run(["squeue", "-h", "-o", "%i"])
    after = time.monotonic() - begin
    job = int(out.strip().split(";")[0])
    _wait(lambda: ask(now_active, f"/v1/jobs/{job}")["job"]["state"] != "PENDING")
    started = time.monotonic() - killed

    def all_registered() -> bool:
        try:
            nodes = ask(now_active, "/v1/nodes")["nodes"]
        except Exception:
            return False
        return all(n["registered"] and n["state"] not in ("DOWN", "UNKNOWN") for n in nodes)

    _wait(all_registered)
    nodes = time.monotonic() - killed
    if not hang:  # a stopped controller may hold the runner's launch, sent on waking
        assert ask(now_active, f"/v1/jobs/{runner}")["job"]["state"] == "RUNNING"  # it kept running
    h.run(["scancel", str(runner)])
    if hang:
        os.kill(pid, signal.SIGCONT)  # it wakes, finds itself deposed, steps down
    else:
        h.cluster.start()  # the killed one comes back as a standby
    _wait(lambda: h.cluster.controller_modes().count("standby") == len(names) - 1)
    return {"takeover": takeover, "sbatch": sbatch, "nodes": nodes, "started": started, "next": after}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--backups", type=int, default=1)
    ap.add_argument("--hang", action="store_true", help="SIGSTOP the active controller instead of kill -9")
    ap.add_argument("--slurmd-timeout", type=int, default=300)
    ap.add_argument("--dsn", default=os.environ.get("MUSTER_TEST_PG_DSN"))
    args = ap.parse_args()
    if not args.dsn:
        print("bench_failover: needs PostgreSQL: set MUSTER_TEST_PG_DSN or pass --dsn", file=sys.stderr)
        return 2
    import psycopg

    schema = "bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    h = Harness(
        ClusterShape(
            nodes=args.nodes, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000, backup_controllers=args.backups
        ),
        settings={
            "AccountingStorageURL": _url(args.dsn, schema),
            "SlurmctldTimeout": "10",
            "SlurmdTimeout": str(args.slurmd_timeout),
        },
    )
    try:
        h.up()
        how = "SIGSTOP" if args.hang else "kill -9"
        rows = []
        for i in range(args.rounds):
            r = one_round(h, args.hang)
            rows.append(r)
            print(
                f"round {i + 1}: takeover {r['takeover']:.2f} s, sbatch answered {r['sbatch']:.2f} s, "
                f"all {args.nodes} nodes registered {r['nodes']:.2f} s, its job started {r['started']:.2f} s "
                f"after {how}; the next squeue took {r['next']:.2f} s"
            )
        print(
            f"median of {len(rows)} ({how}; {args.nodes} nodes, {args.backups} backup(s), SlurmctldTimeout=10, "
            f"SlurmdTimeout={args.slurmd_timeout}): "
            + ", ".join(
                f"{k} {statistics.median(r[k] for r in rows):.2f} s"
                for k in ("takeover", "sbatch", "nodes", "started", "next")
            )
        )
    finally:
        h.down()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
