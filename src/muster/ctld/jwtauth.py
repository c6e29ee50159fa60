"""JSON Web Tokens, Slurm's ``AuthAltTypes=auth/jwt``: the controller mints them
(``scontrol token``) and checks them on every request that carries one.

A token is HS256-signed with the key named by ``AuthAltParameters=jwt_key=PATH`` (32 random
bytes that ``muster up`` creates, mode 0600; a key that ``other`` may read is refused, as
Slurm refuses it). Its claims are Slurm's: ``sun`` (the user name), ``iat`` and ``exp``.
Only the controller reads the key: musterrestd forwards the token and holds no secret (see
docs/security.md).

Checks, in order, on every request: the signature (nothing in an unsigned token is
believed), then the expiry against the controller's clock (never the library's), then the
user: ``X-SLURM-USER-NAME``, when given, must name the token's user, except for a token of
root or ``SlurmUser``, which may act for the user it names (Slurm's rule for a trusted proxy).
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from muster.core.config import Config
from muster.core.errors import AuthError

if TYPE_CHECKING:  # jwt itself is imported where a token is checked (start-up time)
    from jwt.types import Options

DEFAULT_LIFESPAN = 1800  # seconds, scontrol token's default
MAX_LIFESPAN = 2**31 - 1
USER_HEADER = "x-slurm-user-name"
TOKEN_HEADER = "x-slurm-user-token"


def jwt_enabled(config: Config) -> bool:
    """Whether ``AuthAltTypes`` lists ``auth/jwt``."""
    return "auth/jwt" in [t.strip().lower() for t in (config.get("AuthAltTypes") or "").split(",")]


def jwt_key_path(config: Config) -> str | None:
    """``jwt_key=PATH`` from ``AuthAltParameters`` (default: StateSaveLocation/jwt_hs256.key)."""
    for item in (config.get("AuthAltParameters") or "").split(","):
        key, _, value = item.strip().partition("=")
        if key.lower() == "jwt_key" and value:
            return value
    return os.path.join(config.state_save_location, "jwt_hs256.key")


def load_jwt_key(path: str) -> bytes:
    st = os.stat(path)
    if st.st_mode & stat.S_IRWXO:
        raise AuthError(f"JWT key {path} must not be accessible by others (chmod 600)")
    with open(path, "rb") as f:
        key = f.read()
    if len(key) < 16:
        raise AuthError(f"JWT key {path} is too short")
    return key


def token_in(headers: Any) -> str | None:
    """The token a request carries: ``X-SLURM-USER-TOKEN``, or ``Authorization: Bearer``."""
    token = headers.get(TOKEN_HEADER)
    if token:
        return str(token).strip()
    auth = headers.get("authorization") or ""
    scheme, _, value = str(auth).partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


@dataclass(frozen=True, slots=True)
class TokenUser:
    """Who a verified token speaks for."""

    user: str
    uid: int
    gid: int


class JwtAuth:
    """The controller's side of auth/jwt. Disabled (every token refused) unless configured."""

    def __init__(self, config: Config) -> None:
        self.enabled = jwt_enabled(config)
        self.path = jwt_key_path(config)
        self.proxies = {"root", config.slurm_user}
        self._key: bytes | None = None

    def key(self) -> bytes:
        if not self.enabled:
            raise AuthError("Authentication failure: auth/jwt is not enabled (AuthAltTypes)")
        if self._key is None:
            assert self.path is not None
            try:
                self._key = load_jwt_key(self.path)
            except OSError as e:
                raise AuthError(f"JWT key {self.path} unreadable: {e.strerror or e}") from None
        return self._key

    def mint(self, user: str, lifespan: int, now: float) -> str:
        import jwt

        iat = int(now)
        return jwt.encode({"iat": iat, "exp": iat + lifespan, "sun": user}, self.key(), algorithm="HS256")

    def verify(self, token: str, named: str | None, now: float) -> TokenUser:
        """The user a token proves; ``AuthError`` (401) for anything else."""
        import jwt

        key = self.key()
        try:
            # Times are checked below against our clock, never the library's.
            options: Options = {"verify_exp": False, "verify_iat": False, "verify_nbf": False, "require": ["exp"]}
            claims = jwt.decode(token, key, algorithms=["HS256"], options=options)
        except jwt.PyJWTError as e:
            raise AuthError(f"Authentication failure: invalid token: {e}") from None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or now >= exp:
            raise AuthError("Authentication failure: token expired")
        owner = claims.get("sun") or claims.get("username")
        if not isinstance(owner, str) or not owner:
            raise AuthError("Authentication failure: token names no user")
        user = owner
        if named and named != owner:
            if owner not in self.proxies:
                raise AuthError(f"Authentication failure: token of {owner} used for user {named}")
            user = named  # root's or SlurmUser's token acting for a user (Slurm's proxy rule)
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise AuthError(f"Authentication failure: unknown user {user}") from None
        return TokenUser(user, pw.pw_uid, pw.pw_gid)
