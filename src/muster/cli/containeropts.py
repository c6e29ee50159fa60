"""srun's container options: pyxis's ``--container-*`` and Slurm's ``--container=BUNDLE``.

The rows (``CONTAINER_OPTIONS``) join srun's table; ``container_request`` turns the values
given into the ``container`` of the step's launch body, which each node's agent runs
through its OCI runtime (``agent.containers``, docs/containers.md). Checked here, cheaply:
the forms of the values (mounts ``SRC[:DST[:FLAGS]]`` with absolute paths, an absolute
working directory, one of an image and a bundle); what only a node can know (does the
image exist, is a runtime installed) is the node's to say.
"""

from __future__ import annotations

import os

from muster.cli.argscan import NO_ARG, Opt, Parsed
from muster.cli.common import CommandError

__all__ = ["CONTAINER_OPTIONS", "container_request"]

RC_BAD = 1  # Slurm's srun exits 1 for a bad plugin (SPANK) option

CONTAINER_OPTIONS: tuple[Opt, ...] = (
    Opt("container-image"),
    Opt("container-mounts"),
    Opt("container-workdir"),
    Opt("container-name"),
    Opt("container-writable", None, NO_ARG),
    Opt("container-readonly", None, NO_ARG),
    Opt("container-mount-home", None, NO_ARG),
    Opt("no-container-mount-home", None, NO_ARG),
    Opt("container-env"),
    Opt("container", env=("SLURM_CONTAINER",)),
)
_KEYS = frozenset(o.key for o in CONTAINER_OPTIONS)


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
                text = os.path.normpath(os.path.join(cwd, text))  # a path, on the nodes
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
