"""The components of a heterogeneous job as sbatch, salloc and srun read them.

On the command line the components are separated by lone ``:`` arguments, each with its
own options (``sbatch -N1 : -N2 job.sh``); in a batch script, by ``#SBATCH hetjob`` (or
``packjob``) lines between the ``#SBATCH`` directives. Some options carry over from one
component to the next unless the next one sets them again (``PROPAGATED``, Slurm's list,
restricted to the options muster knows); the others (``--ntasks``, ``--mem``...) start
again from their defaults in each component.
"""

from __future__ import annotations

from muster.core.hetjob import SEPARATOR
from muster.slurm.options import Parsed

TYPE_CHECKING = False  # collections.abc costs a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PROPAGATED", "parse_components", "propagate"]

# The options Slurm carries from a component to the next ones (heterogeneous_jobs.html's
# list, as of 21.08: ``--mem`` carries over, ``--mem-per-cpu`` and ``--ntasks`` do not)
PROPAGATED = frozenset(
    {
        "account",
        "acctg-freq",
        "begin",
        "clusters",
        "comment",
        "deadline",
        "delay-boot",
        "dependency",
        "distribution",
        "error",
        "export",
        "exclude",
        "get-user-env",
        "hold",
        "immediate",
        "input",
        "job-name",
        "kill-on-bad-exit",
        "label",
        "mcs-label",
        "mem",
        "nice",
        "no-kill",
        "no-requeue",
        "open-mode",
        "output",
        "parsable",
        "priority",
        "propagate",
        "qos",
        "quiet",
        "reservation",
        "requeue",
        "signal",
        "time",
        "time-min",
        "unbuffered",
        "verbose",
        "wait",
        "wait-all-nodes",
        "wckey",
    }
)


def parse_components(
    argv: list[str], parse: Callable[[list[str]], tuple[Parsed, list[str]]]
) -> tuple[list[Parsed], list[str]]:
    """Each component's parsed options and the operands after the last one (the script
    or command and its arguments). ``parse`` reads one component's options from the
    front of its arguments (``job_getopt``); a ``:`` first among its operands starts the
    next component."""
    components: list[Parsed] = []
    rest = list(argv)
    while True:
        parsed, operands = parse(rest)
        components.append(parsed)
        if operands and operands[0] == SEPARATOR:
            rest = operands[1:]
            continue
        return components, operands


def propagate(components: list[Parsed]) -> list[Parsed]:
    """Each component's options preceded by the propagated options of the one before it
    (which it may set again: later options win)."""
    out: list[Parsed] = []
    carried: Parsed = []
    for own in components:
        layered = carried + own
        out.append(layered)
        carried = [(opt, value) for opt, value in layered if opt.key in PROPAGATED]
    return out
