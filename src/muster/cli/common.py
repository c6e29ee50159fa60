"""What every command shares: the version line, error output, reading the configuration
and talking to the controller.

Start-up time matters here more than anywhere (a command is typed hundreds of times a day
and scripts call them in loops), so this module imports only ``sys`` and the built-in
``posix`` at load time and the lean HTTP client when a command first talks to the
controller. Not even ``os``: without ``site`` (the launchers' ``-S``) nothing has imported
it yet, and it costs ~0.9 ms (its environ mapping pulls in ``_collections_abc``), an eighth
of the interpreter's own start. ``environ``, ``getenv``, ``path_exists``, ``join`` and
``dirname`` below do the little the query commands need; rarer paths import ``os``.

Configuration: the commands need only a handful of keys (where the controller listens,
where the node agents keep their sockets). ``client_settings`` reads just those with a
small scanner that follows ``muster.core.config``'s grammar for global lines (case-blind
keys, ``#`` comments, ``\\#``, quoted values, backslash continuations) and its defaults.
Importing ``muster.core.config`` instead would validate every node and partition line and
cost more start-up time than the whole request; a unit test checks that both agree.

Connection: the controller's Unix socket when it exists on this host (the controller
reads our uid from it); otherwise its TCP port, with a credential (``user_credential``):
with ``AuthType=auth/munge`` one from the local munged (``protocol.munge``: login nodes run
no agent), else one the local node agent signs for us (``POST /v1/credential`` on the
agent's socket).
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import posix
import sys

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

SLURM_VERSION = "22.05.8"


def version_line() -> str:
    """What ``--version`` prints, the same for every command.

    Tools that wrap Slurm read the version from ``slurm X.Y.Z``; we keep that shape,
    name the Slurm release whose behaviour we follow, and say honestly what runs.
    """
    from muster import __version__

    return f"slurm {SLURM_VERSION} (muster {__version__})"


class CommandError(Exception):
    """Stop a command: print ``message`` (as ``<prog>: error: <message>`` unless ``raw``)
    and exit with ``rc``."""

    def __init__(self, message: str, rc: int = 1, raw: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.rc = rc
        self.raw = raw


def die(prog: str, msg: str, rc: int = 1) -> int:
    """Print ``<prog>: error: <msg>`` on stderr and return ``rc`` (for ``return die(...)``)."""
    sys.stderr.write(f"{prog}: error: {msg}\n")
    return rc


def report(prog: str, err: CommandError) -> int:
    if err.raw:
        sys.stderr.write(err.message + "\n")
    else:
        sys.stderr.write(f"{prog}: error: {err.message}\n")
    return err.rc


def usage_error(prog: str, message: str, rc: int = 1) -> int:
    """getopt's complaint plus Slurm's hint, as every Slurm command prints them."""
    sys.stderr.write(f'{prog}: {message}\nTry "{prog} --help" for more information\n')
    return rc


def option_error(prog: str, message: object, rc: int = 1) -> CommandError:
    """The CommandError for getopt's complaint plus Slurm's hint (``usage_error``'s text)."""
    return CommandError(f'{prog}: {message}\nTry "{prog} --help" for more information', rc, raw=True)


def no_operands(prog: str, operands: list[str]) -> None:
    """Refuse operands for a command that takes none, as Slurm's query commands do."""
    if operands:
        raise option_error(prog, f"unrecognized argument '{operands[0]}'")


def info_text(keys: tuple[str, ...] | set[str], help_text: str, usage_text: str) -> str | None:
    """The text --help, --usage or --version asks for (in that precedence) when one is in
    ``keys``; None when none is."""
    if "help" in keys:
        return help_text
    if "usage" in keys:
        return usage_text
    if "version" in keys:
        return version_line() + "\n"
    return None


def parse_iterate(value: str | None) -> float:
    """An --iterate period: a positive number of seconds."""
    try:
        period = float(value or "")
    except ValueError:
        period = 0.0
    if not 0 < period <= 2**31 - 1:  # also refuses inf and nan, which sleep() cannot take
        raise CommandError(f"Invalid --iterate value: {value}")
    return period


def exit_error_code(default: int = 1) -> int:
    """``SLURM_EXIT_ERROR`` overrides the status a command uses for a Slurm error."""
    raw = getenv("SLURM_EXIT_ERROR")
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            pass
    return default


def argv_or_sys(argv: list[str] | None) -> list[str]:
    return sys.argv[1:] if argv is None else list(argv)


# --- os without os (see the module's docstring) -------------------------------------------------


def environ() -> dict[str, str]:
    """A copy of the process environment, as ``dict(os.environ)`` gives it. Where ``os``
    is imported already its ``environ`` is the truth (it sees ``putenv`` and a test's
    ``monkeypatch.setenv``); otherwise the interpreter's start-up snapshot, decoded as
    ``os`` decodes it."""
    os = sys.modules.get("os")
    if os is not None:
        return dict(os.environ)
    enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    return {k.decode(enc, errors): v.decode(enc, errors) for k, v in posix.environ.items()}


def getenv(name: str) -> str | None:
    """``os.environ.get(name)`` (see ``environ``)."""
    os = sys.modules.get("os")
    if os is not None:
        value: str | None = os.environ.get(name)
        return value
    enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    raw = posix.environ.get(name.encode(enc, errors))
    return None if raw is None else raw.decode(enc, errors)


def path_exists(path: str) -> bool:
    """``os.path.exists``."""
    try:
        posix.stat(path)
    except (OSError, ValueError):
        return False
    return True


def join(head: str, tail: str) -> str:
    """``os.path.join`` of two parts."""
    if tail.startswith("/") or not head:
        return tail
    return head + tail if head.endswith("/") else f"{head}/{tail}"


def dirname(path: str) -> str:
    """``os.path.dirname``."""
    head = path[: path.rfind("/") + 1]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


def leave(status: object) -> None:
    """``sys.exit(status)`` for a launcher, without the interpreter's finalization (tearing
    down every module costs ~1.2 ms, a sixth of a command's start) when nothing needs it:
    the output is flushed here, and a registered ``atexit`` function, a running thread or a
    status that is not a number takes the ordinary way out."""
    if status is not None and not isinstance(status, int):
        sys.exit(status)  # type: ignore[arg-type]  # SystemExit takes any object (printed)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(status)  # the interpreter reports it as it always did
    atexit = sys.modules.get("atexit")  # a function is registered through it: never imported, none
    threading = sys.modules.get("threading")
    if (atexit is not None and atexit._ncallbacks()) or (threading is not None and threading.active_count() > 1):
        sys.exit(status)
    posix._exit((status or 0) & 0xFF)


def long_running() -> None:
    """Collect cyclic garbage again: a command's launcher turns the collector off for a run
    that asks, prints and leaves (``cli.launchers``), and a command that instead repeats
    (``-i``), waits (``sbatch --wait``) or reads commands calls this first."""
    import gc

    gc.enable()


# --- configuration --------------------------------------------------------------------------

# The keys the commands read, in core.config's spelling.
_CLIENT_KEYS = {
    key.lower(): key
    for key in (
        "ClusterName",
        "SlurmctldHost",
        "ControlMachine",
        "ControlAddr",
        "SlurmctldPort",
        "StateSaveLocation",
        "CtldSocket",
        "AgentSocketDir",
        "AuthKeyFile",
        "AuthType",
        "AuthInfo",
        "SlurmUser",
        "AdminUsers",
        "TLSType",
        "TLSParameters",
        "SlurmctldTimeout",
        "MessageTimeout",
        "SchedulerParameters",  # max_script_size: sbatch checks a script before sending it
        "PropagateResourceLimits",  # which soft limits sbatch, srun and salloc send
        "PropagateResourceLimitsExcept",
    )
}


DEFAULT_CONF = "/etc/muster/muster.conf"


def conf_path(environ: dict[str, str] | None = None) -> str:
    """Which configuration the commands read.

    ``$MUSTER_CONF`` first (``SLURM_CONF_MUSTER`` is the client module's alias), then the
    installed default; inside a job the agent sets ``SLURM_CONF`` to the cluster's file,
    so that is honoured when there is no installed default (jobs that submit jobs).
    """
    get = getenv if environ is None else environ.get
    explicit = get("MUSTER_CONF") or get("SLURM_CONF_MUSTER")
    if explicit:
        return explicit
    slurm_conf = get("SLURM_CONF")
    if slurm_conf and not path_exists(DEFAULT_CONF):
        return slurm_conf
    return DEFAULT_CONF


class ClientSettings:
    """The configuration as the commands see it (defaults as in ``muster.core.config``)."""

    __slots__ = ("path", "settings", "ctld_hosts")

    def __init__(self, path: str, settings: dict[str, str], ctld_hosts: list[str] | None = None) -> None:
        self.path = path
        self.settings = settings
        # every SlurmctldHost, the primary first (backups follow: high availability)
        self.ctld_hosts = ctld_hosts or ([settings["SlurmctldHost"]] if "SlurmctldHost" in settings else [])

    @property
    def controllers(self) -> list[tuple[str, str]]:
        """(host, address) of each SlurmctldHost, the primary first."""
        out = []
        for entry in self.ctld_hosts:
            name, _, rest = entry.partition("(")
            out.append((name, rest.rstrip(")") or name))
        return out or [self._host_addr()]

    def ctld_socket_for(self, index: int) -> str:
        """The Unix socket of controller ``index`` (a backup's has ``.N`` added)."""
        return self.ctld_socket if index == 0 else f"{self.ctld_socket}.{index}"

    @property
    def max_script_size(self) -> int:
        """``SchedulerParameters=max_script_size=N`` (4 MB, as Slurm's default); the
        controller checks it again, so a value that does not read is left to it."""
        for item in self.settings.get("SchedulerParameters", "").split(","):
            key, _, value = item.strip().partition("=")
            if key.lower() == "max_script_size" and value.isdigit():
                return int(value)
        return 4 * 1024 * 1024

    @property
    def slurmctld_timeout(self) -> float:
        raw = self.settings.get("SlurmctldTimeout", "120")
        return float(raw) if raw.isdigit() else 120.0

    @property
    def message_timeout(self) -> float:
        raw = self.settings.get("MessageTimeout", "10")
        return float(raw) if raw.isdigit() else 10.0

    @property
    def cluster_name(self) -> str:
        return self.settings.get("ClusterName", "cluster").lower()

    def _host_addr(self) -> tuple[str, str]:
        host = self.settings.get("SlurmctldHost")
        if host:
            name, _, rest = host.partition("(")
            return name, rest.rstrip(")") or name
        machine = self.settings.get("ControlMachine")
        if machine:
            return machine, self.settings.get("ControlAddr", machine)
        return "localhost", "127.0.0.1"

    @property
    def ctld_host(self) -> str:
        return self._host_addr()[0]

    @property
    def ctld_addr(self) -> str:
        return self._host_addr()[1]

    @property
    def ctld_port(self) -> int:
        raw = self.settings.get("SlurmctldPort", "6817").partition("-")[0]
        return int(raw) if raw.isdigit() else 6817

    @property
    def state_save_location(self) -> str:
        return self.settings.get("StateSaveLocation", "/var/spool/muster")

    @property
    def ctld_socket(self) -> str:
        return self.settings.get("CtldSocket", join(self.state_save_location, "musterctld.sock"))

    @property
    def agent_socket_dir(self) -> str | None:
        return self.settings.get("AgentSocketDir")

    @property
    def auth_type(self) -> str:
        return self.settings.get("AuthType", "auth/muster").lower()

    @property
    def tls_ca(self) -> str | None:
        """The cluster CA that the daemons' certificates must chain to, with
        ``TLSType=tls/muster``; None when the links are plain."""
        from muster.core.tlsconf import TLSConfError, TLSSettings

        key_file = self.settings.get("AuthKeyFile", join(dirname(self.path), "muster.key"))
        try:
            tls = TLSSettings(self.settings, key_file)
        except TLSConfError as e:
            raise CommandError(f"{self.path}: {e}") from None
        return tls.ca_cert if tls.enabled else None


# Lines that describe nodes, partitions and the like (their first key says so): the
# commands read none of them.
_NOT_GLOBAL = frozenset(("nodename", "partitionname", "include", "downnodes", "frontendname", "nodeset", "switchname"))


def parse_client_settings(text: str, path: str) -> ClientSettings:
    """Read the global keys the commands need from slurm.conf-style text."""
    settings: dict[str, str] = {}
    hosts: list[str] = []
    pending = ""
    for raw in text.split("\n"):
        line = pending + raw
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if "#" in line:
            if line.lstrip(" \t\r").startswith("#"):
                continue  # a whole-line comment (the common case, without conftext's rules)
            from muster.core.conftext import strip_comment

            line = strip_comment(line)
        if "=" not in line:
            continue
        if line[: line.index("=")].strip(" \t\r").lower() in _NOT_GLOBAL:
            continue  # a node or partition line, known by its first word without reading it all
        pairs = _pairs(line)
        if not pairs or pairs[0][0].lower() in _NOT_GLOBAL:
            continue
        for key, value in pairs:
            canon = _CLIENT_KEYS.get(key.lower())
            if canon is None:
                continue
            if canon == "SlurmctldHost":
                settings.setdefault(canon, value)  # the first one is the primary
                hosts.append(value)
            else:
                settings[canon] = value
    return ClientSettings(path, settings, hosts)


def _pairs(line: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one logical line; blanks may surround ``=``."""
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t\r":
            i += 1
        start = i
        while i < n and line[i] not in "= \t\r":
            i += 1
        key = line[start:i]
        while i < n and line[i] in " \t\r":
            i += 1
        if i >= n or line[i] != "=" or not key:
            # Not a pair: skip the word (the full parser reports it; we only read).
            while i < n and line[i] not in " \t\r":
                i += 1
            continue
        i += 1
        while i < n and line[i] in " \t\r":
            i += 1
        if i < n and line[i] == '"':
            end = line.find('"', i + 1)
            end = n if end < 0 else end
            value = line[i + 1 : end]
            i = end + 1
        else:
            start = i
            while i < n and line[i] not in " \t\r":
                i += 1
            value = line[start:i]
        pairs.append((key, value))
    return pairs


def load_settings(prog: str) -> ClientSettings:
    """Read ``$MUSTER_CONF`` (default /etc/muster/muster.conf); CommandError if unreadable."""
    path = conf_path()
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise CommandError(
            f"Could not establish a configuration source: cannot read {path}: "
            f"{e.strerror or e} (set MUSTER_CONF to your muster.conf)"
        ) from None
    return parse_client_settings(text, path)


# --- the controller ---------------------------------------------------------------------------


class Controller:
    """A connection recipe for the controller: each call is one request."""

    __slots__ = ("unix_path", "address", "headers", "settings", "timeout", "calls", "tls_ca")

    def __init__(
        self,
        settings: ClientSettings,
        unix_path: str | None = None,
        address: tuple[str, int] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.settings = settings
        self.unix_path = unix_path
        self.address = address
        self.headers = headers
        self.timeout = timeout
        self.calls = 0
        self.tls_ca = settings.tls_ca if address is not None else None

    def call(self, method: str, path: str, body: object = None) -> dict[str, "Any"]:
        from muster.protocol.client import ConnectError, request

        if len(self.settings.ctld_hosts) > 1:  # a primary and backups: whichever is active
            from muster.cli.failover import call_active

            return call_active(self.settings, method, path, body, self.timeout, user_credential)
        headers = self.headers
        if self.calls and self.address is not None and headers and "X-Muster-Credential" in headers:
            # A credential is accepted once: each further request over TCP gets a fresh one.
            credential = user_credential(self.settings)
            headers = self.headers = {"X-Muster-Credential": credential} if credential else None
        self.calls += 1
        try:
            answer = request(
                method,
                path,
                body,
                unix_path=self.unix_path,
                address=self.address,
                headers=headers,
                timeout=self.timeout,
                tls=(self.tls_ca, "ctld") if self.tls_ca else None,
            )
        except ConnectError as e:  # not reached (stopped, restarting?): retried (cli.failover)
            from muster.cli.failover import retry_single

            return retry_single(e, self.settings, method, path, body, self.timeout, user_credential)
        return answer if isinstance(answer, dict) else {}

    def get(self, path: str) -> dict[str, "Any"]:
        return self.call("GET", path)

    def post(self, path: str, body: object = None) -> dict[str, "Any"]:
        return self.call("POST", path, {} if body is None else body)


def connect(prog: str, settings: ClientSettings | None = None) -> Controller:
    """How to reach the controller from here (no request is made yet)."""
    if settings is None:
        settings = load_settings(prog)
    sock = settings.ctld_socket
    if path_exists(sock):
        return Controller(settings, unix_path=sock)
    headers = None
    credential = user_credential(settings)
    if credential:
        headers = {"X-Muster-Credential": credential}
    return Controller(settings, address=(settings.ctld_addr, settings.ctld_port), headers=headers)


def user_credential(settings: ClientSettings) -> str | None:
    """A credential that proves this process's uid to the controller over TCP, good for one
    request: with ``AuthType=auth/munge`` the local munged's (``AuthInfo=socket=PATH``), so
    that a login node needs no agent; else, or where no munged answers, a node agent's."""
    if settings.auth_type == "auth/munge":
        from time import time

        from muster.protocol import munge

        credential = munge.encode(munge.socket_path(settings.settings.get("AuthInfo")), settings.cluster_name, time())
        if credential:
            return credential
    return agent_credential(settings)


def agent_credential(settings: ClientSettings) -> str | None:
    """A credential signed by a node agent on this host, or by a login node's credential
    daemon (``agent.credd``, ``mustercredd.sock``), or None when none answers."""
    directory = settings.agent_socket_dir
    if not directory:
        return None
    try:
        names = sorted(
            n
            for n in posix.listdir(directory)
            if n == "mustercredd.sock" or (n.startswith("musterd-") and n.endswith(".sock"))
        )
    except OSError:
        return None
    from muster.protocol.client import ApiError, ConnectError, request

    for name in names:
        try:
            answer = request("POST", "/v1/credential", {}, unix_path=join(directory, name), timeout=10.0)
        except (ApiError, ConnectError, OSError, ValueError):
            continue
        if isinstance(answer, dict) and answer.get("credential"):
            return str(answer["credential"])
    return None


# Slurm's wording for a controller that cannot be reached.
CONNECT_FAILURE = "Unable to contact slurm controller (connect failure)"


def connect_message(err: Exception) -> str:
    """Slurm's text for a connection failure, plus where we tried (useful, and harmless)."""
    detail = str(err)
    if detail.startswith(CONNECT_FAILURE):
        return detail
    return f"{CONNECT_FAILURE}: {detail}" if detail else CONNECT_FAILURE


# --- output helpers ---------------------------------------------------------------------------


def null_text(value: object) -> str:
    """``(null)`` for a missing value (None, empty text or list), as Slurm prints it."""
    if value is None or value == "" or value == []:
        return "(null)"
    return str(value)


_TIMEFMT: "ModuleType | None" = None


def timefmt() -> "ModuleType":
    """muster.core.timetext (timefmt's formatting half), imported on first use (commands
    that print no times skip it)."""
    global _TIMEFMT
    if _TIMEFMT is None:
        from muster.core import timetext as module

        _TIMEFMT = module
    return _TIMEFMT


def split_ids(text: str) -> list[str]:
    """Split job ids on commas and blanks outside brackets: ``1,2_[3,5]`` -> ``1``,
    ``2_[3,5]`` (blank items dropped, the others as written)."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch in ", \t" and depth == 0:
            items.append("".join(current))
            current = []
            continue
        depth += ch == "["
        depth -= ch == "]"
        current.append(ch)
    items.append("".join(current))
    return [i for i in items if i.strip()]


def current_user() -> str:
    import pwd

    try:
        return pwd.getpwuid(posix.getuid()).pw_name
    except KeyError:
        return str(posix.getuid())


def print_lines(lines: list[str]) -> None:
    """Write many lines at once (one write beats thousands of prints)."""
    if lines:
        write_out("\n".join(lines) + "\n")


def write_out(text: str) -> None:
    """Write to stdout; a reader that went away (``squeue | head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush stays quiet too.
        import os

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
