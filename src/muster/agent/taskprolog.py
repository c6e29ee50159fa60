"""A task's prolog (``TaskProlog`` in the configuration, then ``srun --task-prolog``), run in
the task's own process just before it becomes the user's command: what it prints shapes the
task, as Slurm documents it (srun(1), slurm.conf(5) TaskProlog):

* ``export NAME=value``: the task gets ``NAME`` set to ``value``;
* ``unset NAME``: the task loses ``NAME``;
* ``print TEXT``: ``TEXT`` goes to the task's standard output;
* any other line is ignored.

The prolog runs as the task's user, in its directory, with the task's environment
(``SLURM_TASK_PID`` included) and its standard error; a prolog that cannot run or fails
leaves the task as it was (its exit status is not the task's). ``apply`` is pure.
"""

from __future__ import annotations

import os

__all__ = ["apply", "run"]


def apply(output: str, env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The task's environment after the prolog's ``output``, and the lines it prints."""
    env = dict(env)
    printed: list[str] = []
    for line in output.splitlines():
        word, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if word == "export" and "=" in rest:
            name, _, value = rest.partition("=")
            if name.strip():
                env[name.strip()] = value
        elif word == "unset" and rest:
            env.pop(rest, None)
        elif word == "print":
            printed.append(rest)
    return env, printed


def run(program: str, env: dict[str, str]) -> dict[str, str]:
    """Run ``program`` (in the forked task, before its exec) and apply what it printed; the
    lines it ``print``s are written to the task's standard output (fd 1)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the prolog's own process
        try:
            os.close(read_end)
            os.dup2(write_end, 1)
            os.close(write_end)
            os.execve(program, [program], env)
        finally:
            os._exit(127)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    env, printed = apply(b"".join(chunks).decode(errors="replace"), env)
    for text in printed:
        os.write(1, (text + "\n").encode(errors="replace"))
    return env
