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

try:
    # Written by the build from git (hatch-vcs; docs/decisions/0002-versions.md).
    from muster._version import __version__ as __version__
except ImportError:  # a source tree never built or installed
    __version__ = "0+unknown"
# What `--version` prints: Slurm clients parse "slurm-wlm X.Y.Z"-like strings loosely;
# we announce ourselves honestly and keep the Slurm version we follow in view.
VERSION_STRING = f"muster {__version__} (slurm 22.05 compatible)"
