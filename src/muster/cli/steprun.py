"""srun's side of a running step: connect to the nodes, relay output, stdin and signals,
collect the tasks' ends, and turn them into srun's exit status and messages.

``StepRun(run, job_id, answer).run()`` returns ``(rc, exit_code, signal, aborted)``:
srun's exit status, the step's exit code and signal for the controller's record, and
whether the user aborted it. The rules (Slurm's) are in ``muster.cli.srun``'s docstring.

A node's stream that ends without its ``d`` frame after the step started there (its agent
restarting, say) is resumed: srun asks that node's agent again (``/v1/steps/attach``, every
0.2 s for up to SlurmdTimeout) with the number of the step's log frames it has had from it
(``o``, ``e``, ``x`` and ``m`` ``aborted``), and gets the rest: no line lost or repeated.

Everything happens in one thread around one ``select``: node streams, srun's stdin, and a
self-pipe that the signal handlers write to (``_signal.set_wakeup_fd``), so that a signal
is acted on at once and never in the middle of writing output.
"""

from __future__ import annotations

import _signal
import os
import select
import time

from muster.cli.stepio import Link, RawTerminal, StepNode, local_path, noop, terminal_size, write_all
from muster.cli.stepverdict import await_verdict, failure_lines, oom_line
from muster.core.arrays import format_ranges
from muster.core.launchtree import DEFAULT_WIDTH, depth, subtrees
from muster.protocol.client import ApiError, ConnectError, request
from muster.protocol.stepcred import attach_token
from muster.protocol.stream import ChunkedSender, FrameDecoder, StreamClient, StreamError
from muster.protocol.wirejson import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "srun"
FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGALRM")


def _object(text: str | bytes) -> dict[str, Any]:
    """A JSON object (a relay's frame, the controller's grant); ``ValueError`` as for bad
    JSON when it is another value."""
    value = loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object: {text[:80]!r}")
    return value


def _note(text: str) -> None:
    write_all(2, f"{PROG}: {text}\n".encode())


