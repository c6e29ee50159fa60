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


def __getattr__(name: str) -> str:
    """``__version__`` and ``VERSION_STRING``, read on first use: a command that is not
    asked its version never imports ``muster._version`` (its start stays at the floor)."""
    if name == "__version__":
        try:
            # Written by the build from git (hatch-vcs; docs/decisions/0002-versions.md).
            from muster._version import __version__ as version
        except ImportError:  # a source tree never built or installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    if name == "VERSION_STRING":
        # What `--version` prints: Slurm clients parse "slurm-wlm X.Y.Z"-like strings loosely;
        # we announce ourselves honestly and keep the Slurm version we follow in view.
        text = f"muster {__getattr__('__version__')} (slurm 22.05 compatible)"
        globals()["VERSION_STRING"] = text
        return text
    raise AttributeError(f"module 'muster' has no attribute {name!r}")
