"""muster's error family.

``str(error)`` is exactly what a command prints after ``<command>: error:``. Each class
carries the HTTP status the API answers with and the exit code a command returns, so
that the mapping lives in one place and the edges only translate.
"""

# No ``from __future__ import annotations``: the commands import this module (through
# ``hostlist``), and ``__future__`` would cost them ~0.1 ms.


class MusterError(Exception):
    http_status = 400
    exit_code = 1
    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        # An extra line some commands print before the message (Slurm's detail line).
        self.detail: str | None = None

    def __str__(self) -> str:
        return self.message


class InvalidRequest(MusterError):
    """The request is malformed or names things that do not exist."""

    code = "invalid"


class InvalidJobId(MusterError):
    http_status = 404
    code = "invalid_job_id"

    def __init__(self, message: str = "Invalid job id specified") -> None:
        super().__init__(message)


class InvalidPartition(MusterError):
    code = "invalid_partition"

    def __init__(self, message: str = "Invalid partition name specified") -> None:
        super().__init__(message)


class Unsatisfiable(MusterError):
    """The job can never run on this cluster as configured."""

    code = "unsatisfiable"

    def __init__(self, message: str = "Requested node configuration is not available") -> None:
        super().__init__(message)


class PermissionDenied(MusterError):
    http_status = 403
    exit_code = 210  # what Slurm's scancel returns for another user's job
    code = "permission_denied"

    def __init__(self, message: str = "Access/permission denied") -> None:
        super().__init__(message)


class ResourceBusy(MusterError):
    """A cluster-wide or per-user cap on queued jobs is reached (Slurm: EAGAIN)."""

    http_status = 503
    code = "busy"

    def __init__(self, message: str = "Resource temporarily unavailable") -> None:
        super().__init__(message)


class AuthError(MusterError):
    http_status = 401
    code = "auth"


class StaleCredential(AuthError):
    """A command's credential made before the controller's replay floor: it started or took
    over since the credential was made (``protocol.replay``). Nothing was done; the command
    may send the request again with a fresh credential (``client.failover``)."""

    code = "stale"


class IllegalTransition(MusterError):
    """A job or node was asked to move along an edge the lifecycle table does not have."""

    http_status = 409
    code = "illegal_transition"


class NotFound(MusterError):
    http_status = 404
    code = "not_found"


class StorageError(MusterError):
    """The controller's state store could not commit (a full disk, an I/O error, a locked
    or corrupt database). Nothing of the change was applied; ``str()`` is the cause in the
    words a command prints after its own "Unable to ..." prefix."""

    http_status = 503
    code = "storage"


class CommandError(Exception):
    """Stop a command (or a client acting for a user: the REST server): print ``message``
    (as ``<prog>: error: <message>`` unless ``raw``) and exit with ``rc``. Raised by the
    commands, ``muster.client`` (an unreadable configuration) and ``muster.slurm`` (a bad
    option or format); not an API error, so not in ``ERRORS_BY_CODE``."""

    def __init__(self, message: str, rc: int = 1, raw: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.rc = rc
        self.raw = raw


ERRORS_BY_CODE: dict[str, type[MusterError]] = {
    cls.code: cls
    for cls in (
        MusterError,
        InvalidRequest,
        InvalidJobId,
        InvalidPartition,
        Unsatisfiable,
        PermissionDenied,
        AuthError,
        StaleCredential,
        IllegalTransition,
        NotFound,
        StorageError,
    )
}
