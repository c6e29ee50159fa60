"""Who is calling: an identity the transport proved (never one a request body claims)."""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass

from muster.core.config import Config


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling, as proven by the transport (never taken from a request body)."""

    uid: int
    gid: int
    user: str
    group: str
    host: str
    admin: bool


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def identify(config: Config, uid: int, gid: int, host: str = "localhost") -> Identity:
    """The caller's names and whether it administers the cluster (root, SlurmUser or one
    of AdminUsers)."""
    user = user_name(uid)
    admin = uid == 0 or user == config.slurm_user or user in config.admin_users
    return Identity(uid, gid, user, group_name(gid), host, admin)
