"""MUNGE user credentials (``AuthType=auth/munge``): how a command on a host without a node
agent (a login node) proves its uid to the controller, as Slurm's commands do.

The command asks its local ``munged`` for a credential (``encode``); munged learns the
caller's uid and gid from the kernel (SO_PEERCRED on its socket), so a user cannot ask for
someone else's. The credential is sealed with the site's ``munge.key``; the controller asks
its own munged, which holds the same key, to open it (``MungeDecoder``), and believes the
uid and gid in it and nothing the request says.

The payload is ``muster-user-v1:<cluster>:<time>``: the purpose (a credential made for
another service that uses the same key, Slurm's own for one, is refused), the cluster, and
the time of encoding to the millisecond (munge's own is to the second). ``verify`` checks,
in order: munged's verdict (a foreign key, a tampered text, an expired or a replayed
credential are refused by munged itself and named as munged names them), the purpose and
cluster, that the payload's time is the credential's own (the second munged stamped, give
or take a second), then the controller's ``ReplayGuard`` with the SHA-256 of the credential
as its nonce: once per controller, across restarts too (munged forgets what it saw when it
restarts; the guard's persisted floor does not).

Encoding runs the ``munge`` program: measured on the development machine
(benchmarks/bench_munge.py), a command that runs it (posix_spawn, no ``subprocess``) takes
~1.2-1.4 ms longer, one that loads libmunge with ``ctypes`` ~3.4-3.8 ms longer (``import
ctypes`` alone is ~3 ms). So this module imports only
``posix`` for the command's side; ``ctypes`` is loaded by ``MungeDecoder`` in the controller,
a long-lived process, where decoding in-process beats a program per request.
"""

from __future__ import annotations

import posix

TYPE_CHECKING = False
if TYPE_CHECKING:
    from muster.protocol.replay import ReplayGuard

PREFIX = "MUNGE:"  # every credential munge armours starts so (agent credentials never do)
PURPOSE = "muster-user-v1"
DEFAULT_SOCKET = "/run/munge/munge.socket.2"
LIBRARY = "libmunge.so.2"
TIME_SLACK = 1.0  # seconds the payload's time may stray from munged's stamp (see ``verify``)
PROGRAM_DIRS = ("/usr/bin", "/usr/local/bin", "/bin")

# munge.h's numbers (stable since MUNGE 0.5)
_OPT_SOCKET = 8
_OPT_ENCODE_TIME = 6
_OPT_ADDR4 = 5
_NAMES = {
    1: "internal error",
    6: "cannot talk to munged (socket communication error)",
    8: "invalid credential format",
    9: "invalid credential version",
    13: "unrecognized security realm",
    14: "invalid credential (not sealed with this cluster's munge.key, or tampered with)",
    15: "expired credential",
    16: "rewound credential (encoded in the future: check clocks)",
    17: "replayed credential",
    18: "unauthorized credential decode",
}


def socket_path(auth_info: str | None) -> str:
    """munged's socket: ``AuthInfo=socket=PATH`` (Slurm's spelling), else munge's default."""
    for item in (auth_info or "").split(","):
        key, _, value = item.strip().partition("=")
        if key.lower() == "socket" and value:
            return value
    return DEFAULT_SOCKET


def is_munge(cred: str) -> bool:
    return cred.startswith(PREFIX)


def payload(cluster: str, now: float) -> str:
    return f"{PURPOSE}:{cluster}:{now:.3f}"


def _program() -> str | None:
    for d in PROGRAM_DIRS:
        path = d + "/munge"
        try:
            posix.stat(path)
        except OSError:
            continue
        return path
    return None


