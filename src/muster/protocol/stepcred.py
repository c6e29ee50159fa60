"""Step credentials: the controller's signed permission to run one job step.

When the controller allocates a step it writes a *grant*, a JSON text naming the job, the
step, the user the tasks run as, the nodes and the task layout, when it was issued and
when it expires, and
signs that exact text with the cluster key (HMAC-SHA256, purpose-tagged so that no other
signed message can pass for a grant). ``srun`` cannot forge or alter it: it only carries it,
verbatim, to each node's agent, which checks the signature and the expiry before it starts
anything, and starts the step's tasks only as the user the grant names.

A grant can be presented to every node of the step (that is its purpose) but an agent
launches a given (job, step) once: a replayed launch is refused there, by the agent's list
of launched steps while it runs and, after a restart, by its ledger of the grants it
launched (``protocol.replay.GrantLedger``, on disk until they expire). A node that is not
in the grant's node set refuses it too.

A *watch* (``sign_watch``) is the controller's signed permission to see a running step's
I/O (``sattach``): it names the job, the step, the nodes and who asked, under a purpose tag
of its own, so that it can neither launch anything nor pass for a grant.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = ["GrantError", "GRANT_TTL", "attach_token", "sign_grant", "sign_watch", "verify_grant", "verify_watch"]

GRANT_TTL = 300.0  # seconds a grant may wait between the controller and the agents
_PURPOSE = b"muster-step-grant\n"
_WATCH = b"muster-step-watch\n"


class GrantError(Exception):
    """A grant that must not be honoured; ``str()`` says why."""


def sign_grant(key: bytes, grant: dict[str, Any]) -> tuple[str, str]:
    """The grant as text and its signature."""
    text = json.dumps(grant, separators=(",", ":"), sort_keys=True)
    return text, _mac(key, text)


def verify_grant(key: bytes, text: str, sig: str, now: float) -> dict[str, Any]:
    """The grant's content when ``sig`` signs ``text`` and it has not expired."""
    return _verify(key, text, sig, now, _PURPOSE)


def sign_watch(key: bytes, watch: dict[str, Any]) -> tuple[str, str]:
    """A watch (``job_id``, ``step_id``, ``nodes``, ``user``, ``issued``, ``expires``) as
    text and its signature: sattach's permission to see and feed a running step's I/O."""
    text = json.dumps(watch, separators=(",", ":"), sort_keys=True)
    return text, _mac(key, text, _WATCH)


def verify_watch(key: bytes, text: str, sig: str, now: float) -> dict[str, Any]:
    """The watch's content when ``sig`` signs ``text`` as a watch and it has not expired."""
    return _verify(key, text, sig, now, _WATCH)


def _verify(key: bytes, text: str, sig: str, now: float, purpose: bytes) -> dict[str, Any]:
    if not isinstance(text, str) or not isinstance(sig, str):
        raise GrantError("malformed step credential")
    if not hmac.compare_digest(_mac(key, text, purpose), sig):
        raise GrantError("invalid step credential signature")
    try:
        grant = json.loads(text)
    except ValueError:
        raise GrantError("malformed step credential") from None
    if not isinstance(grant, dict):
        raise GrantError("malformed step credential")
    try:
        expires, issued = float(grant["expires"]), float(grant["issued"])
    except (KeyError, TypeError, ValueError):
        raise GrantError("malformed step credential") from None
    if expires < now:
        raise GrantError("expired step credential")
    if issued > expires:
        raise GrantError("malformed step credential")
    return grant


def attach_token(sig: str) -> str:
    """The token that names srun's stream of a step on a node (``/v1/steps/attach``, its
    stdin and signals), derived from the step credential's signature: srun knows it before
    the launch answers, so that an agent killed between starting the tasks and answering
    leaves srun able to find them on the next agent. Only the credential's holders (srun,
    the controller, the step's agents) can compute it."""
    return hashlib.sha256(b"muster-step-attach\n" + sig.encode()).hexdigest()[:32]


def _mac(key: bytes, text: str, purpose: bytes = _PURPOSE) -> str:
    return hmac.new(key, purpose + text.encode(), hashlib.sha256).hexdigest()
