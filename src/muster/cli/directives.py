"""``#SBATCH`` directives: the options written in a batch script, read as one argv.

sbatch applies them before its environment and command line (which win). Slurm's rules
are kept: directives start in column one, reading stops at the first line that is neither
blank nor a comment, quotes group, and an unquoted ``#`` that begins an argument starts a
comment. A ``#SBATCH hetjob`` line separates the components of a heterogeneous job.
"""

from __future__ import annotations

from muster.core.hetjob import SCRIPT_SEPARATORS


def script_directives(script: str, magic: str = "#SBATCH") -> list[str]:
    """The arguments of a batch script's ``#SBATCH`` lines, in order, as one argv.

    Slurm's rules: directives must start in column one; reading stops at the first line
    that is neither blank nor a comment (the first line, the ``#!``, is skipped); within a
    line arguments are separated by blanks, single or double quotes group (and are
    removed), and an unquoted ``#`` that begins an argument starts a comment.
    """
    return [arg for line in _directive_lines(script, magic) for arg in line]


def script_directive_groups(script: str, magic: str = "#SBATCH") -> list[list[str]]:
    """``script_directives`` cut into a heterogeneous job's components: a directive line
    that says only ``hetjob`` (or ``packjob``) starts the next component's options."""
    groups: list[list[str]] = [[]]
    for line in _directive_lines(script, magic):
        if len(line) == 1 and line[0] in SCRIPT_SEPARATORS:
            groups.append([])
        else:
            groups[-1].extend(line)
    return groups


def _directive_lines(script: str, magic: str) -> list[list[str]]:
    out: list[list[str]] = []
    lines = script.split("\n")
    for line in lines[1:]:
        if line.startswith(magic):
            out.append(_directive_args(line[len(magic) :]))
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
    return out


def _directive_args(text: str) -> list[str]:
    args: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r":
            i += 1
        if i >= n or text[i] == "#":
            return args
        current: list[str] = []
        quote = ""
        while i < n:
            ch = text[i]
            if quote:
                if ch == quote:
                    quote = ""
                else:
                    current.append(ch)
            elif ch in "\"'":
                quote = ch
            elif ch in " \t\r":
                break
            else:
                current.append(ch)
            i += 1
        args.append("".join(current))
