"""Issue 36 item 5's figure: how often the failure ledger attributes a hardware-caused
interruption to the right node on the first attempt, on a replayed Llama 3 fault mix.

The mix is ``muster.sim.ettr.LLAMA3_MIX``: the 419 unexpected interruptions of a 54-day
snapshot of Llama 3 405B pre-training on 2,048 nodes of 8 H100s ("The Llama 3 Herd of
Models", Meta 2024, section 3.3.4, Table 5), each cause with its count, whether it is
hardware, and how it shows (crash, node, hang, silent). Each interruption is placed at a
random time of the 54 days (seeded) and becomes what the controller would record through
``ClusterState.node_fault``, on a real ``Controller`` (manual clock, SQLite store in a
temporary directory), running one job of 2,048 nodes (one user, one job id: its attempts
keep the id, as a requeue or a replacement does):

* a GPU cause (``crash``): the agent's GPU check sees an Xid on the faulty node (``gpu``) in
  ``--xid`` of the cases (default 0.8); otherwise the ranks crash without one and the hang
  judgement names the node(s) whose ranks stopped behind the others: the faulty node alone
  in ``--alone`` of the cases (default 0.85), else it and one innocent neighbour; in
  ``--behind`` of the stalls (default 0.9) the progress reports show those ranks behind the
  others' (the evidence singles the node out), else all ranks stalled alike;
* ``node`` (host faults): the node stops answering (``node_fail``);
* ``hang`` (network, NIC): the hung run's stalled ranks: the faulty node alone, or with one
  innocent peer, as above;
* ``silent`` (silent data corruption): nothing is recorded (counted as not attributed);
* software causes (``software bug``, ``dependency``, NCCL watchdog timeouts): the job's
  own failure; it recurs on its next attempt on another node (a ``launch`` failure, or a
  hang in which no node is behind the others).

The shares are assumptions about the detectors (stated, and flags), not measured here: the
figure tests the attribution rule given what the detectors report. Right on the first attempt: the first record of the interruption names the faulty node and
is not attributed to the job (the node is drained, down, or excluded by the requeue). Also
printed: innocent nodes named, nodes drained or quarantined that had no fault, and software
causes attributed to the job. Figures are printed, never asserted.

    python benchmarks/bench_attribution.py [--seed 1] [--xid 0.8] [--alone 0.85]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import tempfile
from collections import Counter

from muster.core.attribution import JOB
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store
from muster.sim.ettr import LLAMA3_DAYS, LLAMA3_MIX, LLAMA3_NODES

USER = Identity(1001, 1001, "llama", "llama", "h", admin=False)
SOFTWARE_HANG = "NCCL watchdog timeouts"


def build(root: str, nodes: int, clock: ManualClock) -> Controller:
    conf = (
        "ClusterName=bench\nSlurmdTimeout=300\n"
        f"NodeName=n[1-{nodes}] CPUs=8 RealMemory=64000 Gres=gpu:8\n"
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    )
    ctl = Controller(parse_config(conf, "bench.conf"), Store(os.path.join(root, "m.db")), clock)
    ctl.load()
    return ctl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--xid", type=float, default=0.8, help="share of GPU faults the agent's Xid check sees")
    ap.add_argument("--alone", type=float, default=0.85, help="share of stalls that single out the faulty node alone")
    ap.add_argument("--behind", type=float, default=0.9, help="share of stalls whose progress shows ranks behind")
    ap.add_argument("--nodes", type=int, default=LLAMA3_NODES)
    args = ap.parse_args(argv)
    logging.getLogger("musterctld").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    events = [(rng.uniform(0, LLAMA3_DAYS * 86400.0), c) for c in LLAMA3_MIX for _ in range(c.count)]
    events.sort(key=lambda e: e[0])
    clock = ManualClock(1_700_000_000.0)
    names = [f"n{i}" for i in range(1, args.nodes + 1)]
    right: Counter[str] = Counter()
    hardware: Counter[str] = Counter()
    innocent_named = 0
    software_to_job = software = 0
    with tempfile.TemporaryDirectory() as root:
        ctl = build(root, args.nodes, clock)
        job = ctl.queue.submit(JobSpec(min_nodes=1), USER)
        start = clock.now()
        for t, cause in events:
            clock.set(max(clock.now(), start + t))
            now = clock.now()
            faulty = rng.choice(names)
            if cause.hardware:
                hardware[cause.symptom] += 1
                if cause.symptom == "silent":
                    continue
                if cause.symptom == "node":
                    who = ctl.node_fault(faulty, "node_fail", now, job=job, evidence=f"node {faulty} not responding")
                    named = [faulty]
                elif cause.symptom == "crash" and rng.random() < args.xid:
                    who = ctl.node_fault(faulty, "gpu", now, evidence=f"GPU {rng.randrange(8)}: XID 79", drain="gpu")
                    named = [faulty]
                else:  # a stall: the nodes whose ranks stopped behind the others'
                    named = [faulty] if rng.random() < args.alone else [faulty, rng.choice(names)]
                    behind = rng.random() < args.behind  # else: no rank behind, all stalled alike
                    verdicts = [ctl.node_fault(n, "hang", now, job=job, evidence="Hung", behind=behind) for n in named]
                    who = verdicts[0]
                    innocent_named += len(named) - 1
                if who != JOB:
                    right[cause.symptom] += 1
            else:
                software += 1
                first, second = rng.sample(names, 2)
                kind = "hang" if cause.name == SOFTWARE_HANG else "launch"
                ctl.node_fault(first, kind, now, job=job, evidence="the job's own failure")
                clock.advance(600.0)  # its next attempt, on another node, fails the same way
                who = ctl.node_fault(second, kind, clock.now(), job=job, evidence="the job's own failure")
                software_to_job += who == JOB
            # nodes are returned between interruptions, as the operators did (not counted as resumes)
            for n in ctl.nodes.values():
                if n.drain and not n.reason.startswith("quarantined: "):
                    n.drain, n.reason = False, ""
        quarantined = sorted(n.name for n in ctl.nodes.values() if n.reason.startswith("quarantined: "))
        records = sum(len(ctl.ledger.history(n)) for n in names)
    total_hw = sum(hardware.values())
    total_right = sum(right.values())
    print(
        f"Llama 3 mix: {len(events)} interruptions over {LLAMA3_DAYS:.0f} days on {args.nodes} nodes (seed {args.seed})"
    )
    print(f"hardware-caused: {total_hw} ({', '.join(f'{k} {v}' for k, v in sorted(hardware.items()))})")
    for symptom in sorted(hardware):
        n = hardware[symptom]
        print(
            f"  {symptom:7s} right node on the first attempt: {right[symptom]}/{n} ({100.0 * right[symptom] / n:.1f} %)"
        )
    print(
        f"attributed to the right node on the first attempt: {total_right}/{total_hw} ({100.0 * total_right / total_hw:.1f} %)"
    )
    print(f"innocent nodes named beside the faulty one (stalls): {innocent_named}")
    print(f"software causes attributed to the job at their second failure: {software_to_job}/{software}")
    print(f"nodes quarantined (QuarantineFailures=2 in 86400 s): {len(quarantined)}; ledger records: {records}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
