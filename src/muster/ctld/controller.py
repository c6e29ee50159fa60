"""The controller: its state and its responsibilities, put together.

``Controller`` is the ``ClusterState`` (jobs and nodes in memory, equal to the store) with
one object per responsibility, each in its own module:

* ``queue`` (``jobs.JobActions``): what users do to jobs;
* ``hets`` (``hetjobs.HetJobs``): heterogeneous jobs, submitted and ended whole;
* ``launches`` (``launches.Launches``): runs starting and ending;
* ``agents`` (``agents.Agents``): what the node agents tell;
* ``liveness`` (``liveness.Liveness``): nodes alive, silent or down, and their admin states;
* ``resv`` (``reservation_book.ReservationBook``): advance reservations;
* ``training`` (``training.Training``): GPU faults, job progress, hangs, suspect nodes;
* ``preemption`` (``preemption.Preemptions``): victims signalled, then requeued or cancelled;
* ``suspensions`` (``suspend.Suspensions``): ``scontrol suspend`` and ``resume``.

None of them performs I/O towards agents: they return ``actions`` that ``app`` hands to
``dispatch``. This keeps "decide" apart from "do" and makes the controller testable on a
manual clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.ctld.actions import Action, Launch, NewLimit, SignalJob, Terminate, parse_signal
from muster.ctld.agents import Agents
from muster.ctld.hetjobs import HetJobs
from muster.ctld.identity import Identity
from muster.ctld.jobs import JobActions
from muster.ctld.launches import Launches
from muster.ctld.liveness import Liveness
from muster.ctld.preemption import Preemptions
from muster.ctld.reservation_book import ReservationBook
from muster.ctld.state import ClusterState
from muster.ctld.suspend import Suspensions
from muster.ctld.training import Training
from muster.ctld.triggers import TriggerBook
from muster.sched.memo import PassMemo

__all__ = [
    "Action",
    "Controller",
    "Identity",
    "Launch",
    "NewLimit",
    "SignalJob",
    "Terminate",
    "parse_signal",
]


@dataclass
class Controller(ClusterState):
    queue: JobActions = field(init=False, repr=False)
    hets: HetJobs = field(init=False, repr=False)
    launches: Launches = field(init=False, repr=False)
    agents: Agents = field(init=False, repr=False)
    liveness: Liveness = field(init=False, repr=False)
    resv: ReservationBook = field(init=False, repr=False)
    training: Training = field(init=False, repr=False)
    preemption: Preemptions = field(init=False, repr=False)
    suspensions: Suspensions = field(init=False, repr=False)
    triggers: TriggerBook = field(init=False, repr=False)
    sched_memo: PassMemo = field(init=False, repr=False)  # kept between passes (ctld.loop, sched.memo)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sched_memo = PassMemo()
        self.queue = JobActions(self)
        self.hets = HetJobs(self.queue)
        self.launches = Launches(self)
        self.training = Training(self)
        self.launches.judged_end = self.training.judged_end
        self.agents = Agents(self, self.launches, self.training)
        self.liveness = Liveness(self, self.training)
        self.resv = ReservationBook(self)
        self.preemption = Preemptions(self, self.agents.protocol)
        self.training.replacements.warn = self.preemption.warn  # spares reclaimed (ctld.replacement)
        self.suspensions = Suspensions(self, self.agents.protocol)
        self.triggers = TriggerBook(self)  # strigger (ctld.triggers)
        self.training.on_checkpoint = self.preemption.checkpointed  # the checkpoint handshake

    def load(self) -> None:
        super().load()
        self.queue.load_tokens()  # a retried submission finds the job it made (ctld.jobs)
        self.triggers.load()  # strigger's triggers survive a restart
