"""``srun --multi-prog FILE``: a different program (and arguments) per task.

Each line of the file names task ranks and the command line they run::

    # ranks    program and arguments (%t: the task's rank, %o: its offset in the line's ranks)
    0          python serve.py --port 29500
    1-3,5      python work.py --id %t
    *          python idle.py

Ranks are single numbers, ``a-b`` ranges and commas; ``*`` stands for every task no earlier
line named. Empty lines and ``#`` comments are skipped; arguments may be quoted as in a
shell. A rank named twice, a malformed line, or a task left without a program is an error
(Slurm's rules); the file is read before anything is allocated, and the tasks are matched
once the step's task count is known.
"""

from __future__ import annotations

from muster.cli.common import CommandError

__all__ = ["MultiProg", "parse_multi_prog"]


class MultiProg:
    """The parsed file: ``(ranks or None for *, argv)`` per line, in order."""

    def __init__(self, path: str, lines: list[tuple[list[int] | None, list[str]]]) -> None:
        self.path = path
        self.lines = lines

    def argv_for(self, ntasks: int) -> dict[int, list[str]]:
        """Every task's command line; CommandError when a task has none or a rank is
        beyond the step's tasks."""
        out: dict[int, list[str]] = {}
        for ranks, argv in self.lines:
            chosen = [t for t in range(ntasks) if t not in out] if ranks is None else ranks
            for offset, task in enumerate(chosen):
                if task >= ntasks:
                    raise CommandError(f"Invalid task id {task} in {self.path}: the step has {ntasks} tasks")
                out[task] = [_expand(a, task, offset) for a in argv]
        missing = [t for t in range(ntasks) if t not in out]
        if missing:
            # Slurm's two lines: the file is invalid, then why
            raise CommandError(
                f"Configuration file {self.path} invalid\n"
                f"srun: error: No executable program specified for task {missing[0]} in {self.path}"
            )
        return out


def parse_multi_prog(path: str, text: str) -> MultiProg:
    import shlex

    lines: list[tuple[list[int] | None, list[str]]] = []
    seen: set[int] = set()
    for number, raw in _logical_lines(text):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise CommandError(f"{path}:{number}: {e}") from None
        if len(words) < 2:
            raise CommandError(f"{path}:{number}: a line needs task ranks and a program")
        ranks = None if words[0] == "*" else _ranks(words[0], path, number)
        for task in ranks or []:
            if task in seen:
                raise CommandError(f"{path}:{number}: task {task} is named twice")
            seen.add(task)
        lines.append((ranks, words[1:]))
    if not lines:
        raise CommandError(f"{path}: no program in the multi-prog file")
    return MultiProg(path, lines)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with a trailing backslash joined to the next (Slurm's continuation), each
    numbered by its first physical line."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        if pending is not None:
            number, raw = pending[0], pending[1] + " " + raw.lstrip()
            pending = None
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending = (number, stripped[:-1].rstrip())
            continue
        out.append((number, raw))
    if pending is not None:
        out.append(pending)
    return out


def _ranks(text: str, path: str, number: int) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (dash and int(hi) < int(lo)):
            raise CommandError(f"{path}:{number}: invalid task ranks {text!r}")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def _expand(arg: str, task: int, offset: int) -> str:
    if "%" not in arg:
        return arg
    out, i = [], 0
    while i < len(arg):
        c = arg[i]
        if c == "%" and i + 1 < len(arg) and arg[i + 1] in "to%":
            out.append({"t": str(task), "o": str(offset), "%": "%"}[arg[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
