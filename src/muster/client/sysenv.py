"""The little of ``os`` the commands and the client need, without ``os``: ``environ``,
``getenv``, ``path_exists``, ``join`` and ``dirname``.

Without ``site`` (the launchers' ``-S``) nothing has imported ``os`` yet, and it costs
~0.9 ms (its environ mapping pulls in ``_collections_abc``), an eighth of the
interpreter's own start; these need only the built-in ``posix``. Rarer paths import ``os``.
"""

import posix
import sys


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