def encode(socket: str, cluster: str, now: float) -> str | None:
    """A credential from the local munged (the ``munge`` program), or None when there is no
    munged to ask (no socket, no program) or it refused; the caller then has no MUNGE proof."""
    try:
        posix.stat(socket)
    except OSError:
        return None
    program = _program()
    if program is None:
        return None
    r, w = posix.pipe()
    try:
        devnull = posix.open("/dev/null", posix.O_RDWR)
    except OSError:
        posix.close(r)
        posix.close(w)
        return None
    try:
        pid = posix.posix_spawn(
            program,
            [program, "-S", socket, "-s", payload(cluster, now)],
            {b"PATH": b"/usr/bin:/bin"},
            file_actions=[
                (posix.POSIX_SPAWN_DUP2, devnull, 0),
                (posix.POSIX_SPAWN_DUP2, w, 1),
                (posix.POSIX_SPAWN_DUP2, devnull, 2),
                (posix.POSIX_SPAWN_CLOSE, r),
            ],
        )
    except OSError:
        posix.close(r)
        posix.close(w)
        posix.close(devnull)
        return None
    posix.close(w)
    posix.close(devnull)
    chunks = []
    try:
        while True:
            chunk = posix.read(r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        posix.close(r)
        _pid, status = posix.waitpid(pid, 0)
    text = b"".join(chunks).decode("ascii", "replace").strip()
    if status != 0 or not is_munge(text):
        return None
    return text


class MungeError(Exception):
    """munged refused to decode a credential; ``str()`` says why, as munge names it."""


class Decoded:
    __slots__ = ("uid", "gid", "payload", "encoded", "origin")

    def __init__(self, uid: int, gid: int, payload: bytes, encoded: int, origin: str) -> None:
        self.uid = uid
        self.gid = gid
        self.payload = payload
        self.encoded = encoded  # seconds since the epoch, munged's stamp
        self.origin = origin  # the encoding host's address, as its munged set it


class MungeDecoder:
    """Decodes credentials through libmunge and the controller's munged (``socket``).

    ``OSError`` at construction when libmunge cannot be loaded. A decode blocks for one
    round trip on munged's local socket (~0.1 ms)."""

    def __init__(self, socket: str, library: str = LIBRARY) -> None:
        import ctypes

        self._ctypes = ctypes
        lib = ctypes.CDLL(library)
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_strerror.restype = ctypes.c_char_p
        lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
        lib.munge_decode.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
        ]
        self._lib = lib
        self._free = ctypes.CDLL(None).free
        self._free.argtypes = [ctypes.c_void_p]
        self.socket = socket

    def decode(self, cred: str) -> Decoded:
        c = self._ctypes
        lib = self._lib
        ctx = lib.munge_ctx_create()
        if not ctx:
            raise MungeError("out of memory")
        buf = c.c_void_p()
        length = c.c_int()
        uid = c.c_uint32()
        gid = c.c_uint32()
        try:
            lib.munge_ctx_set(c.c_void_p(ctx), _OPT_SOCKET, c.c_char_p(self.socket.encode()))
            rc = lib.munge_decode(
                cred.encode("ascii", "replace"), ctx, c.byref(buf), c.byref(length), c.byref(uid), c.byref(gid)
            )
            data = c.string_at(buf.value, length.value) if buf.value else b""
            if rc != 0:
                detail = lib.munge_ctx_strerror(ctx)
                name = _NAMES.get(rc, f"munge error {rc}")
                if rc in (1, 6) and detail:  # munged's own words say what went wrong
                    name = f"{name}: {detail.decode(errors='replace')}"
                raise MungeError(name)
            encoded = c.c_long()
            lib.munge_ctx_get(c.c_void_p(ctx), _OPT_ENCODE_TIME, c.byref(encoded))
            addr = (c.c_ubyte * 4)()
            lib.munge_ctx_get(c.c_void_p(ctx), _OPT_ADDR4, c.byref(addr))
            origin = ".".join(str(b) for b in addr)
        finally:
            if buf.value:
                self._free(buf.value)
            lib.munge_ctx_destroy(ctx)
        return Decoded(uid.value, gid.value, data, encoded.value, origin)


def verify(
    decoder: MungeDecoder,
    cred: str,
    cluster: str,
    now: float,
    guard: ReplayGuard,
    decoded: Decoded | MungeError | None = None,
) -> Decoded:
    """The decoded credential of a caller, or ``SignatureError`` saying why it is refused
    (see the module's docstring for the checks). ``decoded``: munged's answer for ``cred``
    when the caller already asked (off the event loop: a munged that is down or hung makes
    libmunge retry for seconds)."""
    import hashlib

    from muster.protocol.replay import SignatureError

    try:
        if isinstance(decoded, MungeError):
            raise decoded
        got = decoded if decoded is not None else decoder.decode(cred)
    except MungeError as e:
        raise SignatureError(f"MUNGE: {e}") from None
    parts = got.payload.decode("utf-8", "replace").split(":")
    if len(parts) != 3 or parts[0] != PURPOSE:
        raise SignatureError("MUNGE: not a muster credential (wrong payload)")
    if parts[1] != cluster:
        raise SignatureError(f"MUNGE: credential made for cluster {parts[1]!r}, not {cluster!r}")
    try:
        ts = float(parts[2])
    except ValueError:
        raise SignatureError("MUNGE: malformed credential time") from None
    # munged stamps whole seconds from a clock that may lag ours by a tick (a coarse clock):
    # the payload's time must be that second's, give or take a second either way
    if not got.encoded - TIME_SLACK <= ts < got.encoded + 1.0 + TIME_SLACK:
        raise SignatureError("MUNGE: the credential's time is not its own")
    guard.check(hashlib.sha256(cred.encode()).hexdigest(), ts, now)
    return got
