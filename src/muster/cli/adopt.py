"""``muster-adopt``: ssh sessions into a job's node land in the job's cgroup, and users
without a job there are refused (pam_slurm_adopt's role, run by ``pam_exec.so``).

In sshd's PAM stack (docs/containment.md)::

    account  required  pam_exec.so  stdout /usr/bin/muster-adopt
    session  required  pam_exec.so  stdout /usr/bin/muster-adopt

pam_exec runs it as root with ``PAM_USER`` and ``PAM_TYPE`` set. For ``account`` and
``open_session`` it asks the node's agent (its local socket, ``AgentSocketDir/musterd-*.sock``)
to move the calling process (pam_exec's parent, the session's sshd; ``--pid`` to name
another) into the newest running job of ``PAM_USER`` on this node (``agent.adopt``), and
exits 0; the shell sshd then starts, and all it forks, belong to the job: limited, frozen,
signalled and killed with it. A user with no job here is refused: ``Access denied by
muster-adopt: you have no active jobs on this node`` on stdout (pam_exec's ``stdout``
shows it to the user) and exit 1, so PAM denies the login. root, ``SlurmUser``,
``AdminUsers`` and the users of ``--allow=USER[,USER...]`` are let through without a job
(and without adoption). Other ``PAM_TYPE`` values (``close_session``...) exit 0. A
failure to ask (no agent, a bad configuration) refuses, saying why: PAM fails closed.
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import CommandError, argv_or_sys
from muster.client.settings import load_settings
from muster.client.sysenv import join

PROG = "muster-adopt"
DENIED = "Access denied by muster-adopt: you have no active jobs on this node"
CHECKED = ("account", "open_session")
USAGE = f"usage: {PROG} [--allow=USER[,USER...]] [--node=NAME] [--pid=PID]  (env PAM_USER, PAM_TYPE)\n"


def _options(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if key in ("--allow", "--node", "--pid") and eq:
            out[key[2:]] = value
        elif arg in ("-h", "--help"):
            out["help"] = ""
        else:
            raise CommandError(f"unknown option {arg!r}\n{USAGE.rstrip()}")
    if "pid" in out and not out["pid"].isdigit():
        raise CommandError(f"--pid={out['pid']}: not a process id")
    return out


def _sockets(directory: str | None, node: str | None) -> list[str]:
    if not directory:
        raise CommandError("AgentSocketDir is not set in the configuration: cannot find the node's agent")
    wanted = f"musterd-{node}.sock" if node else None
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("musterd-") and n.endswith(".sock"))
    except OSError as exc:
        raise CommandError(f"cannot read AgentSocketDir {directory}: {exc.strerror or exc}") from None
    names = [n for n in names if wanted is None or n == wanted]
    if not names:
        raise CommandError(f"no node agent's socket in {directory}" + (f" for node {node}" if node else ""))
    return [join(directory, n) for n in names]


def adopt(user: str, pid: int, sockets: list[str]) -> int | None:
    """Ask each agent in turn; the job ``pid`` now belongs to, or None."""
    from muster.protocol.client import ApiError, ConnectError, request

    errors = []
    for path in sockets:
        try:
            answer = request("POST", "/v1/adopt", {"user": user, "pid": pid}, unix_path=path, timeout=10.0)
        except (ApiError, ConnectError, OSError, ValueError) as exc:
            errors.append(f"{os.path.basename(path)}: {getattr(exc, 'message', None) or exc}")
            continue
        if isinstance(answer, dict) and answer.get("job_id") is not None:
            return int(answer["job_id"])
    if errors and len(errors) == len(sockets):
        raise CommandError("cannot ask the node's agent: " + "; ".join(errors))
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        opts = _options(argv_or_sys(argv))
        if "help" in opts:
            sys.stdout.write(USAGE)
            return 0
        kind = os.environ.get("PAM_TYPE", "")
        user = os.environ.get("PAM_USER", "")
        if kind not in CHECKED:
            return 0
        if not user:
            raise CommandError("PAM_USER is not set (run it from pam_exec.so)")
        settings = load_settings(PROG)
        trusted = {"root", settings.settings.get("SlurmUser") or "root"}
        trusted.update(u for u in (settings.settings.get("AdminUsers") or "").split(",") if u)
        trusted.update(u for u in opts.get("allow", "").split(",") if u)
        if user in trusted:
            return 0
        pid = int(opts.get("pid") or os.getppid())
        job = adopt(user, pid, _sockets(settings.agent_socket_dir, opts.get("node")))
    except CommandError as exc:
        sys.stdout.write(f"Access denied by {PROG}: {exc}\n")
        return 1
    if job is None:
        sys.stdout.write(DENIED + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
