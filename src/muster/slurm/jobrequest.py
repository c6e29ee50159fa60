"""The job request a command builds from its options: JobSpec fields so far, and the
values that need the caller's environment (``--export``, ``--chdir``, ``--begin``) until
``JobRequest.finish`` resolves them; with ``--export``'s rules (``export_environment``),
the umask that always travels with a job and the soft resource limits that propagate
(``submit_limits``).
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import posix


class JobRequest:
    """What the options asked for so far. ``spec`` holds JobSpec fields; a few values that
    need the caller's environment (``--export``, ``--chdir``, ``--begin``, ``--deadline``) wait in their own
    attributes until ``finish`` resolves them."""

    __slots__ = ("spec", "export", "chdir", "begin", "deadline", "propagate", "ignored", "distribution")

    def __init__(self) -> None:
        self.spec: dict[str, object] = {}
        self.export: str | None = None
        self.chdir: str | None = None
        self.begin: str | None = None
        self.deadline: str | None = None
        self.propagate: str | None = None  # --propagate's names ("" for a bare --propagate)
        self.ignored: list[str] = []
        self.distribution = ""  # -m: only "arbitrary" changes the job (SLURM_HOSTFILE's nodes)

    def finish(self, environ: dict[str, str], cwd: str, now: float | None = None) -> dict[str, object]:
        """Resolve the deferred values and return the JobSpec dict."""
        spec = dict(self.spec)
        workdir = cwd
        if self.chdir:
            import os

            workdir = os.path.normpath(os.path.join(cwd, os.path.expanduser(self.chdir)))
        spec["workdir"] = workdir
        environment = export_environment(self.export or environ.get("SBATCH_EXPORT") or "ALL", environ)
        spec["environment"] = environment
        # Slurm carries the submitter's umask with the job (whatever --export says); the
        # agent applies it before it creates the job's output files.
        environment["SLURM_UMASK"] = environ.get("SLURM_UMASK") or current_umask()
        # So do the shell's soft resource limits that propagate (``core.rlimits``).
        limits = submit_limits(self.propagate, environ)
        if limits:
            spec["rlimits"] = limits
        for text, field, option in ((self.begin, "begin_time", "--begin"), (self.deadline, "deadline", "--deadline")):
            if text is None:
                continue
            from muster.core.optionvalues import OptionValueError
            from muster.core.timefmt import TimeFormatError, parse_timestamp

            if now is None:
                from muster.core.clock import SystemClock

                now = SystemClock().now()
            try:
                spec[field] = parse_timestamp(text, now)
            except TimeFormatError:
                raise OptionValueError(f"Invalid {option} specification") from None
        if self.distribution == "arbitrary":
            arbitrary_nodes(spec, environ)
        return spec


def read_hostfile(environ: dict[str, str], ntasks: object = None) -> list[str] | None:
    """``SLURM_HOSTFILE``'s hosts in order (one a line, or comma separated; with ``ntasks``
    its first that many), None when the variable is not set (``-m arbitrary`` is then block)."""
    path = environ.get("SLURM_HOSTFILE")
    if not path:
        return None
    from muster.core.optionvalues import OptionValueError

    try:
        with open(path) as f:
            hosts = [h.strip() for line in f for h in line.split("#")[0].split(",") if h.strip()]
    except OSError as e:
        raise OptionValueError(f"Unable to open SLURM_HOSTFILE {path}: {e.strerror}") from None
    if isinstance(ntasks, int):
        if len(hosts) < ntasks:
            raise OptionValueError(f"SLURM_HOSTFILE {path} names {len(hosts)} hosts, fewer than the {ntasks} tasks")
        hosts = hosts[:ntasks]
    if not hosts:
        raise OptionValueError(f"SLURM_HOSTFILE {path} names no host")
    return hosts


def arbitrary_nodes(spec: dict[str, object], environ: dict[str, str]) -> None:
    """A job with ``-m arbitrary``: the hosts of ``SLURM_HOSTFILE`` are its nodes (room on
    each for the tasks named for it), the file's length its task count unless ``-n`` says."""
    hosts = read_hostfile(environ, spec.get("ntasks"))
    if hosts is None:
        return
    unique = list(dict.fromkeys(hosts))
    spec["nodelist"] = unique
    spec["min_nodes"] = spec["max_nodes"] = len(unique)
    spec["ntasks"] = len(hosts)
    most = max(hosts.count(h) for h in unique)
    if most > 1:
        spec["ntasks_per_node"] = most


def current_umask() -> str:
    """This process's umask as Slurm writes it (``0022``)."""
    mask = posix.umask(0o022)
    posix.umask(mask)
    return f"{mask:04o}"


def submit_limits(option: str | None, environ: dict[str, str]) -> dict[str, int]:
    """This process's soft limits that propagate: those ``--propagate`` names (``option``),
    else those the configuration's PropagateResourceLimits(Except) leave (default: all).
    An unreadable configuration propagates all (connecting to the controller says what is
    wrong with it)."""
    from muster.core.rlimits import NAMES, UNLIMITED, RlimitError, propagated

    only = excluded = None
    if option is None:
        from muster.client.settings import conf_path, parse_client_settings

        path = conf_path(environ)
        try:
            with open(path) as f:
                settings = parse_client_settings(f.read(), path).settings
        except OSError:
            settings = {}
        only = settings.get("PropagateResourceLimits")
        excluded = settings.get("PropagateResourceLimitsExcept")
    try:
        names = propagated(only, excluded, option)
    except RlimitError:  # a configuration the daemons refuse: they say so
        names = frozenset(NAMES)
    if not names:
        return {}
    import resource  # a small C module (~0.2 ms): only the commands that submit pay it

    out: dict[str, int] = {}
    for name in NAMES:
        if name in names:
            soft = resource.getrlimit(getattr(resource, "RLIMIT_" + name))[0]
            out[name] = UNLIMITED if soft == resource.RLIM_INFINITY else soft
    return out


def export_environment(export: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment a job gets for ``--export``.

    ``ALL`` (the default): everything; ``NONE``: nothing; ``ALL,A=1,B``: everything plus
    the assignments; ``A=1,B``: only the named variables (``B`` copied from here) and the
    ``SLURM_*`` ones, as Slurm does.
    """
    items = [item for item in _split_export(export) if item]
    upper = [item.upper() for item in items]
    if upper == ["NONE"]:
        return {}
    if "ALL" in upper:
        env = dict(environ)
    else:
        env = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    return env


def _split_export(text: str) -> list[str]:
    """Split on commas, except inside a value's quotes (``A="x,y",B``)."""
    out: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ",":
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    out.append("".join(current).strip())
    return out
