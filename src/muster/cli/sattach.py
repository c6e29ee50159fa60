"""sattach: attach to a running job step's I/O, as Slurm's sattach(1) does.

``sattach [options] <jobid.stepid>`` asks the controller for a *watch* of the step
(``POST /v1/jobs/N/steps/S/watch``: only the job's user, root and SlurmUser get one), then
opens a stream to each of the step's nodes (``/v1/steps/watch``, ``agent.stepwatch``) beside
the step's own srun, which keeps its own stream. What the tasks write from then on is
printed (stdout to stdout, stderr to stderr); what sattach reads on its stdin goes to the
tasks that take input (``/v1/steps/watch_stdin``; its end leaves their stdin open). It exits
0 once the step has ended on every node, or at an interrupt (detaching; the step goes on).

Options, as the man page gives them: ``--input-filter``, ``--output-filter``,
``--error-filter`` (one task id each), ``-l/--label`` (``N: `` before each line),
``--layout`` (print the step's task layout and exit, without attaching), ``-Q/--quiet``
(no informational messages), ``-v``, ``-V``, ``-h``, ``-u/--usage``.

Where Slurm's sattach differs: its stepd replays a cache of recent output to a new client;
muster's agent sends only what is written after the attach.
"""

from __future__ import annotations

import os
import select
import sys
from json import dumps
from urllib.parse import quote

from muster.cli.common import CommandError, argv_or_sys, info_text, report, usage_error
from muster.cli.stepio import write_all
from muster.client.controller import connect, connect_message
from muster.slurm.argscan import NO_ARG, Opt, OptionError, OptionTable, getopt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from muster.protocol.stream import ChunkedSender, StreamClient

PROG = "sattach"

