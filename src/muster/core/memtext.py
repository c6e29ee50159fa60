"""Memory sizes as Slurm prints them (``2000M``, ``125G``, ``1T``).

The formatting half of ``muster.core.resources`` (which re-exports it), apart so that
``scontrol show node`` and ``show partition`` import neither the parsers nor ``re``, which
costs a command several milliseconds to start.
"""


def format_mem(mb: int) -> str:
    """TRES style: ``2000M``, ``125G``, ``1000G``: G when it divides evenly."""
    if mb and mb % 1024 == 0:
        if mb % (1024 * 1024) == 0:
            return f"{mb // (1024 * 1024)}T"
        return f"{mb // 1024}G"
    return f"{mb}M"
