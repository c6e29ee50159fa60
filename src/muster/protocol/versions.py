"""The wire's protocol number: what this build speaks, the range it accepts, how a peer says its own.

One integer names the language of every message between the commands, the controller and
the agents (``messages`` holds its types). It grows by one when a release changes a message
in a way an older reader would refuse or misread (a new field, a new route). A daemon
accepts peers from ``MIN_PROTOCOL`` to ``MAX_PROTOCOL``: the release before this one
(N-1, docs/upgrade.md) and its own. Beyond that range a peer is refused with one line that
names both sides' protocols and builds and says which side to upgrade, never with a
signature error.

* Protocol 1: muster 0.1.0.
* Protocol 2: muster 0.2.0 (v0.2.0, commit 22f68a7). It sent no protocol header: a
  request without one is taken as protocol 2 (``LEGACY``).
* Protocol 3: muster 0.3.0 (this milestone): ``Register`` says the node's sockets, cores
  per socket, threads per core and whether it emulates; a job's spec carries ``mail_type``,
  ``mail_user`` and ``rlimits`` (the submit shell's resource limits); the agent route
  ``/v1/hang_evidence`` and ``/v1/suspend``; ``Register.containment``. These are sent only to peers of protocol 3 or later
  (``messages.dump``, ``ROUTE_SINCE``).
  Also in protocol 3: the agent route ``/v1/step_stats`` (sstat, ``scontrol listpids``).

Every request carries ``X-Muster-Protocol`` (the integer) and, from the daemons,
``X-Muster-Version`` (the build, for the message). The headers are not signed: they only
choose how a message is read, and a forged one can only get the message refused.

The commands import this module: it stays import-light (no ``re``, ``typing``, ``enum``).
"""

PROTOCOL = 3
MIN_PROTOCOL = 2  # release N-1: muster 0.2.0
MAX_PROTOCOL = PROTOCOL
LEGACY = 2  # what a request without a protocol header speaks (muster 0.2.0 sent none)

# Agent routes a protocol added: the controller calls them only on agents that speak it
# (an older agent would answer 404). ``/v1/register`` is not gated: a starting controller
# calls agents that have not registered yet, and an old one's 404 is harmless.
ROUTE_SINCE = {"/v1/step_stats": 3, "/v1/hang_evidence": 3, "/v1/allocation": 3, "/v1/suspend": 3}

PROTOCOL_HEADER = "x-muster-protocol"
VERSION_HEADER = "x-muster-version"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "LEGACY",
    "MAX_PROTOCOL",
    "MIN_PROTOCOL",
    "PROTOCOL",
    "PROTOCOL_HEADER",
    "ROUTE_SINCE",
    "VERSION_HEADER",
    "ProtocolMismatch",
    "build",
    "check",
    "headers",
    "peer_protocol",
    "refusal_text",
]


class ProtocolMismatch(ValueError):
    """A peer outside the supported range; ``str()`` says both sides' protocols and builds."""

    status = 426  # HTTP's "Upgrade Required"


def build() -> str:
    """This build's version (``muster.__version__``)."""
    import muster

    return str(muster.__version__)


def headers() -> "dict[str, str]":
    """The headers that say which protocol (and build) a request is written in."""
    return {PROTOCOL_HEADER: str(PROTOCOL), VERSION_HEADER: build()}


def peer_protocol(head: "Mapping[str, str]") -> int:
    """The protocol a request's (lower-cased) headers say; ``LEGACY`` without the header,
    0 for one that is no integer (refused: outside every range)."""
    text = head.get(PROTOCOL_HEADER)
    if text is None:
        return LEGACY
    try:
        return int(text)
    except ValueError:
        return 0


def refusal_text(kind: str, name: str, protocol: int, peer_build: str, me: str) -> str:
    """The one line that refuses a peer (``kind`` ``agent``, ``controller``, ``client``;
    ``name`` its name, or "") speaking ``protocol``; ``me``: ``this controller``..."""
    peer = f"{kind} {name}" if name else kind
    side = f"the {kind}" if protocol < MIN_PROTOCOL else me
    return (
        f"{peer} speaks protocol {protocol} (muster {peer_build or 'unknown'}), "
        f"{me} {MIN_PROTOCOL}..{MAX_PROTOCOL} (muster {build()}): upgrade {side}"
    )


def check(head: "Mapping[str, str]", kind: str, name: str, me: str) -> int:
    """The peer's protocol when this build accepts it; else ``ProtocolMismatch``. ``kind``
    and ``name`` name the sender as the message should (``agent``, ``gpu1``), ``me`` this
    side (``this controller``, ``this agent``)."""
    protocol = peer_protocol(head)
    if MIN_PROTOCOL <= protocol <= MAX_PROTOCOL:
        return protocol
    raise ProtocolMismatch(refusal_text(kind, name, protocol, head.get(VERSION_HEADER, ""), me))
