"""Accounts, users, associations and QOS: what ``sacctmgr`` manages.

The model is Slurm's: accounts form a tree under ``root``; an *association* ties a user to
an account (or is an account's own node in the tree) and carries its fair-share ``shares``
and its limits; a user has a ``DefaultAccount`` and an ``AdminLevel``; a QOS carries a
priority, flags and per-user, per-job and group limits.

``AssocDB`` holds them in memory and applies sacctmgr requests (``apply``): a request is
validated whole before anything changes, and ``apply`` returns the rows to persist (the
controller writes them to the store's ``acct_objects`` table, then answers). Limits given
on an account's association are inherited by the users below it where Slurm inherits them
(MaxJobs, MaxSubmitJobs, MaxWall, MaxTRES per job, QOS lists); Grp* limits count the whole
subtree.

A fresh database holds what ``sacctmgr`` shows on a new Slurm cluster: the ``root``
account with user ``root`` (Administrator) and the ``normal`` QOS.

The objects themselves are ``ctld.acct_objects``; sacctmgr's keys and values,
``ctld.acct_keys``.
"""

from __future__ import annotations

import json
from typing import Any

from muster.core.errors import InvalidRequest, MusterError, PermissionDenied
from muster.ctld.acct_keys import ASSOC_LIMITS, QOS_FIELDS, canonical_key, merge_tres, parse_value
from muster.ctld.acct_objects import Account, Assoc, Qos, User, assoc_key, from_data, to_data


class Change:
    """One row to persist: (kind, name, data) or a deletion (data None)."""

    __slots__ = ("kind", "name", "data")

    def __init__(self, kind: str, name: str, data: dict[str, Any] | None) -> None:
        self.kind, self.name, self.data = kind, name, data

    def __repr__(self) -> str:
        return f"Change({self.kind!r}, {self.name!r}, {'deleted' if self.data is None else 'set'})"


class Result:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changes: list[Change] = []
        self.nothing = False


