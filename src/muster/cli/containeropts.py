"""srun's container options: pyxis's ``--container-*`` and Slurm's ``--container=BUNDLE``.

The rows (``CONTAINER_OPTIONS``) join srun's table (pyxis's, ``PYXIS_OPTIONS``, sbatch's
too: ``spank_environment`` passes them to the job's sruns); ``container_request`` turns the
values given into the ``container`` of the step's launch body, which each node's agent runs
through its OCI runtime (``agent.containers``, docs/containers.md). Checked here, cheaply:
the forms of the values (mounts ``SRC[:DST[:FLAGS]]`` with absolute paths, an absolute
working directory, one of an image and a bundle); what only a node can know (does the
image exist, is a runtime installed) is the node's to say.
"""

# No ``from __future__ import annotations``: sbatch imports this module and starts without it.

from muster.cli.common import CommandError
from muster.slurm.argscan import NO_ARG, Opt, Parsed

__all__ = [
    "CONTAINER_OPTIONS",
    "CONTAINER_PROTOCOL",
    "PYXIS_OPTIONS",
    "SPANK_PREFIX",
    "check_agents",
    "container_request",
    "spank_environment",
]

RC_BAD = 1  # Slurm's srun exits 1 for a bad plugin (SPANK) option

# Slurm passes a SPANK plugin's options given to sbatch or salloc to the job's steps in
# the job's environment, as ``SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>``: a
# ``#SBATCH --container-image=...`` is every srun's default in the job (the command line
# of an srun wins, as for any option set by the environment).
SPANK_PREFIX = "SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_"


def _pyxis(name: str, arg: int | None = None) -> Opt:
    var = SPANK_PREFIX + name.replace("-", "_")
    return Opt(name, env=(var,)) if arg is None else Opt(name, None, arg, env=(var,))


# pyxis's options: srun's and sbatch's
PYXIS_OPTIONS: tuple[Opt, ...] = (
    _pyxis("container-image"),
    _pyxis("container-mounts"),
    _pyxis("container-workdir"),
    _pyxis("container-name"),
    _pyxis("container-writable", NO_ARG),
    _pyxis("container-readonly", NO_ARG),
    _pyxis("container-mount-home", NO_ARG),
    _pyxis("no-container-mount-home", NO_ARG),
    _pyxis("container-env"),
)
# srun's: pyxis's and Slurm's own --container (sbatch's is the job's SLURM_CONTAINER)
CONTAINER_OPTIONS: tuple[Opt, ...] = (*PYXIS_OPTIONS, Opt("container", env=("SLURM_CONTAINER",)))
_KEYS = frozenset(o.key for o in CONTAINER_OPTIONS)


def spank_environment(parsed: Parsed, cwd: str = "/") -> dict[str, str]:
    """sbatch's container options as the job's environment passes them to its batch script
    and its sruns (the last of each wins; a flag is ``1``): pyxis's, and Slurm's
    ``--container`` as ``SLURM_CONTAINER`` (an absolute path, ``cwd``'s when relative)."""
    out: dict[str, str] = {}
    for opt, value in parsed:
        if opt in PYXIS_OPTIONS:
            out[opt.env[0]] = "1" if opt.arg == NO_ARG else (value or "")
        elif opt.key == "container" and (value or "").strip():
            import posixpath  # not os: sbatch imports this module and must start without it

            out["SLURM_CONTAINER"] = posixpath.normpath(posixpath.join(cwd, (value or "").strip()))
    return out


def container_request(parsed: Parsed, cwd: str) -> dict[str, object] | None:
    """The launch body's ``container`` from the options given (last one wins), or None."""
    request: dict[str, object] = {}
    for opt, value in parsed:
        key = opt.key
        if key not in _KEYS:
            continue
        text = (value or "").strip()
        if key in ("container-image", "container"):
            if not text:
                raise CommandError(f"--{key} needs a value", RC_BAD)
            if key == "container" or text.startswith((".", "/")):
                import posixpath  # not os: sbatch imports this module and must start without it

                text = posixpath.normpath(posixpath.join(cwd, text))  # a path, on the nodes
            request["bundle" if key == "container" else "image"] = text
        elif key == "container-mounts":
            request["mounts"] = _mounts(text)
        elif key == "container-workdir":
            if not text.startswith("/"):
                raise CommandError(f"--container-workdir={text}: must be an absolute path", RC_BAD)
            request["workdir"] = text
        elif key == "container-name":
            if not text or "/" in text or text.startswith("."):
                raise CommandError(f"--container-name={text}: not a valid container name", RC_BAD)
            request["name"] = text
        elif key in ("container-writable", "container-readonly"):
            request["writable"] = key == "container-writable"
        elif key in ("container-mount-home", "no-container-mount-home"):
            request["mount_home"] = key == "container-mount-home"
        elif key == "container-env":
            request["env"] = ",".join(n.strip() for n in text.split(",") if n.strip())
    if not request:
        return None
    if request.get("image") and request.get("bundle"):
        raise CommandError("--container and --container-image cannot be used together", RC_BAD)
    if not (request.get("image") or request.get("bundle") or request.get("name")):
        raise CommandError("--container-image (or --container-name, or --container) is required", RC_BAD)
    return request


# The first wire protocol whose agents run a step's ``container`` (an older agent ignores
# the field it does not know, and would run the tasks on the node itself).
CONTAINER_PROTOCOL = 3


def check_agents(nodes: list[dict[str, object]]) -> None:
    """Refuse a container step where a node's agent (its protocol, as the controller
    knows it) is too old to run it: never the tasks outside their container."""
    for node in nodes:
        protocol = node.get("protocol")
        if not isinstance(protocol, int) or protocol < CONTAINER_PROTOCOL:
            said = "an unknown protocol" if not isinstance(protocol, int) else f"protocol {protocol}"
            raise CommandError(
                f"node {node.get('name')}'s musterd ({said}) cannot run containers: "
                "the step is not run outside its container",
                RC_BAD,
            )


def _mounts(text: str) -> str:
    """``SRC[:DST[:FLAGS]],...`` checked for form: absolute paths, at most three fields."""
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) > 3 or not all(p.startswith("/") for p in parts[:2] if p):
            raise CommandError(
                f"--container-mounts: invalid mount {item!r} (expected SRC:DST[:FLAGS], absolute)", RC_BAD
            )
    return text
