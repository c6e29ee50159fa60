"""Reaching the active controller, whatever the others do.

With several controllers (``SlurmctldHost`` listed more than once), each is tried in turn:
first the one that answered last, then the others in the configuration's order, and last
those found hung lately. A controller is reached through its Unix socket when it runs on
this host, else over TCP. A controller that refuses the connection, or answers 503 "Slurm
backup controller in standby mode", passes the turn to the next; rounds repeat until one
answers or ``SlurmctldTimeout`` has passed (a backup takes over within that time).

A controller that accepts but does not answer (stopped, hung) must not cost a command its
whole ``MessageTimeout``: connecting (and the TLS handshake) gets ``CONNECT_TIMEOUT``, and
for a request that may be sent again (below), an answer that has not begun after
``STALL_AFTER`` seconds makes the client ask the same controller ``GET /livez`` on a new
connection (``PROBE_TIMEOUT``). A live controller answers that at once, however long the
request itself takes, and the request is waited for up to ``MessageTimeout``; a silent one
is hung: the client moves on to the next. Any other change waits for its answer up to
``MessageTimeout`` (it may have been applied), as in Slurm.

What was learnt is remembered across commands in a small per-user file (``memory_path``):
which controller answered last, and which were found hung and when. A command right after
one that found the active controller hung goes straight to the other; a hung controller is
tried last for ``SlurmctldTimeout`` (it is tried again, last, should no other answer).

With one controller, a refused connection is retried (quietly at first, then with one line
saying so) for ``MessageTimeout``, as Slurm's commands do: a controller being restarted
costs a submission a wait, not an error. After that the command fails with Slurm's words,
"Unable to contact slurm controller (connect failure)".

A request that may have reached a controller that then died is sent again only when doing so
cannot repeat its effect: reads, and submissions, which carry an ``X-Muster-Request`` token
that the controller keeps with the jobs it created (a retry gets the same job id back). Any
other change whose answer was lost fails with the error, as in Slurm.

Over TCP a command proves who runs it with a credential from the node agent on this host.
A head node that runs a standby controller and no agent gets one from that controller's
Unix socket instead (the standby signs it for the caller's uid, as an agent would).
A credential is good for one request, and only after the receiving controller's replay
floor (the moment it started or took over): one made just before a takeover and checked
just after is refused as stale (401, code ``stale``), nothing done, and the request is sent
once more with a fresh credential, first in the next round.
"""

from __future__ import annotations

import os

STANDBY_CODE = "standby"
STALE_CODE = "stale"  # core.errors.StaleCredential's: this module imports no muster.core
REQUEST_HEADER = "X-Muster-Request"
_ROUND_PAUSE = 0.2
CONNECT_TIMEOUT = 1.0  # to connect and finish the TLS handshake: a live controller takes ms
STALL_AFTER = 1.0  # no answer begun after this long: is the controller alive at all?
PROBE_TIMEOUT = 1.0  # for that question (``GET /livez`` on a new connection)
QUIET_FOR = 2.0  # retrying is silent this long, then says so once
REASK_HUNG = 2.0  # a controller found hung is asked again after this long, not every round

_last = [0]  # the controller that answered last, in this process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    ClientSettings = Any  # client.settings' (client.controller imports this module when it is needed)

Way = tuple["str | None", "tuple[str, int] | None"]


def targets(settings: ClientSettings) -> list[Way]:
    """How to reach each controller, the primary first: (Unix socket, None) or (None, TCP address)."""
    out: list[Way] = []
    for i, (_host, addr) in enumerate(settings.controllers):
        sock = settings.ctld_socket_for(i)
        out.append((sock, None) if os.path.exists(sock) else (None, (addr, settings.ctld_port)))
    return out


def repeatable(method: str, path: str) -> bool:
    """Whether sending this request twice has the effect of sending it once: reads, long
    polls for an allocation, submissions (their token)."""
    path = path.split("?")[0]
    return method == "GET" or (method == "POST" and (path == "/v1/jobs" or path.endswith("/await")))


# --- what is remembered across commands -------------------------------------------------


def memory_path(settings: ClientSettings) -> str:
    """This user's memory of the controllers of this configuration: a file in a directory
    of their own (``$XDG_RUNTIME_DIR``, else ``/tmp/muster-<uid>``, mode 0700)."""
    import zlib

    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/muster-{os.getuid()}"
    tag = zlib.crc32(os.path.abspath(settings.path).encode())
    return os.path.join(base, f"muster-ctld-{tag:08x}")


