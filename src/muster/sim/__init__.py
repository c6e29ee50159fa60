"""The simulator: real workload traces replayed through the production scheduler.

``muster sim TRACE`` (``python -m muster.sim``) reads a trace, replays it on a virtual
clock through exactly the ``sched.schedule`` the controller calls, applying decisions
through ``core.lifecycle`` as the controller does, and reports utilisation, waits, bounded
slowdown and JCT, with plots. So a policy can be judged before it is deployed.

Modules, in the order data flows:

* ``traces``: SWF and GPU-CSV readers -> ``Trace`` of ``TraceJob``;
* ``cluster``: the simulated machine (``NodeView``s, partitions) and how a trace job asks
  for it;
* ``policies``: fcfs / easy / conservative as slurm.conf settings -> ``SchedConfig``;
* ``engine``: the event heap on a ``ManualClock`` -> ``JobOutcome`` per job;
* ``metrics``: definitions, computation and the printed table;
* ``plots``: PNG pictures (matplotlib, imported only when drawing);
* ``main``: the command line.

Like ``core`` and ``sched`` it never reads the wall clock (a test greps for it); it imports
``core`` and ``sched`` and never ``ctld``.
"""
