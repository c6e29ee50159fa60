"""The hash of a configuration file that an agent reports and the controller compares with
its own (``ctld.agents``): a node whose agent runs another muster.conf than the controller
is logged, shown by ``scontrol show node`` and counted in ``/metrics``
(docs/runbook.md, "bad config pushed").

Pure: the callers read the file. muster.conf includes no other file (``Include`` lines are
warned about and ignored, ``core.config``), so its bytes are the whole of it.
"""

from __future__ import annotations

import hashlib

__all__ = ["config_hash"]

HASH_CHARS = 16  # hex characters kept: enough to tell two files apart, short in a log line


def config_hash(data: bytes) -> str:
    """A short, stable hash of a configuration file's bytes (SHA-256, first 16 hex)."""
    return hashlib.sha256(data).hexdigest()[:HASH_CHARS]