def _own_dir(path: str) -> bool:
    """``path`` is a directory of this user's, not a link, that no one else may write."""
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def recall(settings: ClientSettings, now: float) -> tuple[int | None, dict[int, float]]:
    """(the controller that answered last, {controller: when found hung}) as remembered;
    nothing when the file is absent, not this user's, or garbled."""
    path = memory_path(settings)
    if not _own_dir(os.path.dirname(path)):
        return None, {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None, {}
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return None, {}
        words = os.read(fd, 4096).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    active: int | None = None
    hung: dict[int, float] = {}
    for word in words:
        key, _, value = word.partition("=")
        try:
            if key == "active":
                active = int(value)
            elif key == "hung":
                index, _, when = value.partition("@")
                at = float(when)
                if at <= now:  # a time from before a reboot (monotonic clock) reads as now
                    hung[int(index)] = at
        except ValueError:
            continue
    return active, hung


def remember(settings: ClientSettings, active: int | None, hung: dict[int, float]) -> None:
    """Write the memory (atomically; any failure is ignored: it is only a hint)."""
    path = memory_path(settings)
    directory = os.path.dirname(path)
    text = "".join(
        [f"active={active}\n" if active is not None else ""] + [f"hung={i}@{t:.3f}\n" for i, t in hung.items()]
    )
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o700, exist_ok=True)
        if not _own_dir(directory):
            return
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        pass


def order(count: int, active: int | None, hung: dict[int, float], now: float, forget_after: float) -> list[int]:
    """The order to try ``count`` controllers in: the last active first, then the others in
    the configuration's order; those found hung within ``forget_after`` seconds go last."""
    first = [active] if active is not None and 0 <= active < count else []
    rest = first + [i for i in range(count) if i not in first]
    recent = {i for i, at in hung.items() if now - at < forget_after}
    return [i for i in rest if i not in recent] + [i for i in rest if i in recent]


# --- the request --------------------------------------------------------------------------


def _probe(way: Way, tls_ca: str | None) -> Callable[[], bool]:
    """A question for a request whose answer is late: is that controller hung?"""

    def hung() -> bool:
        from muster.protocol.client import ApiError, ConnectError, request

        unix_path, address = way
        try:
            request(
                "GET",
                "/livez",
                unix_path=unix_path,
                address=address,
                timeout=PROBE_TIMEOUT,
                tls=(tls_ca, "ctld") if address is not None and tls_ca else None,
            )
        except ApiError:
            return False  # it answered
        except (ConnectError, OSError):
            return True
        return False

    return hung


def local_credential(settings: ClientSettings, ways: list[Way]) -> str | None:
    """A credential from a controller on this host (a standby on a head node with no agent)."""
    from muster.protocol.client import ApiError, ConnectError, request

    for unix_path, _address in ways:
        if unix_path is None:
            continue
        try:
            answer = request("POST", "/v1/credential", {}, unix_path=unix_path, timeout=PROBE_TIMEOUT)
        except (ApiError, ConnectError, OSError, ValueError):
            continue
        if isinstance(answer, dict) and answer.get("credential"):
            return str(answer["credential"])
    return None


def _say_retrying(settings: ClientSettings, window: float) -> None:
    import sys

    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "muster"
    several = len(settings.controllers) > 1
    what = "no slurm controller answers" if several else "Unable to contact slurm controller (connect failure)"
    sys.stderr.write(f"{prog}: {what}; retrying for up to {window:.0f} s\n")
    sys.stderr.flush()


