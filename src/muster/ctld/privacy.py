"""``PrivateData``: what a user who is not an administrator may see of other users.

Slurm's semantics, for the values muster knows (``PrivateData=jobs,usage,accounts,users``,
comma separated, case-insensitive; ``all`` means every one of them):

* ``jobs``: squeue, scontrol show job, sacct and the step listings show a user only their
  own jobs; another user's job id is answered as an unknown one ("Invalid job id
  specified"), so its existence is not revealed either.
* ``usage``: sshare and sreport show a user only their own usage rows (the accounts'
  rows and the cluster's totals stay, they name nobody).
* ``accounts``: sacctmgr show account/association lists only the accounts the user has an
  association in.
* ``users``: sacctmgr show user/association lists only the user.

Administrators (root, ``SlurmUser``, ``AdminUsers``) see everything. Pure functions: the
routes ask, these answer.
"""

from __future__ import annotations

from typing import Any

from muster.core.config import Config

__all__ = ["PrivateData"]

_KNOWN = ("jobs", "usage", "accounts", "users")


class PrivateData:
    """The parsed ``PrivateData`` setting and the filters it implies for one caller."""

    def __init__(self, config: Config) -> None:
        raw = (config.get("PrivateData") or "").lower()
        words = {w.strip() for w in raw.split(",") if w.strip()}
        self.hidden = set(_KNOWN) if "all" in words else words & set(_KNOWN)

    def hides(self, kind: str, who: Any) -> bool:
        """Whether ``kind`` of other users is hidden from ``who`` (an Identity)."""
        return kind in self.hidden and not who.admin

    def jobs(self, jobs: list[Any], who: Any) -> list[Any]:
        return [j for j in jobs if j.uid == who.uid] if self.hides("jobs", who) else jobs

    def job_rows(self, rows: list[dict[str, Any]], who: Any) -> list[dict[str, Any]]:
        """Accounting records (sacct): by uid where known, else by user name."""
        if not self.hides("jobs", who):
            return rows
        return [r for r in rows if r.get("uid", who.uid) == who.uid and r.get("user", who.user) == who.user]

    def usage_rows(self, rows: list[dict[str, Any]], who: Any) -> list[dict[str, Any]]:
        """sshare/sreport rows: an account's own row (no user) and the caller's rows."""
        if not self.hides("usage", who):
            return rows
        return [r for r in rows if not r.get("user") or r.get("user") == who.user]

    def objects(self, objects: dict[str, Any], who: Any) -> dict[str, Any]:
        """sacctmgr's view of accounts, users and associations."""
        out = dict(objects)
        if self.hides("users", who):
            out["users"] = [u for u in objects.get("users", []) if u.get("name") == who.user]
            out["assocs"] = [a for a in objects.get("assocs", []) if not a.get("user") or a.get("user") == who.user]
        if self.hides("accounts", who):
            mine = {a.get("account") for a in objects.get("assocs", []) if a.get("user") == who.user}
            out["accounts"] = [a for a in objects.get("accounts", []) if a.get("name") in mine]
            out["assocs"] = [a for a in out.get("assocs", []) if a.get("account") in mine]
        return out
