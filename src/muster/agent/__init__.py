"""musterd, the node agent (muster's slurmd).

One agent per node (several may share a host under different node names and ports). It
owns what happens on its node and nothing else; the controller owns every job's state.

* ``main``       the ``musterd`` command: flags, config, cluster key, logging.
* ``daemon``     wiring: state directory and lock, GPUs, sockets, background loops.
* ``app``        the HTTP API: signed requests from the controller on TCP, user
                 credentials (SO_PEERCRED) on the node's Unix socket.
* ``link``       register, heartbeat and deliver ``job_done`` reports, riding out a
                 controller that is down or restarting.
* ``supervisor`` running batch scripts: launch, watch, time limits, signals, termination,
                 restart recovery.
* ``steps``      job steps launched by srun (authorized by the controller's grant): fork
                 the tasks as the user, stream their output and ends back, stdin, signals;
                 ``stepapi`` is its HTTP face, ``stepplan`` plans each task, ``localstep``
                 holds a running step's records.
* ``taskenv``    pure: a step's grant, a node and a task -> the task's environment.
* ``launcher``   spool the script, fork its monitor and the script (outputs' paths from
                 ``core.outputs``); ``jobrecord`` is the running script's record and report.
* ``spawn``      the one become-the-user sequence in a forked child, for batch scripts and
                 step tasks alike: session, identity, umask, directory, stdio as the user,
                 signals, CPU pinning, exec, and whose fault a failure before exec is.
* ``env``        pure: a job and a node -> the batch script's environment (Slurm's names).
* ``limits``     pure: time-limit deadlines, ``--signal`` specs, exit statuses.
* ``affinity``   which host CPUs each job holds (``CpuLedger``), and pinning to them.
* ``proctree``   pure walk over a ``/proc`` snapshot: which processes belong to a job.
* ``gpus``       GPU detection (nvidia-smi, NVML) or emulation of the configured count.
* ``state``      atomic JSON records on disk: running jobs and pending reports.
"""