def call_active(
    settings: ClientSettings,
    method: str,
    path: str,
    body: Any,
    timeout: float,
    agent_credential: Callable[[Any], str | None],
    proof: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The answer of the active controller (see the module's docstring); ``agent_credential``
    proves the caller over TCP (``client.controller``'s), unless ``proof`` (a JWT's headers, from
    musterrestd) proves it on any transport."""
    import time

    from muster.protocol.client import ApiError, ConnectError, request

    count = len(settings.controllers)
    several = count > 1
    # A controller that accepts but does not answer (stopped, hung) is given MessageTimeout,
    # as Slurm's commands give each controller, unless it is found hung sooner (the probe);
    # plus the time a long poll (``{"wait": seconds}``: srun's step, salloc's allocation)
    # asks it to hold.
    held = body.get("wait") if isinstance(body, dict) else None
    held = float(held) if isinstance(held, int | float) else 0.0
    timeout = min(timeout, settings.message_timeout + held)
    token = os.urandom(16).hex() if method == "POST" else None
    again = repeatable(method, path)
    start = time.monotonic()
    # A backup takes over within SlurmctldTimeout of the active one's last renewal, then
    # loads the state: the rounds last that long and a MessageTimeout more.
    window = settings.slurmctld_timeout + settings.message_timeout if several else settings.message_timeout
    deadline = start + window
    remembered, hung = recall(settings, start) if several else (None, {})
    if remembered is None:
        remembered = _last[0]
    learnt = False  # something to write back
    remade = False  # a stale credential was answered (StaleCredential) and made again
    tls_ca = None
    said = False
    last: Exception | None = None
    while True:
        ways = targets(settings)
        now = time.monotonic()
        for index in order(count, remembered, hung, now, settings.slurmctld_timeout):
            if now - hung.get(index, -REASK_HUNG) < REASK_HUNG:
                continue  # found hung by this command a moment ago: another round first
            unix_path, address = ways[index]
            headers = {REQUEST_HEADER: token} if token else {}
            if proof is not None:
                headers.update(proof)
            elif address is not None:
                credential = agent_credential(settings)  # good for one request only
                if not credential and several:
                    credential = local_credential(settings, ways)
                if credential:
                    headers["X-Muster-Credential"] = credential
            if address is not None and tls_ca is None:
                tls_ca = settings.tls_ca or ""
            way: Way = (unix_path, address)
            try:
                answer = request(
                    method,
                    path,
                    body,
                    unix_path=unix_path,
                    address=address,
                    headers=headers or None,
                    timeout=timeout,
                    tls=(tls_ca, "ctld") if address is not None and tls_ca else None,
                    connect_timeout=CONNECT_TIMEOUT if several else None,
                    # given up on only when it may be sent again: a change waits its answer
                    stalled=(STALL_AFTER + held, _probe(way, tls_ca)) if several and again else None,
                )
            except ConnectError as e:
                if several and ("hung" in str(e) or "timed out" in str(e)):
                    hung[index] = time.monotonic()
                    learnt = True
                if e.sent and not again:
                    if learnt:
                        remember(settings, remembered, hung)
                    raise
                last = e
                continue
            except ApiError as e:
                if e.status == 401 and e.code == STALE_CODE and proof is None and not remade:
                    # The credential was made before this controller took over (or started):
                    # refused, nothing done. Once more, first in the next round, with a fresh one.
                    remade = True
                    remembered = index
                    last = e
                    continue
                if e.status != 503 or e.code != STANDBY_CODE:
                    _answered(settings, index, remembered, hung, learnt)
                    raise
                last = e
                continue
            _answered(settings, index, remembered, hung, learnt)
            return answer if isinstance(answer, dict) else {}
        now = time.monotonic()
        if now >= deadline:
            assert last is not None
            if learnt:
                remember(settings, remembered, hung)
            raise last
        if not said and now - start >= QUIET_FOR:
            _say_retrying(settings, window)
            said = True
        time.sleep(min(_ROUND_PAUSE if several else 0.5, max(0.0, deadline - now)))


def retry_single(
    error: Exception,
    settings: ClientSettings,
    method: str,
    path: str,
    body: Any,
    timeout: float,
    credential: Callable[[Any], str | None],
) -> dict[str, Any]:
    """The one controller did not take a request (``error``): one that never reached it is
    sent again until it does, for MessageTimeout (``call_active``); one that may have
    reached it fails with the error."""
    from muster.protocol.client import ConnectError

    if not isinstance(error, ConnectError) or error.sent:
        raise error
    return call_active(settings, method, path, body, timeout, credential)


def _answered(
    settings: ClientSettings, index: int, remembered: int | None, hung: dict[int, float], learnt: bool
) -> None:
    _last[0] = index
    if len(settings.controllers) < 2:
        return
    was_hung = hung.pop(index, None) is not None
    if learnt or was_hung or remembered != index:
        remember(settings, index, hung)


def ask_one(
    settings: ClientSettings,
    index: int,
    method: str,
    path: str,
    timeout: float,
    credential: Callable[[ClientSettings], str | None],
) -> Any:
    """One request to controller ``index`` itself (no failover). Over TCP it carries a
    credential (``credential``'s for this host, or one from a controller here:
    ``local_credential``)."""
    from muster.protocol.client import request

    sock = settings.ctld_socket_for(index)
    body: dict[str, Any] | None = {} if method == "POST" else None
    if os.path.exists(sock):
        return request(method, path, body, unix_path=sock, timeout=timeout, connect_timeout=CONNECT_TIMEOUT)
    addr = settings.controllers[index][1]
    proof = credential(settings) or local_credential(settings, targets(settings))
    tls_ca = settings.tls_ca
    return request(
        method,
        path,
        body,
        address=(addr, settings.ctld_port),
        headers={"X-Muster-Credential": proof} if proof else None,
        timeout=timeout,
        tls=(tls_ca, "ctld") if tls_ca else None,
        connect_timeout=CONNECT_TIMEOUT,
    )


def mode(settings: ClientSettings, index: int, credential: Callable[[ClientSettings], str | None]) -> str:
    """Whether controller ``index`` is ``active``, in ``standby`` or ``down``."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        answer = ask_one(settings, index, "GET", "/v1/ping", 5.0, credential)
    except (ApiError, ConnectError, OSError):
        return "down"
    return "standby" if isinstance(answer, dict) and answer.get("mode") == "standby" else "active"
