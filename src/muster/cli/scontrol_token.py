"""``scontrol token [lifespan=S] [username=U]``: ask the controller for a JSON Web Token and
print ``SLURM_JWT=<token>`` (so ``export $(scontrol token)`` sets it), as Slurm does.

The controller holds the JWT key and mints the token for the caller it proved; only
administrators may ask for another user's token. Nothing here decodes or signs tokens, so
the commands never import a JWT library.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError
from muster.client.controller import connect, connect_message

PROG = "scontrol"


def parse_token_args(words: list[str]) -> dict[str, object]:
    """``lifespan=S`` and ``username=U`` (keys case-blind) into the request body."""
    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        key = key.lower()
        if not eq:
            raise CommandError(f"Invalid token option: {word}")
        if key == "lifespan":
            text = value.strip()
            if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**31:
                raise CommandError(f"Invalid lifespan: {value}")
            body["lifespan"] = int(text)
        elif key == "username":
            if not value.strip():
                raise CommandError("Invalid username: (empty)")
            body["username"] = value.strip()
        else:
            raise CommandError(f"Invalid token option: {word}")
    return body


def token(words: list[str]) -> int:
    from muster.protocol.client import ApiError, ConnectError

    body = parse_token_args(words)
    try:
        answer = connect(PROG).post("/v1/token", body)
    except ConnectError as e:
        raise CommandError(f"Unable to fetch JWT token: {connect_message(e)}") from None
    except ApiError as e:
        message = e.message
        if not message.startswith("Unable to fetch JWT token"):
            message = f"Unable to fetch JWT token: {message}"
        raise CommandError(message) from None
    sys.stdout.write(f"SLURM_JWT={answer.get('token', '')}\n")
    return 0
