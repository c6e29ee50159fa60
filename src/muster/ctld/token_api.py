"""``POST /v1/token``: ``scontrol token [lifespan=S] [username=U]``, minted by the controller
(the only holder of the JWT key).

Body ``{"lifespan": S, "username": U}``, answer ``{"token": ..., "user": ..., "lifespan": S}``.
A user mints for themselves only; administrators may mint for anyone (Slurm's rule). A
caller proven by a token may not mint another one: a stolen token must not renew itself.
"""

from __future__ import annotations

import pwd
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import InvalidRequest, PermissionDenied
from muster.ctld.context import Context, Handler
from muster.ctld.jwtauth import DEFAULT_LIFESPAN, MAX_LIFESPAN, JwtAuth, token_in


class TokenBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lifespan: int = Field(DEFAULT_LIFESPAN, ge=1, le=MAX_LIFESPAN)
    username: str | None = Field(None, min_length=1, max_length=256)


def build_token_routes(
    ctx: Context, caller: Callable[[Request], Any], parse: Any, handler: Handler, auth: JwtAuth
) -> list[Route]:
    @handler
    async def token(request: Request) -> JSONResponse:
        who = caller(request)
        if token_in(request.headers) is not None:
            raise PermissionDenied("Unable to fetch JWT token: a token cannot mint another token")
        body = await parse(request, TokenBody)
        user = body.username or who.user
        if user != who.user and not who.admin:
            raise PermissionDenied("Unable to fetch JWT token: Access/permission denied")
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise InvalidRequest(f"Unable to fetch JWT token: Invalid user: {user}") from None
        text = auth.mint(user, body.lifespan, ctx.clock.now())
        return JSONResponse({"token": text, "user": user, "lifespan": body.lifespan})

    return [Route("/v1/token", token, methods=["POST"])]
