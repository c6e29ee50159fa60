"""Text rules of slurm.conf-style files, shared by ``core.config`` and the commands'
quick scanner in ``client.settings`` (which does not import ``core.config``, for start-up
speed). Pure and import-free."""

from __future__ import annotations


def strip_comment(line: str) -> str:
    """Cut at the first ``#`` outside double quotes; ``\\#`` stands for a literal ``#``."""
    if "#" not in line:
        return line
    out: list[str] = []
    quoted = False
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and line.startswith("#", i + 1):
            out.append("#")
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            break
        out.append(ch)
        i += 1
    return "".join(out)
