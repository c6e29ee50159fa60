"""The Slurm-compatible commands: sbatch, srun, salloc, squeue, scancel, sinfo, scontrol,
sacct... (and ``muster``). srun's and salloc's shared parts are in ``alloc``; srun's running
step (nodes, stdin, signals, exit status) in ``steprun``.

Each command is one module with ``main(argv) -> int``. They share ``common`` (version line,
errors, output helpers), ``muster.client`` (the configuration, the controller connection,
failover) and ``muster.slurm`` (column formatting, the field tables, the getopt work-alike
and the one table of job options used by sbatch, ``#SBATCH`` lines and ``SBATCH_*``
variables, Slurm JSON), which the REST server shares. Commands import only cheap
standard-library modules, ``muster.core`` helpers, ``muster.client``, ``muster.slurm`` and
``muster.protocol.client``, lazily where they can: start-up time is a feature. They never
import ``ctld``, ``sched``, ``agent`` or ``rest``.
"""