class AssocDB:
    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.accounts: dict[str, Account] = {}
        self.users: dict[str, User] = {}
        self.assocs: dict[str, Assoc] = {}
        # slurmdbd.conf's Parameters=PreserveCaseUser (muster.conf's DbdParameters): else
        # user names are kept in lower case, as sacctmgr(1) says
        self.preserve_case_user = False
        self.qos: dict[str, Qos] = {}

    # --- loading --------------------------------------------------------------------------

    @classmethod
    def from_rows(cls, cluster: str, rows: list[tuple[str, str, str]]) -> AssocDB:
        db = cls(cluster)
        for kind, name, raw in rows:
            obj = from_data(kind, json.loads(raw))
            tables: dict[str, dict[str, Any]] = {
                "account": db.accounts,
                "user": db.users,
                "assoc": db.assocs,
                "qos": db.qos,
            }
            tables[kind][name] = obj
        return db

    def bootstrap(self) -> list[Change]:
        """The objects of a new cluster, when the database is empty."""
        if self.accounts or self.qos:
            return []
        self.accounts["root"] = Account("root", "default root account", "root")
        self.assocs[assoc_key("root")] = Assoc("root", "", None, 1)
        self.users["root"] = User("root", "root", "Administrator")
        self.assocs[assoc_key("root", "root")] = Assoc("root", "root", None, 1)
        self.qos["normal"] = Qos("normal", "Normal QOS default")
        return [
            Change("account", "root", to_data(self.accounts["root"])),
            Change("assoc", assoc_key("root"), to_data(self.assocs[assoc_key("root")])),
            Change("user", "root", to_data(self.users["root"])),
            Change("assoc", assoc_key("root", "root"), to_data(self.assocs[assoc_key("root", "root")])),
            Change("qos", "normal", to_data(self.qos["normal"])),
        ]

    # --- the tree -------------------------------------------------------------------------

    def user_name(self, user: str) -> str:
        """``user`` as sacctmgr keeps it: in lower case unless PreserveCaseUser."""
        return user if self.preserve_case_user else user.lower()

    def assoc(self, account: str, user: str = "") -> Assoc | None:
        """The association of ``account`` (any case: accounts are kept in lower case)."""
        return self.assocs.get(assoc_key(account.lower(), self.user_name(user)))

    def chain(self, a: Assoc) -> list[Assoc]:
        """``a``, then the account associations above it, up to root."""
        out = [a]
        account = a.account if a.is_user else a.parent
        seen = {a.key}
        while account is not None:
            node = self.assocs.get(assoc_key(account))
            if node is None or node.key in seen:
                break
            seen.add(node.key)
            out.append(node)
            account = node.parent
        return out

    def children(self, account: str) -> list[Assoc]:
        """User associations of ``account`` (by user), then its sub-accounts (by name)."""
        users = sorted((a for a in self.assocs.values() if a.is_user and a.account == account), key=lambda a: a.user)
        subs = sorted(
            (a for a in self.assocs.values() if not a.is_user and a.parent == account), key=lambda a: a.account
        )
        return users + subs

    def inherited(self, a: Assoc, name: str) -> Any:
        """A per-user limit of ``a``: its own, else the nearest one above it."""
        for node in self.chain(a):
            value = getattr(node.limits, name)
            if value:
                return value
            if value == 0 and name not in ("max_tres_per_job",):
                return value
        return None

    def allowed_qos(self, a: Assoc) -> list[str]:
        for node in self.chain(a):
            if node.qos:
                return node.qos
        return []

    def default_qos(self, a: Assoc) -> str | None:
        for node in self.chain(a):
            if node.default_qos:
                return node.default_qos
        return "normal" if "normal" in self.qos else None

    def default_account(self, user: str) -> str | None:
        u = self.users.get(self.user_name(user))
        if u is not None and u.default_account:
            return u.default_account
        return None

    def admin_level(self, user: str) -> str:
        u = self.users.get(self.user_name(user))
        return u.admin_level if u is not None else "None"

    # --- sacctmgr ---------------------------------------------------------------------------

    def apply(self, req: dict[str, Any], who_user: str, who_admin: bool) -> Result:
        """Validate and apply one sacctmgr add/modify/delete; raise MusterError and change
        nothing when the request is wrong."""
        if not who_admin and self.admin_level(who_user) not in ("Administrator", "Operator"):
            raise PermissionDenied("Your user doesn't have privilege to perform this action")
        verb = str(req.get("verb", "")).lower()
        entity = str(req.get("entity", "")).lower()
        names = [str(n) for n in req.get("names") or []]
        where = {canonical_key(k): [str(x) for x in v] for k, v in (req.get("where") or {}).items()}
        sets = {canonical_key(k): parse_value(canonical_key(k), str(v)) for k, v in (req.get("set") or {}).items()}
        for key in ("Cluster",):
            where.pop(key, None)
            sets.pop(key, None)
        if "Name" in where:
            names += where.pop("Name")
        if entity == "account":
            names = [n.lower() for n in names]
        elif entity == "user" and not self.preserve_case_user:
            names = [n.lower() for n in names]
        _lowercase(where, sets)
        if "User" in where and not self.preserve_case_user:
            where["User"] = [v.lower() for v in where["User"]]
        fn = getattr(self, f"_{verb}_{entity}", None)
        if fn is None:
            raise InvalidRequest(f"Unknown request: {verb} {entity}")
        saved = self.rows()
        try:
            result: Result = fn(names, where, sets)
            return result
        except MusterError:
            self._restore(saved)
            raise

    def rows(self) -> list[tuple[str, str, str]]:
        """Every object as a (kind, name, JSON) row, as the store keeps them."""
        out = []
        for kind, table in (
            ("account", self.accounts),
            ("user", self.users),
            ("assoc", self.assocs),
            ("qos", self.qos),
        ):
            out += [(kind, name, json.dumps(to_data(obj))) for name, obj in table.items()]
        return out

    def _restore(self, rows: list[tuple[str, str, str]]) -> None:
        other = AssocDB.from_rows(self.cluster, rows)
        self.accounts, self.users, self.assocs, self.qos = (other.accounts, other.users, other.assocs, other.qos)

    # add ---------------------------------------------------------------------------------

    def _add_account(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        if not names:
            raise InvalidRequest("You need to specify an account name")
        parent = sets.pop("Parent", "root")
        if parent not in self.accounts:
            raise InvalidRequest(f" Parent account '{parent}' doesn't exist.")
        self._check_keys(sets, {"Description", "Organization", "Fairshare", "QOS", "DefaultQOS", *ASSOC_LIMITS})
        new = [n for n in names if n not in self.accounts]
        if not new:
            res.nothing = True
            res.lines.append(" Nothing new added.")
            return res
        res.lines.append(" Adding Account(s)")
        for name in new:
            _check_name(name)
            acct = Account(
                name, sets.get("Description", name), sets.get("Organization", parent if parent != "root" else name)
            )
            self.accounts[name] = acct
            a = Assoc(name, "", parent)
            self._set_assoc(a, sets)
            self.assocs[a.key] = a
            res.lines.append(f"  {name}")
            res.changes += [Change("account", name, to_data(acct)), Change("assoc", a.key, to_data(a))]
        res.lines += [
            " Settings",
            f"  Description     = {sets.get('Description', 'Account Name')}",
            f"  Organization    = {sets.get('Organization', 'Parent/Account Name')}",
            " Associations",
        ]
        res.lines += [f"  A = {n:<10} C = {self.cluster:<10}" for n in new]
        res.lines += [" Settings", f"  Parent        = {parent}"]
        return res

    def _add_user(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        if not names:
            raise InvalidRequest("You need to specify a user name")
        accounts = [a for a in (sets.pop("Account", None) or "").split(",") if a]
        accounts += where.get("Account", [])
        default = sets.pop("DefaultAccount", None)
        if not accounts and default:
            accounts = [default]
        if not accounts:
            raise InvalidRequest(" Need a default account for these users to add.")
        for acct in accounts + ([default] if default else []):
            if acct not in self.accounts:
                raise InvalidRequest(
                    f" This account '{acct}' doesn't exist.\n        Contact your admin to add this account."
                )
        level = sets.pop("AdminLevel", None)
        self._check_keys(sets, {"Fairshare", "QOS", "DefaultQOS", *ASSOC_LIMITS})
        added_users, added_assocs = [], []
        for name in names:
            _check_name(name)
            user = self.users.get(name)
            if user is None:
                user = User(name, default or accounts[0], level or "None")
                self.users[name] = user
                added_users.append(name)
                res.changes.append(Change("user", name, to_data(user)))
            elif level is not None or default is not None:
                user.admin_level = level or user.admin_level
                user.default_account = default or user.default_account
                res.changes.append(Change("user", name, to_data(user)))
            for acct in accounts:
                if self.assoc(acct, name) is not None:
                    continue
                a = Assoc(acct, name)
                self._set_assoc(a, sets)
                self.assocs[a.key] = a
                added_assocs.append(a)
                res.changes.append(Change("assoc", a.key, to_data(a)))
        if not added_users and not added_assocs:
            res.nothing = True
            res.lines.append(" Nothing new added.")
            return res
        if added_users:
            res.lines.append(" Adding User(s)")
            res.lines += [f"  {n}" for n in added_users]
            res.lines += [" Settings =", f"  Default Account = {default or accounts[0]}"]
            if level:
                res.lines.append(f"  Admin Level     = {level}")
        res.lines.append(" Associations =")
        res.lines += [f"  U = {a.user:<9} A = {a.account:<10} C = {self.cluster:<10}" for a in added_assocs]
        return res

    def _add_qos(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        if not names:
            raise InvalidRequest("You need to specify a QOS name")
        self._check_keys(sets, set(QOS_FIELDS))
        new = [n for n in names if n not in self.qos]
        if not new:
            res.nothing = True
            res.lines.append(" Nothing new added.")
            return res
        res.lines.append(" Adding QOS(s)")
        for name in new:
            _check_name(name)
            q = Qos(name, description=name)
            self._set_qos(q, sets)
            self.qos[name] = q
            res.lines.append(f"  {name}")
            res.changes.append(Change("qos", name, to_data(q)))
        res.lines += [" Settings", f"  Description    = {sets.get('Description', 'QOS Name')}"]
        return res

    _create_account = _add_account
    _create_user = _add_user
    _create_qos = _add_qos

    # modify ------------------------------------------------------------------------------

    def _modify_account(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        names = names + where.pop("Account", [])
        targets = [self.accounts[n] for n in names if n in self.accounts] if names else list(self.accounts.values())
        self._check_keys(
            sets, {"Description", "Organization", "Fairshare", "QOS", "DefaultQOS", "Parent", *ASSOC_LIMITS}
        )
        if not targets:
            res.nothing = True
            res.lines.append(" Nothing modified")
            return res
        acct_sets = {k: sets.pop(k) for k in ("Description", "Organization") if k in sets}
        parent = sets.pop("Parent", None)
        if parent is not None:
            if parent not in self.accounts:
                raise InvalidRequest(f" Parent account '{parent}' doesn't exist.")
            for t in targets:
                if t.name == "root" or parent in [x.account for x in self._subtree(t.name)]:
                    raise InvalidRequest(f"Can't move account {t.name} under {parent}")
        if acct_sets:
            res.lines.append(" Modified accounts...")
            for t in targets:
                t.description = acct_sets.get("Description", t.description)
                t.organization = acct_sets.get("Organization", t.organization)
                res.lines.append(f"  {t.name}")
                res.changes.append(Change("account", t.name, to_data(t)))
        if sets or parent is not None:
            res.lines.append(" Modified account associations...")
            for t in targets:
                a = self.assocs[assoc_key(t.name)]
                self._set_assoc(a, sets)
                if parent is not None:
                    a.parent = parent
                res.lines.append(f"  C = {self.cluster:<10} A = {t.name:<18} of {a.parent or ''}")
                res.changes.append(Change("assoc", a.key, to_data(a)))
        return res

    def _modify_user(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        names = names + where.pop("User", [])
        accounts = where.pop("Account", [])
        users = [self.users[n] for n in names if n in self.users] if names else list(self.users.values())
        self._check_keys(sets, {"DefaultAccount", "AdminLevel", "Fairshare", "QOS", "DefaultQOS", *ASSOC_LIMITS})
        if not users:
            res.nothing = True
            res.lines.append(" Nothing modified")
            return res
        user_sets = {k: sets.pop(k) for k in ("DefaultAccount", "AdminLevel") if k in sets}
        if "DefaultAccount" in user_sets:
            for u in users:
                if self.assoc(user_sets["DefaultAccount"], u.name) is None:
                    raise InvalidRequest(
                        f" User {u.name} has no association with account {user_sets['DefaultAccount']}"
                    )
        if user_sets:
            res.lines.append(" Modified users...")
            for u in users:
                u.default_account = user_sets.get("DefaultAccount", u.default_account)
                u.admin_level = user_sets.get("AdminLevel", u.admin_level)
                res.lines.append(f"  {u.name}")
                res.changes.append(Change("user", u.name, to_data(u)))
        if sets:
            touched = [
                a
                for a in self.assocs.values()
                if a.is_user and a.user in {u.name for u in users} and (not accounts or a.account in accounts)
            ]
            if not touched:
                res.nothing = True
                res.lines.append(" Nothing modified")
                return res
            res.lines.append(" Modified user associations...")
            for a in sorted(touched, key=lambda a: a.key):
                self._set_assoc(a, sets)
                res.lines.append(f"  C = {self.cluster:<10} A = {a.account:<10} U = {a.user:<9}")
                res.changes.append(Change("assoc", a.key, to_data(a)))
        return res

    def _modify_qos(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        targets = [self.qos[n] for n in names if n in self.qos] if names else list(self.qos.values())
        self._check_keys(sets, set(QOS_FIELDS))
        if not targets:
            res.nothing = True
            res.lines.append(" Nothing modified")
            return res
        res.lines.append(" Modified qos...")
        for q in targets:
            self._set_qos(q, sets)
            res.lines.append(f"  {q.name}")
            res.changes.append(Change("qos", q.name, to_data(q)))
        return res

    # delete ------------------------------------------------------------------------------

    def _subtree(self, account: str) -> list[Assoc]:
        out = []
        for child in self.children(account):
            out.append(child)
            if not child.is_user:
                out += self._subtree(child.account)
        return out

    def _delete_account(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        names = names + where.pop("Account", [])
        targets = [n for n in names if n in self.accounts]
        if "root" in targets:
            raise InvalidRequest("You can't delete the root account")
        if not targets:
            res.nothing = True
            res.lines.append(" Nothing deleted")
            return res
        for name in targets:
            subs = [a.account for a in self._subtree(name) if not a.is_user and a.account not in targets]
            if subs:
                raise InvalidRequest(f"Account {name} has sub-accounts ({', '.join(subs)}): delete them first")
        res.lines.append(" Deleting accounts...")
        for name in targets:
            for a in [a for a in self.assocs.values() if a.account == name]:
                del self.assocs[a.key]
                res.changes.append(Change("assoc", a.key, None))
            del self.accounts[name]
            res.changes.append(Change("account", name, None))
            res.lines.append(f"  {name}")
        for user in list(self.users.values()):  # users left without an association go too
            left = [a.account for a in self.assocs.values() if a.user == user.name]
            if not left:
                del self.users[user.name]
                res.changes.append(Change("user", user.name, None))
            elif user.default_account not in left:
                user.default_account = left[0]
                res.changes.append(Change("user", user.name, to_data(user)))
        return res

    def _delete_user(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        names = names + where.pop("User", [])
        accounts = where.pop("Account", [])
        targets = [n for n in names if n in self.users]
        if not targets:
            res.nothing = True
            res.lines.append(" Nothing deleted")
            return res
        res.lines.append(" Deleting user associations..." if accounts else " Deleting users...")
        for name in targets:
            for a in [a for a in self.assocs.values() if a.user == name and (not accounts or a.account in accounts)]:
                del self.assocs[a.key]
                res.changes.append(Change("assoc", a.key, None))
                if accounts:
                    res.lines.append(f"  C = {self.cluster:<10} A = {a.account:<10} U = {name:<9}")
            left = [a for a in self.assocs.values() if a.user == name]
            if not left:
                del self.users[name]
                res.changes.append(Change("user", name, None))
                if not accounts:
                    res.lines.append(f"  {name}")
            elif self.users[name].default_account not in [a.account for a in left]:
                self.users[name].default_account = left[0].account
                res.changes.append(Change("user", name, to_data(self.users[name])))
        return res

    def _delete_qos(self, names: list[str], where: dict[str, list[str]], sets: dict[str, Any]) -> Result:
        res = Result()
        targets = [n for n in names if n in self.qos]
        if not targets:
            res.nothing = True
            res.lines.append(" Nothing deleted")
            return res
        res.lines.append(" Deleting QOS(s)...")
        for name in targets:
            del self.qos[name]
            res.changes.append(Change("qos", name, None))
            res.lines.append(f"  {name}")
        return res

    _remove_account = _delete_account
    _remove_user = _delete_user
    _remove_qos = _delete_qos
    _update_account = _modify_account
    _update_user = _modify_user
    _update_qos = _modify_qos

    # helpers -----------------------------------------------------------------------------

    @staticmethod
    def _check_keys(sets: dict[str, Any], allowed: set[str]) -> None:
        for key in sets:
            if key not in allowed:
                raise InvalidRequest(f"Unknown option: {key}")

    def _set_assoc(self, a: Assoc, sets: dict[str, Any]) -> None:
        for key, value in sets.items():
            if key == "Fairshare":
                a.shares = 1 if value is None else int(value)
            elif key == "QOS":
                for q in value:
                    if q.lstrip("+-") not in self.qos:
                        raise InvalidRequest(f" Invalid qos specification: {q.lstrip('+-')}")
                plain = [q for q in value if q[0] not in "+-"]
                current = (
                    plain or list(a.qos) or list(self.allowed_qos(a)) or (["normal"] if "normal" in self.qos else [])
                )
                for q in value:
                    if q.startswith("+") and q[1:] not in current:
                        current.append(q[1:])
                    elif q.startswith("-") and q[1:] in current:
                        current.remove(q[1:])
                a.qos = current
            elif key == "DefaultQOS":
                if value not in self.qos:
                    raise InvalidRequest(f" Invalid qos specification: {value}")
                a.default_qos = value
            elif key in ASSOC_LIMITS:
                attr = ASSOC_LIMITS[key]
                if isinstance(value, dict):
                    setattr(a.limits, attr, merge_tres(getattr(a.limits, attr), value))
                else:
                    setattr(a.limits, attr, value)

    def _set_qos(self, q: Qos, sets: dict[str, Any]) -> None:
        for name in sets.get("Preempt") or ():
            if name not in self.qos and name != q.name:
                raise InvalidRequest(f" Invalid qos specification: {name}")
        for key, value in sets.items():
            attr = QOS_FIELDS[key]
            if isinstance(value, dict):
                setattr(q, attr, merge_tres(getattr(q, attr), value))
            elif key == "Priority":
                q.priority = max(0, int(value))
            elif key == "UsageFactor":
                q.usage_factor = float(value)
            else:
                setattr(q, attr, value)

    def objects(self) -> dict[str, Any]:
        """Everything, as JSON-able dicts (what ``sacctmgr show`` formats)."""
        return {
            "cluster": self.cluster,
            "accounts": [to_data(a) for a in sorted(self.accounts.values(), key=lambda a: a.name)],
            "users": [to_data(u) for u in sorted(self.users.values(), key=lambda u: u.name)],
            "assocs": [dict(to_data(a), depth=len(self.chain(a)) - 1) for a in self.tree_order()],
            "qos": [to_data(q) for q in sorted(self.qos.values(), key=lambda q: q.name)],
        }

    def tree_order(self) -> list[Assoc]:
        """Associations depth first from root: an account, its users, then its sub-accounts."""
        root = self.assocs.get(assoc_key("root"))
        if root is None:
            return sorted(self.assocs.values(), key=lambda a: a.key)
        out = [root]
        out += self._subtree("root")
        missing = [a for a in self.assocs.values() if a not in out]
        return out + sorted(missing, key=lambda a: a.key)


def _check_name(name: str) -> None:
    if not name or any(c in name for c in " |,='\"") or len(name) > 64:
        raise InvalidRequest(f"Invalid name: {name!r}")


# Values sacctmgr keeps in lower case, as Slurm does (an account named ``Foo`` is ``foo``;
# so are its description and organization); QOS names are kept as given, user names in lower
# case unless PreserveCaseUser (``AssocDB.preserve_case_user``).
_LOWERCASED = ("Account", "Parent", "DefaultAccount", "Description", "Organization")


def _lowercase(where: dict[str, list[str]], sets: dict[str, Any]) -> None:
    for key in _LOWERCASED:
        if key in where:
            where[key] = [v.lower() for v in where[key]]
        if isinstance(sets.get(key), str):
            sets[key] = sets[key].lower()


def preserves_user_case(parameters: str | None) -> bool:
    """slurmdbd.conf(5)'s ``Parameters``: ``PreserveCaseUser`` or ``PreserveCaseAll``."""
    words = {w.strip().lower() for w in (parameters or "").split(",")}
    return bool(words & {"preservecaseuser", "preservecaseall"})