OPTIONS: tuple[Opt, ...] = (
    Opt("input-filter"),
    Opt("output-filter"),
    Opt("error-filter"),
    Opt("label", "l", NO_ARG),
    Opt("layout", None, NO_ARG),
    Opt("quiet", "Q", NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", "u", NO_ARG),
)

USAGE = "Usage: sattach [options] <jobid.stepid>\n"

HELP = """\
Usage: sattach [options] <jobid.stepid>
      --input-filter=taskid  send stdin to only the specified task
      --output-filter=taskid only print stdout from the specified task
      --error-filter=taskid  only print stderr from the specified task
  -l, --label        prepend task number to lines of stdout & stderr
      --layout       print task layout info and exit (does not attach to tasks)
  -Q, --quiet        quiet mode (suppress informational messages)
  -v, --verbose      verbose mode (multiple -v's increase verbosity)
  -V, --version      print the Slurm version and exit

Help options:
  -h, --help         print this help message
  -u, --usage        print a brief usage message
"""


class UsageError(CommandError):
    """A command line without one ``jobid.stepid``: the error, then Slurm's usage line."""


class Request:
    """A parsed command line."""

    __slots__ = ("job_id", "step_id", "input_filter", "output_filter", "error_filter", "label", "layout", "quiet")

    def __init__(self) -> None:
        self.job_id = 0
        self.step_id = 0
        self.input_filter: int | None = None
        self.output_filter: int | None = None
        self.error_filter: int | None = None
        self.label = False
        self.layout = False
        self.quiet = False


def parse_args(argv: list[str]) -> Request | str:
    """The request, or the text --help/--usage/--version asks for. Raises ``OptionError``
    (getopt's complaints) and ``CommandError``."""
    parsed, operands = getopt(argv, OptionTable(OPTIONS))
    text = info_text({o.key for o, _ in parsed}, HELP, USAGE)
    if text is not None:
        return text
    req = Request()
    for opt, value in parsed:
        if opt.key in ("input-filter", "output-filter", "error-filter"):
            text_value = str(value).strip()
            if not (text_value.isascii() and text_value.isdigit()):
                raise CommandError(f'Invalid numeric value "{value}" for {opt.key}.')
            setattr(req, opt.key.replace("-", "_"), int(text_value))
        elif opt.key in ("label", "layout", "quiet"):
            setattr(req, opt.key, True)
    if len(operands) != 1:
        raise UsageError("too many parameters")  # Slurm's words for none as well
    job_text, dot, step_text = operands[0].partition(".")
    if not (dot and job_text.isascii() and job_text.isdigit() and step_text.isascii() and step_text.isdigit()):
        raise UsageError("Failed to parse stepid from command line options")
    req.job_id, req.step_id = int(job_text), int(step_text)
    return req


def layout_text(answer: dict[str, Any]) -> str:
    """``--layout``: the step's tasks per node, in Slurm's words."""
    from muster.core.hostlist import compress

    names = [str(n["name"]) for n in answer["nodes"]]
    tasks = [list(t) for t in answer["tasks"]]
    lines = [
        "Job step layout:",
        f"\t{sum(len(t) for t in tasks)} tasks, {len(names)} nodes ({compress(names)})",
        "",
    ]
    for i, (name, mine) in enumerate(zip(names, tasks, strict=True)):
        lines.append(f"\tNode {i} ({name}), {len(mine)} task(s): " + "".join(f"{t} " for t in mine))
    return "\n".join(lines) + "\n"


class Attach:
    """The streams to the step's nodes and sattach's stdin, around one ``select``."""

    def __init__(self, req: Request, answer: dict[str, Any], tls_ca: str | None) -> None:
        self.req = req
        self.answer = answer
        self.tls_ca = tls_ca
        self.nodes = [dict(n) for n in answer["nodes"]]
        self.tasks = {str(n["name"]): list(t) for n, t in zip(answer["nodes"], answer["tasks"], strict=True)}
        ntasks = sum(len(t) for t in answer["tasks"])
        self.width = len(str(max(ntasks - 1, 0)))
        self.timeout = float(answer.get("message_timeout") or 10)
        self.conns: dict[str, StreamClient] = {}
        self.inputs: dict[str, ChunkedSender] = {}
        self.partial: dict[tuple[int, int], bytes] = {}
        self.in_open = True
        self.ready: set[str] = set()  # nodes whose watch has begun (its ``m`` frame)

    def note(self, text: str) -> None:
        if not self.req.quiet:
            sys.stderr.write(f"{PROG}: {text}\n")

    def open(self) -> int:
        """Connect to every node; the number of nodes that could not be watched."""
        from muster.protocol.stream import StreamClient, StreamError

        body = dumps({"watch": self.answer["watch"], "sig": self.answer["sig"]}).encode()
        failed = 0
        for node in self.nodes:
            name = str(node["name"])
            try:
                conn = StreamClient.connect((str(node["addr"]), int(node["port"])), self.timeout, self._tls(name))
                conn.send("/v1/steps/watch", body)
            except StreamError as e:
                sys.stderr.write(f"{PROG}: error: {name}: {e}\n")
                failed += 1
                continue
            self.conns[name] = conn
        return failed

    def _tls(self, name: str) -> tuple[str, str] | None:
        return (self.tls_ca, name) if self.tls_ca else None

    def run(self) -> int:
        """Relay until every node's stream has ended; the exit status."""
        from muster.protocol.stream import StreamError

        rc = 0
        in_fd = sys.stdin.fileno() if sys.stdin is not None else -1
        while self.conns:
            watched = {conn.fileno(): name for name, conn in self.conns.items()}
            # stdin is read once every node watches: what the tasks answer to it is then seen
            taking = self.in_open and in_fd >= 0 and self.ready >= set(self.conns)
            fds = list(watched) + ([in_fd] if taking else [])
            try:
                ready, _, _ = select.select(fds, [], [])
            except (OSError, ValueError):
                self.in_open = False
                continue
            for fd in ready:
                if fd == in_fd:
                    self._stdin(in_fd)
                    continue
                name = watched[fd]
                conn = self.conns[name]
                try:
                    frames = conn.read()
                except StreamError as e:
                    del self.conns[name]
                    if e.status == 404 and "no route" in str(e):
                        sys.stderr.write(f"{PROG}: error: musterd on {name} is too old for sattach\n")
                    elif e.status == 404:
                        self.note(f"Node {name}: no tasks running")
                        continue
                    else:
                        sys.stderr.write(f"{PROG}: error: {name}: {e}\n")
                    rc = 1
                    continue
                done = self._frames(name, frames)
                if done or conn.eof:
                    conn.close()
                    del self.conns[name]
                if conn.eof and not done:  # its agent stops (a restart): the step goes on there
                    sys.stderr.write(f"{PROG}: error: {name}: musterd ended the stream before the step ended\n")
                    rc = 1
        self._flush_all()
        self._close_inputs()
        return rc

    def _frames(self, name: str, frames: list[tuple[bytes, int, bytes]]) -> bool:
        done = False
        for kind, task, payload in frames:
            if kind == b"m":
                self.ready.add(name)
            elif kind == b"o" and self.req.output_filter in (None, task):
                self._write(1, task, payload)
            elif kind == b"e" and self.req.error_filter in (None, task):
                self._write(2, task, payload)
            elif kind == b"x":
                self._flush(task)
            elif kind == b"d":
                done = True
        return done

    def _write(self, fd: int, task: int, data: bytes) -> None:
        if not self.req.label:
            write_all(fd, data)
            return
        buf = self.partial.pop((task, fd), b"") + data
        end = buf.rfind(b"\n")
        if end < 0:
            self.partial[(task, fd)] = buf
            return
        if end + 1 < len(buf):
            self.partial[(task, fd)] = buf[end + 1 :]
        write_all(fd, self._labelled(task, buf[: end + 1]))

    def _labelled(self, task: int, data: bytes) -> bytes:
        prefix = f"{task:>{self.width}}: ".encode()
        lines = data.split(b"\n")
        tail = lines.pop()
        out = b"".join(prefix + line + b"\n" for line in lines)
        return out + (prefix + tail if tail else b"")

    def _flush(self, task: int) -> None:
        for fd in (1, 2):
            buf = self.partial.pop((task, fd), b"")
            if buf:
                write_all(fd, self._labelled(task, buf))

    def _flush_all(self) -> None:
        for task, _fd in list(self.partial):
            self._flush(task)

    # --- stdin ----------------------------------------------------------------------------

    def _stdin(self, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            self.in_open = False
            self._close_inputs()
            return
        for node in self.nodes:
            name = str(node["name"])
            wanted = self.req.input_filter
            if name not in self.conns or (wanted is not None and wanted not in self.tasks[name]):
                continue
            sender = self.inputs.get(name) or self._open_input(node)
            if sender is None:
                continue
            try:
                sender.send(data)
            except OSError as e:
                sys.stderr.write(f"{PROG}: error: {name}: cannot forward stdin: {e}\n")
                self.inputs.pop(name, None)

    def _open_input(self, node: dict[str, Any]) -> ChunkedSender | None:
        from muster.protocol.stream import ChunkedSender, StreamError

        name = str(node["name"])
        path = f"/v1/steps/watch_stdin?watch={quote(self.answer['watch'], safe='')}&sig={self.answer['sig']}"
        if self.req.input_filter is not None:
            path += f"&task={self.req.input_filter}"
        try:
            sender = ChunkedSender((str(node["addr"]), int(node["port"])), path, self.timeout, self._tls(name))
        except StreamError as e:
            sys.stderr.write(f"{PROG}: error: {name}: cannot forward stdin: {e}\n")
            return None
        self.inputs[name] = sender
        return sender

    def _close_inputs(self) -> None:
        for sender in self.inputs.values():
            sender.finish()
        self.inputs.clear()


def run(req: Request) -> int:
    from muster.protocol.client import ApiError, ConnectError

    ctl = connect(PROG)
    try:
        answer = ctl.post(f"/v1/jobs/{req.job_id}/steps/{req.step_id}/watch", {})
    except ConnectError as e:
        raise CommandError(f"Could not get job step info: {connect_message(e)}") from None
    except ApiError as e:
        if e.status == 404 and e.code not in ("invalid_job_id", "not_found"):
            raise CommandError("the controller is too old for sattach") from None
        raise CommandError(f"Could not get job step info: {e.message}") from None
    if req.layout:
        sys.stdout.write(layout_text(answer))
        return 0
    attach = Attach(req, answer, ctl.settings.tls_ca)
    failed = attach.open()
    if failed and not attach.conns:
        return 1
    try:
        rc = attach.run()
    except KeyboardInterrupt:  # detach: the step goes on with its srun
        attach._flush_all()
        return 0
    return max(rc, 1 if failed else 0)


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv))
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        return run(req)
    except OptionError as e:
        return usage_error(PROG, str(e))
    except CommandError as e:
        rc = report(PROG, e)
        if isinstance(e, UsageError):
            sys.stdout.write(USAGE)
        return rc


__all__ = ["HELP", "USAGE", "layout_text", "main", "parse_args"]
