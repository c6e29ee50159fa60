"""muster: a Slurm-compatible workload manager for AI training clusters.

Packages (dependencies point one way: ``core`` <- ``sched`` <- {``ctld``, ``sim``};
``core``, ``protocol`` <- {``ctld``, ``agent``, ``cli``}):

* ``core``     pure domain types: states, jobs, resources, config syntax, time formats.
* ``sched``    pure scheduling decisions: snapshot + now in, decisions out.
* ``ctld``     the controller daemon (musterctld).
* ``agent``    the node daemon (musterd).
* ``protocol`` wire messages, signing and the lean client used by the commands.
* ``cli``      the Slurm-compatible commands and ``muster`` itself.
* ``sim``      the trace-driven simulator.
"""

__version__ = "0.1.0"
# What `--version` prints: Slurm clients parse "slurm-wlm X.Y.Z"-like strings loosely;
# we announce ourselves honestly and keep the Slurm version we follow in view.
VERSION_STRING = f"muster {__version__} (slurm 22.05 compatible)"