class StepRun:
    def __init__(self, run: Any, job_id: int, answer: dict[str, Any], ctl: Any = None) -> None:
        self.opts = run
        self.ctl = ctl  # the controller, asked for its verdict when a node is lost
        self.job_id = job_id
        self.answer = answer
        step = answer["step"]
        self.step_id = int(step["step_id"])
        # what names the step's stream on every node before any launch answers (``_reattach``)
        self.attach_token = attach_token(str(answer.get("sig") or ""))
        self.kill_wait = float(answer.get("kill_wait") or 30)
        self.slurmd_timeout = float(answer.get("slurmd_timeout") or 300)
        self.lost: list[StepNode] = []
        tls_ca = ctl.settings.tls_ca if ctl is not None else None
        self.nodes = [StepNode(i, list(t), tls_ca) for i, t in zip(answer["nodes"], step["tasks"], strict=True)]
        self.by_name = {n.name: n for n in self.nodes}
        if getattr(run, "container", None):  # an agent that cannot would run the tasks unconfined
            from muster.cli.containeropts import check_agents

            check_agents(answer["nodes"])
        # the launch tree: srun contacts at most TreeWidth heads, each relays to its subtree
        self.tree_width = int(answer.get("tree_width") or DEFAULT_WIDTH)
        self.msg_timeout = float(answer.get("message_timeout") or 10)
        self.links: list[Link] = []
        self.body: dict[str, Any] | None = None  # the launch, as every head gets it
        self.node_of = {t: n.name for n in self.nodes for t in n.tasks}
        self.ntasks = sum(len(n.tasks) for n in self.nodes)
        # --multi-prog: each task's own command line (CommandError if one has none)
        self.task_argv = run.multi_prog.argv_for(self.ntasks) if run.multi_prog is not None else None
        het = getattr(run, "het", None) or {}  # a het step: ranks run across its components
        self.first, self.width = het.get("first", 0), len(str(max(het.get("total", 0), self.ntasks, 1) - 1))
        self.partial: dict[tuple[int, int], bytes] = {}
        self.exits: dict[int, tuple[int, int]] = {}
        self.usage: dict[int, tuple[int, float, float, str]] = {}  # task -> rss KB, user, sys, node
        self.oom_tasks: dict[int, int] = {}  # task -> OOM kills in its cgroup (``agent.memacct``)
        self.oom_nodes: dict[str, int] = {}  # node -> its tasks' OOM kills (slurmstepd's line)
        self.stopped: set[int] = set()  # tasks that ended by the kill srun itself asked for
        self.aborted = False
        self.abort_noted = False
        self.killing = False
        self.first_exit: float | None = None
        self.interrupts: list[float] = []
        self.stdin_targets: set[int] | None = None
        self.stdin_open = False
        self.pending_stdin: list[bytes] = []
        self.wake_r = -1
        # srun's own ends of the tasks' stdin, stdout and stderr: its terminal, or the files
        # it opens itself (``_local_files``)
        self.in_fd, self.out_fd, self.err_fd = 0, 1, 2
        self.io = {"stdin": run.stdin, "stdout": run.stdout, "stderr": run.stderr}
        self.opened: list[int] = []

    # --- launch ---------------------------------------------------------------------------

    def _launch_body(self, srun_port: int, launch_host: str) -> dict[str, Any]:
        run = self.opts
        umask = os.umask(0)
        os.umask(umask)
        return {
            "grant": self.answer["grant"],
            "sig": self.answer["sig"],
            "argv": run.argv,
            "env": run.env,
            "cwd": run.cwd,
            "umask": f"{umask:04o}",
            "torch_env": run.torch_env,
            "launch_host": launch_host,
            "srun_port": srun_port,
            "stdin": self._stdin_spec(),
            "stdout": self.io["stdout"],
            "stderr": self.io["stderr"],
            "preserve_env": getattr(run, "preserve_env", None) or None,
            "open_mode": run.open_mode,
            "cpu_bind": run.cpu_bind,
            "pty": run.pty,
            "pty_size": terminal_size() if run.pty else None,
            "task_argv": None if self.task_argv is None else {str(t): a for t, a in self.task_argv.items()},
            "kill_wait": self.kill_wait,
            "het": getattr(run, "het", None),
            "rlimits": getattr(run, "rlimits", None),  # the soft limits that propagate
            "container": getattr(run, "container", None),  # the tasks' container (cli.containeropts)
            "task_prolog": getattr(run, "task_prolog", None),  # srun --task-prolog (agent.taskprolog)
            "task_epilog": getattr(run, "task_epilog", None),  # srun --task-epilog (agent.stepd)
        }

    def _stdin_spec(self) -> dict[str, Any]:
        """How tasks get stdin. Streaming starts only if srun's stdin has something to give:
        when it is at its end already (``/dev/null``, a batch script's), tasks get nothing."""
        spec = dict(self.io["stdin"] or {"mode": "stream"})
        if spec.get("mode") != "stream":
            return spec
        try:
            ready, _, _ = select.select([self.in_fd], [], [], 0)
        except (OSError, ValueError):
            return {"mode": "none"}
        if ready:
            try:
                data = os.read(self.in_fd, 65536)
            except OSError:
                data = b""
            if not data:
                return {"mode": "none"}
            self.pending_stdin.append(data)
        self.stdin_open = True
        tasks = spec.get("tasks")
        self.stdin_targets = set(tasks) if tasks is not None else None
        return spec

    def _local_files(self) -> None:
        """Slurm's rule: a file pattern naming no task or node (no ``%t``, ``%n``, ``%N``) is
        one file for the whole step, which srun itself reads (stdin, sent to every task) or
        writes (every task's output, in the order it comes); the nodes open the per-task
        ones. Raises ``OSError`` when srun cannot open one."""

        run = self.opts
        if run.pty:
            return
        grant = _object(self.answer["grant"]) if isinstance(self.answer.get("grant"), str) else {}
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if run.open_mode == "append" else os.O_TRUNC)
        opened: dict[str, int] = {}
        for name in ("stdin", "stdout", "stderr"):
            path = local_path(self.io[name], grant, run.cwd)
            if path is None:
                continue
            fd = opened.get(path)
            if fd is None:
                fd = os.open(path, os.O_RDONLY if name == "stdin" else flags, 0o666)
                self.opened.append(fd)
                opened[path] = fd
            if name == "stdin":
                self.in_fd = fd
            elif name == "stdout":
                self.out_fd = fd
                if self.io["stderr"] is None:
                    self.err_fd = fd  # stderr follows stdout, as the nodes' files do
            else:
                self.err_fd = fd
            self.io[name] = {"mode": "stream"}

    def _gpu_bind_note(self) -> None:
        """``--gpu-bind=verbose,...``: each task's binding on stderr (``core.gpubind``)."""
        bind = str((getattr(self.opts, "step", None) or {}).get("gpu_bind") or "")
        if not bind.lower().startswith("verbose"):
            return
        from muster.core.gpubind import verbose_line

        grant = _object(self.answer["grant"]) if isinstance(self.answer.get("grant"), str) else {}
        step = grant.get("step") or {}
        lines = []
        for node_gpus, tasks in zip(step.get("gpus") or [], step.get("task_gpus") or [], strict=False):
            for local, mine in enumerate(tasks):
                if node_gpus:
                    lines.append(verbose_line(list(node_gpus), list(mine), local) + "\n")
        write_all(self.err_fd, "".join(lines).encode())

    def _connect(self) -> None:
        """Contact the head of each subtree (``core.launchtree``) with the launch and the
        names of the nodes it relays it to (``agent.steptree``)."""
        groups = subtrees(self.nodes, self.tree_width)
        if self.opts.verbose:
            heads = ",".join(g[0].name for g in groups)
            _note(
                f"launch tree: TreeWidth={self.tree_width}, {depth(len(self.nodes), self.tree_width)} level(s), heads {heads}"
            )
        begun: list[StreamClient | StreamError] = []
        for group in groups:  # every head's TLS handshake under way before the first is finished
            try:
                begun.append(StreamClient.begin((group[0].addr, group[0].port), self.msg_timeout, group[0].tls))
            except StreamError as e:
                begun.append(e)
        for group, first in zip(groups, begun, strict=True):
            self._open(group, first)

    def _open(self, group: list[StepNode], first: StreamClient | StreamError | None = None) -> None:
        """Send the launch to ``group``'s head (over ``first``, begun by ``_connect``); a head
        that cannot be reached fails alone, and the next node of the group takes its place
        (as Slurm's forwarding does)."""
        for i, head in enumerate(group):
            try:
                if i == 0 and first is not None:
                    if isinstance(first, StreamError):
                        raise first
                    conn = first
                    conn.finish()
                else:
                    conn = StreamClient.connect((head.addr, head.port), self.msg_timeout, head.tls)
                if self.body is None:
                    # The first connection's own address and port are the srun address the
                    # tasks see (SLURM_SRUN_COMM_HOST/PORT, SLURM_LAUNCH_NODE_IPADDR).
                    self.body = self._launch_body(conn.local_port, str(conn.local_addr))
                    self.body["tree_width"], self.body["message_timeout"] = self.tree_width, self.msg_timeout
                conn.send("/v1/steps/launch", dumps({**self.body, "tree": [n.name for n in group[i + 1 :]]}).encode())
            except StreamError as e:
                self._node_failed(head, str(e))
                continue
            self.links.append(Link(conn, group[i:], time.monotonic() + self.msg_timeout))
            if self.opts.verbose:
                for node in group[i:]:
                    _note(
                        f"launching StepId={self.job_id}.{self.step_id} on host {node.name}, "
                        f"{len(node.tasks)} tasks: {format_ranges(node.tasks)}"
                    )
            return

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> tuple[int, int, int, bool]:
        r, w = os.pipe()
        os.set_blocking(w, False)
        os.set_blocking(r, False)
        self.wake_r = r
        old_wakeup = _signal.set_wakeup_fd(w)
        signums = [_signal.SIGINT] + [getattr(_signal, n) for n in FORWARDED if hasattr(_signal, n)]
        previous = {s: _signal.signal(s, noop) for s in signums}
        raw = RawTerminal() if self.opts.pty else None
        try:
            try:
                self._local_files()
            except OSError as e:
                _note(f"error: Could not open {e.filename}: {e.strerror}")
                for node in self.nodes:
                    node.done = True
                    for t in node.tasks:
                        self.exits[t] = (1, 0)
                return self._outcome()
            self._gpu_bind_note()
            self._connect()
            if raw is not None:
                raw.enter()  # keystrokes (Ctrl-C included) go to task 0's terminal
            self._loop()
            if self.lost and self.ctl is not None:
                self._await_verdict()
        finally:
            if raw is not None:
                raw.leave()
            for s, h in previous.items():
                _signal.signal(s, h)
            _signal.set_wakeup_fd(old_wakeup)
            os.close(r)
            os.close(w)
            for fd in self.opened:
                os.close(fd)
            for link in self.links:
                if not link.closed:
                    link.conn.close()
            for node in self.nodes:
                if node.stdin is not None:
                    node.stdin.finish()
        return self._outcome()

    def _loop(self) -> None:
        while any(not n.done for n in self.nodes):
            watch: list[Any] = [self.wake_r]
            by_fd = {link.conn.fileno(): link for link in self.links if not link.closed}
            watch.extend(by_fd)
            if self.stdin_open and self._stdin_ready():
                watch.append(self.in_fd)
            now = time.monotonic()
            ends = [link.deadline for link in by_fd.values() if not link.answered]
            ends.extend(n.retry_at for n in self.nodes if n.retry_at is not None)
            if self.opts.wait and self.first_exit is not None and not self.killing:
                ends.append(self.first_exit + self.opts.wait)
            timeout = max(0.0, min(ends) - now) if ends else None
            try:
                ready, _, _ = select.select(watch, [], [], timeout)
            except InterruptedError:
                continue
            if self.wake_r in ready:
                self._signals()
            if self.in_fd in ready:
                self._read_stdin()
            for fd in ready:
                link = by_fd.get(fd)
                if link is not None and not link.closed:
                    self._read_link(link)
            now = time.monotonic()
            for link in by_fd.values():
                if not link.closed and not link.answered and now >= link.deadline:
                    self._drop(link, f"no answer within {self.msg_timeout:g} s", judge=True)
            for node in self.nodes:
                if node.retry_at is not None and now >= node.retry_at:
                    self._reattach(node)
            if (
                self.opts.wait
                and self.first_exit is not None
                and not self.killing
                and time.monotonic() >= self.first_exit + self.opts.wait
            ):
                _note(f"error: First task exited {self.opts.wait:g}s ago")
                self._task_status()
                self._kill_step(hard=True)
        for key in list(self.partial):
            self._flush(*key)

    def _read_link(self, link: Link) -> None:
        try:
            frames = link.conn.read()
        except StreamError as e:
            # An answer with an error status comes from a live agent that refused the step
            # (an expired grant, say): nothing for the controller to judge.
            self._drop(link, str(e), judge=not e.status, broken=not e.status)
            return
        if link.attach and link.answered and not link.head.token:
            link.head.token = self.attach_token  # a launch resumed before it answered
        own = []
        for kind, task, payload in frames:
            if kind != b"t":
                own.append((kind, task, payload))
                continue
            name, _, inner = payload.partition(b"\n")
            node = self.by_name.get(name.decode(errors="replace"))
            if node is not None and not node.done:
                self._read_node(node, FrameDecoder().feed(inner))
        if own and not link.head.done:
            self._read_node(link.head, own)
        if link.conn.eof:
            self._drop(link, "connection closed before its tasks ended", judge=True)

    def _drop(self, link: Link, why: str, judge: bool, broken: bool = False) -> None:
        """The stream to ``link``'s head failed: the head for ``why``; once it had answered,
        the nodes below whose part is not over too, their relay being gone. A stream that
        broke (not a refusal) after its nodes' tasks started is resumed: each node is asked
        again, directly, for what srun has not had (``_reattach``); so is a lone node's
        launch whose connection broke (``broken``) before it answered: its agent may have
        died between starting the tasks and saying so, and the next agent has them (or
        answers that it has no such step, and the node fails)."""
        link.closed = True
        link.conn.close()  # a silent head's socket too: a launch over many must not run out of files
        head = link.head
        if broken and not link.attach and not link.answered and len(link.nodes) == 1 and not head.done:
            self._resume(head, why)
            return
        if link.attach:
            retry = judge or link.conn.status == 503  # refused only while that agent stops
            if not head.done:
                if retry:
                    self._resume(head, why)
                else:
                    self._node_failed(head, why, judge=False)
            return
        if link.answered and judge and any(n.token for n in link.nodes if not n.done):
            for node in link.nodes:
                if node.done:
                    continue
                if node.token:
                    self._resume(node, why)
                else:
                    self._node_failed(node, f"lost with its relay {head.name} ({why})", judge=False)
            return
        if not head.done:
            self._node_failed(head, why, judge)
        if not link.answered:  # the head failed alone: the next node takes its place
            self._open(link.nodes[1:])
            return
        for node in link.nodes[1:]:
            if not node.done:
                self._node_failed(node, f"lost with its relay {head.name} ({why})", judge=False)

    def _resume(self, node: StepNode, why: str) -> None:
        """The node's stream broke (its agent restarting, say): ask again until SlurmdTimeout."""
        now = time.monotonic()
        if node.until is None:
            node.until = now + self.slurmd_timeout
            if self.opts.verbose:
                _note(f"{node.name}: stream lost ({why}); reconnecting")
        node.why = why
        node.retry_at = now + 0.2

    def _reattach(self, node: StepNode) -> None:
        """One try at the node's stream again, after the ``seen`` frames of its log."""
        node.retry_at = None
        if node.done:
            return
        if node.until is not None and time.monotonic() > node.until:
            node.until = None
            self._node_failed(node, node.why, judge=True)
            return
        token = node.token or self.attach_token
        body = {"job_id": self.job_id, "step_id": self.step_id, "token": token, "frames": node.seen}
        try:
            conn = StreamClient.connect((node.addr, node.port), self.msg_timeout, node.tls)
            conn.send("/v1/steps/attach", dumps(body).encode())
        except StreamError:
            node.retry_at = time.monotonic() + 0.25
            return
        self.links.append(Link(conn, [node], time.monotonic() + self.msg_timeout, attach=True))

    def _read_node(self, node: StepNode, frames: list[tuple[bytes, int, bytes]]) -> None:
        failed: list[tuple[int, int, int]] = []
        node.until = None  # it answers: a later break has its own SlurmdTimeout
        for kind, task, payload in frames:
            if kind in (b"o", b"e", b"x"):  # frames of the step's log: counted to resume
                node.seen += 1
            if kind == b"o" or kind == b"e":
                self._output(kind, task, payload)
            elif kind == b"x":
                info = _object(payload)
                code, sig = int(info.get("code") or 0), int(info.get("signal") or 0)
                self.exits[task] = (code, sig)
                if "rss" in info:
                    self.usage[task] = (
                        int(info["rss"]),
                        float(info.get("user") or 0),
                        float(info.get("sys") or 0),
                        node.name,
                    )
                if info.get("oom"):  # the kernel's OOM killer struck in the task's cgroup
                    self.oom_tasks[task] = int(info["oom"])
                    self.oom_nodes[node.name] = self.oom_nodes.get(node.name, 0) + int(info["oom"])
                if self.killing and sig:
                    self.stopped.add(task)
                self._flush_task(task)
                if self.first_exit is None:
                    self.first_exit = time.monotonic()
                if code or sig:
                    failed.append((task, code, sig))
            elif kind == b"m":
                info = _object(payload)
                if "aborted" in info:  # of the log too (``started``, ``failed`` are not)
                    node.seen += 1
                if info.get("token"):
                    node.token = str(info["token"])
                    if self.pending_stdin and self._targets(node):
                        self._send_stdin(node)
                if info.get("error"):
                    _note(f"error: {node.name}: {info['error']}")
                if info.get("failed"):  # reported by its relay, or its launch failed
                    self._node_failed(node, str(info["failed"]), judge=bool(info.get("judge")))
                if info.get("aborted") and not self.abort_noted:
                    # scancel, a time limit, the job's end: Slurm's srun says it this way; a
                    # time limit is the step's TIMEOUT, not a cancellation
                    self.abort_noted = True
                    self.aborted = self.aborted or info["aborted"] != "timeout"
                    _note(f"Job step aborted: Waiting up to {int(self.kill_wait) + 2} seconds for job step to finish.")
            elif kind == b"d":
                node.done = True
        if failed:
            self._report_failures(node.name, failed)
            if self.opts.kill_bad_exit and not self.killing:
                _note(f"Terminating StepId={self.job_id}.{self.step_id}")
                self._kill_step()

    def _node_failed(self, node: StepNode, why: str, judge: bool = True) -> None:
        node.done = True
        missing = [t for t in node.tasks if t not in self.exits]
        if missing:
            _note(f"error: {node.name}: {why}")
            for t in missing:
                self.exits[t] = (1, 0)
            if self.ctl is None or not judge:
                self._report_failures(node.name, [(t, 1, 0) for t in missing])
            else:
                self.lost.append(node)  # what it means is the controller's call

    def _await_verdict(self) -> None:
        """A node's agent went silent mid-step: the controller's verdict first
        (``cli.stepverdict``), then the failures."""
        names = [n.name for n in self.lost]
        down = await_verdict(self.ctl, self.job_id, names, self.slurmd_timeout, self.wake_r)
        for node in self.lost:
            if down:
                _note(f"error: Node failure on {node.name}")
            self._report_failures(node.name, [(t, 1, 0) for t in node.tasks if self.exits.get(t) == (1, 0)])

    def _report_failures(self, node: str, failed: list[tuple[int, int, int]]) -> None:
        for line in failure_lines(node, failed, set(self.oom_tasks)):
            _note(line)

    # --- output -------------------------------------------------------------------------------

    def _output(self, kind: bytes, task: int, data: bytes) -> None:
        fd = self.out_fd if kind == b"o" else self.err_fd
        if task < 0 or (self.opts.unbuffered and not self.opts.label):  # task -1: the node's own words
            write_all(fd, data)
            return
        key = (task, fd)
        buf = self.partial.pop(key, b"") + data
        end = buf.rfind(b"\n")
        if end < 0:
            if self.opts.unbuffered:
                write_all(fd, self._labelled(task, buf))
            else:
                self.partial[key] = buf
            return
        complete, rest = buf[: end + 1], buf[end + 1 :]
        if rest:
            if self.opts.unbuffered:
                complete += rest
            else:
                self.partial[key] = rest
        write_all(fd, self._labelled(task, complete))

    def _labelled(self, task: int, data: bytes) -> bytes:
        if not self.opts.label:
            return data
        prefix = f"{task + self.first:>{self.width}}: ".encode()
        lines = data.split(b"\n")
        tail = lines.pop() if not data.endswith(b"\n") else None
        out = b"".join(prefix + line + b"\n" for line in (lines[:-1] if tail is None else lines))
        if tail:
            out += prefix + tail
        return out

    def _flush(self, task: int, fd: int) -> None:
        buf = self.partial.pop((task, fd), b"")
        if buf:
            write_all(fd, self._labelled(task, buf))

    def _flush_task(self, task: int) -> None:
        for fd in {self.out_fd, self.err_fd}:
            self._flush(task, fd)

    # --- stdin --------------------------------------------------------------------------------

    def _targets(self, node: StepNode) -> bool:
        if self.stdin_targets is None:
            return True
        return any(t in self.stdin_targets for t in node.tasks)

    def _stdin_ready(self) -> bool:
        """Read stdin only once every node that takes it has said its token."""
        return all(n.token or n.done for n in self.nodes if self._targets(n))

    def _read_stdin(self) -> None:
        try:
            data = os.read(self.in_fd, 65536)
        except OSError:
            data = b""
        if data:
            self.pending_stdin.append(data)
            for node in self.nodes:
                if not node.done and self._targets(node):
                    self._send_stdin(node)
            return
        self.stdin_open = False
        for node in self.nodes:
            if node.stdin is not None:
                node.stdin.finish()
                node.stdin = None
            elif not node.done and self._targets(node) and node.token:
                self._open_stdin(node)
                if node.stdin is not None:
                    node.stdin.finish()
                    node.stdin = None

    def _open_stdin(self, node: StepNode) -> None:
        path = f"/v1/steps/stdin?job={self.job_id}&step={self.step_id}&token={node.token}"
        try:
            node.stdin = ChunkedSender((node.addr, node.port), path, tls=node.tls)
        except StreamError as e:
            _note(f"error: {node.name}: cannot forward stdin: {e}")

    def _send_stdin(self, node: StepNode) -> None:
        if node.stdin is None:
            self._open_stdin(node)
        if node.stdin is None:
            return
        try:
            for data in self.pending_stdin:
                node.stdin.send(data)
        except OSError:
            node.stdin = None
        if all(n.stdin is not None or n.done or not self._targets(n) for n in self.nodes):
            self.pending_stdin.clear()

    # --- signals ------------------------------------------------------------------------------

    def _signals(self) -> None:
        try:
            raw = os.read(self.wake_r, 256)
        except BlockingIOError:
            return
        for signum in raw:
            if signum == _signal.SIGINT:
                self._interrupt()
            else:
                self._forward(signum)

    def _task_status(self) -> None:
        """Slurm's status lines: which tasks still run and which have ended."""
        groups: dict[str, list[int]] = {}
        for t in range(self.ntasks):
            if t not in self.exits:
                groups.setdefault("running", []).append(t)
            elif self.exits[t] == (0, 0):
                groups.setdefault("exited", []).append(t)
            else:
                groups.setdefault("exited abnormally", []).append(t)
        for what in ("running", "exited", "exited abnormally"):
            tasks = groups.get(what)
            if tasks:
                word = "task" if len(tasks) == 1 else "tasks"
                _note(f"StepId={self.job_id}.{self.step_id} {word} {format_ranges(tasks)}: {what}")

    def _interrupt(self) -> None:
        now = time.monotonic()
        self.interrupts = [t for t in self.interrupts if now - t <= 1.0] + [now]
        if self.opts.quit_on_interrupt and not self.killing:
            # Slurm's --quit-on-interrupt: the step is killed at once (SIGKILL, no grace)
            _note("forcing job termination")
            self.aborted = True
            self._kill_step(hard=True)
            return
        if len(self.interrupts) == 2:
            if not self.killing:
                _note(f"Job step aborted: Waiting up to {int(self.kill_wait) + 2} seconds for job step to finish.")
                self.aborted = True
                self._forward(_signal.SIGINT)
                self._kill_step()
            return
        if len(self.interrupts) >= 3:
            _note("forcing job termination")
            self.aborted = True
            for node in self.nodes:
                node.done = True
                for t in node.tasks:
                    self.exits.setdefault(t, (0, _signal.SIGKILL))
            return
        _note("interrupt (one more within 1 sec to abort)")
        self._task_status()
        self._forward(_signal.SIGINT)

    def _forward(self, signum: int, kill: bool = False) -> None:
        for node in self.nodes:
            if node.done or not node.token:
                continue
            body = {"job_id": self.job_id, "step_id": self.step_id, "token": node.token, "signal": signum, "kill": kill}
            try:
                request("POST", "/v1/steps/signal", body, address=(node.addr, node.port), timeout=10.0, tls=node.tls)
            except (ApiError, ConnectError):
                pass

    def _kill_step(self, hard: bool = False) -> None:
        """Stop the step: TERM, KillWait, KILL; ``hard`` sends KILL at once (-W, -q)."""
        self.killing = True
        self._forward(_signal.SIGKILL if hard else _signal.SIGTERM, kill=True)

    # --- the end ------------------------------------------------------------------------------

    def _outcome(self) -> tuple[int, int, int, bool]:
        """Slurm's rule: the highest exit code, 128+N for a task killed by signal N; a task
        that srun itself had stopped (-K, -W) does not hide the code that caused it. A node
        whose tasks' cgroups saw OOM kills has slurmstepd's line in the step's stderr."""
        for node_name in sorted(self.oom_nodes):
            write_all(self.err_fd, oom_line(self.oom_nodes.pop(node_name), f"{self.job_id}.{self.step_id}").encode())
        rc = code = sig = 0
        for task, (c, s) in self.exits.items():
            code = max(code, c)
            if s:
                sig = max(sig, s)
                if task not in self.stopped:
                    rc = max(rc, 128 + s)
            rc = max(rc, c)
        for t in range(self.ntasks):
            if t not in self.exits:
                rc = max(rc, 1)
        if self.aborted and rc == 0:
            rc = 128 + _signal.SIGINT
        return rc, code, sig, self.aborted
