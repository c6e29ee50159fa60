"""The configuration as a client reads it: which file (``conf_path``), the handful of keys
a command needs (``ClientSettings``) and ``load_settings``.

``parse_client_settings`` reads just those keys with a small scanner that follows
``muster.core.config``'s grammar for global lines (case-blind keys, ``#`` comments,
``\\#``, quoted values, backslash continuations) and its defaults. Importing
``muster.core.config`` instead would validate every node and partition line and cost more
start-up time than the whole request; a unit test checks that both agree.
"""

from muster.client.sysenv import dirname, getenv, join, path_exists
from muster.core.errors import CommandError

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    pass


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
