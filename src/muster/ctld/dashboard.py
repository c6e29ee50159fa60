"""The live dashboard: read-only pages under ``/dash/`` and the JSON they poll.

| Route | Who | What |
|---|---|---|
| ``POST /v1/dashboard/token`` | a command's proven caller | a one-time login token (``dashauth``) |
| ``GET /dash/login?token=`` | the browser | the token exchanged for a session cookie, then ``/dash/`` |
| ``GET /dash/``, ``/dash/static/*`` | anyone | the page and its script and style (no data in them) |
| ``GET /dash/api/state?since=T`` | a session | nodes and their GPUs, the queue, samples newer than T |
| ``GET /dash/api/jobs/{id}`` | a session | one job: steps, GPUs, restarts, timeline, output paths |
| ``GET /dash/api/shares`` | a session | the fair-share tree (sshare's rows) |
| ``GET /dash/logout`` | the browser | the session cookie cleared |

Every ``/dash/api`` route is a GET that changes nothing; the caller is the session's user
(or, on the controller's Unix socket, the peer, as for commands) and sees what the commands
would show it: ``PrivateData`` (``ctld.privacy``) applies to the queue, the job details,
the jobs named on the node grid and the fair-share rows. See docs/dashboard.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from muster.core.arrays import parse_job_ref
from muster.core.errors import AuthError, InvalidJobId, MusterError, PermissionDenied
from muster.ctld import dashauth
from muster.ctld.context import Context, Handler
from muster.ctld.dashview import job_detail, node_view, queue
from muster.ctld.identity import Identity
from muster.ctld.jwtauth import token_in
from muster.ctld.privacy import PrivateData
from muster.protocol.httpd import PEER_KEY
from muster.protocol.replay import SignatureError

log = logging.getLogger("musterctld.dashboard")

CACHE_TTL = 1.0  # seconds one build of the cluster's view serves every page that polls

STATIC = Path(__file__).parent / "static" / "dash"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Nothing but the controller's own origin: no inline script, no framing, no referrer.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _assets() -> dict[str, tuple[bytes, str]]:
    """The page's files, read once (a few kilobytes)."""
    out = {}
    for path in sorted(STATIC.iterdir()):
        if path.suffix in _TYPES:
            out[path.name] = (path.read_bytes(), _TYPES[path.suffix])
    return out


def _refusal_page(message: str) -> Response:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>muster dashboard</title>"
        "<link rel='stylesheet' href='/dash/static/style.css'></head><body><main class='signin'>"
        f"<h1>muster dashboard</h1><p>{message}</p>"
        "<p>Run <code>muster dashboard</code> for a new link.</p></main></body></html>"
    )
    return Response(body, status_code=401, media_type="text/html", headers=_HEADERS)


class Dashboard:
    """The dashboard's handlers: the sign-in link (a command's request), the session's login
    and logout, the page and its files, and the JSON views the page polls."""

    def __init__(self, ctx: Context, caller: Any, private: PrivateData) -> None:
        self.ctx = ctx
        self.ctl = ctx.controller
        self.caller = caller
        self.private = private
        self.assets = _assets()
        self.redeemed = dashauth.Redeemed()
        # The cluster as one viewer sees it, kept CACHE_TTL seconds for every viewer who sees the
        # same (administrators and, without PrivateData=jobs, everyone; else each user): many
        # open pages cost the controller's loop one build per second, not one each.
        self.views: dict[int | None, tuple[float, dict[str, Any]]] = {}

    async def token(self, request: Request) -> JSONResponse:
        who: Identity = self.caller(request)
        if token_in(request.headers) is not None:  # a JWT must not outlive itself as a session
            raise PermissionDenied("a dashboard link is not given to a caller proven by a token")
        now = self.ctx.clock.now()
        text = dashauth.make_token(self.ctx.key, who.uid, who.gid, now)
        return JSONResponse(
            {
                "path": f"/dash/login?token={quote(text)}",
                "expires": now + dashauth.TOKEN_TTL,
                "user": who.user,
                "session_time": dashauth.SESSION_TTL,
            }
        )

    async def login(self, request: Request) -> Response:
        now = self.ctx.clock.now()
        try:
            ticket = dashauth.read_token(self.ctx.key, request.query_params.get("token", ""), now)
            self.ctx.verifier.guard.admit(ticket.time)  # issued before this controller started: refused
            self.redeemed.redeem(ticket, now)
        except (dashauth.DashAuthError, SignatureError) as e:
            client = request.client.host if request.client else "?"
            log.warning("refused a dashboard login from %s: %s", client, e)
            why = "already used" if str(e) == "already used" else "expired or not valid"
            return _refusal_page(f"This sign-in link is {why}.")
        who = self.ctl.identity(ticket.uid, ticket.gid)
        log.info("dashboard session for %s (uid %d)", who.user, who.uid)
        response = RedirectResponse("/dash/", status_code=303, headers=_HEADERS)
        response.set_cookie(
            dashauth.COOKIE,
            dashauth.make_session(self.ctx.key, ticket.uid, ticket.gid, now),
            max_age=int(dashauth.SESSION_TTL),
            path="/dash",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/dash/", status_code=303, headers=_HEADERS)
        response.delete_cookie(dashauth.COOKIE, path="/dash", httponly=True, samesite="strict")
        return response

    async def page(self, request: Request) -> Response:
        body, media = self.assets["index.html"]
        return Response(body, media_type=media, headers=_HEADERS)

    async def asset(self, request: Request) -> Response:
        found = self.assets.get(request.path_params["name"])
        if found is None or found[1].startswith("text/html"):
            return Response("not found", status_code=404, media_type="text/plain", headers=_HEADERS)
        return Response(found[0], media_type=found[1], headers=_HEADERS)

    def viewer(self, request: Request) -> Identity:
        """The session's user (or the Unix socket's peer, as for commands)."""
        peer = request.scope.get(PEER_KEY)
        if peer is not None:
            _pid, uid, gid = peer
            return self.ctl.identity(uid, gid)
        text = request.cookies.get(dashauth.COOKIE)
        if not text:
            raise AuthError("Not signed in: run `muster dashboard` for a sign-in link")
        try:
            ticket = dashauth.read_session(self.ctx.key, text, self.ctx.clock.now())
        except dashauth.DashAuthError as e:
            raise AuthError(f"Session {e}: run `muster dashboard` for a new sign-in link") from None
        return self.ctl.identity(ticket.uid, ticket.gid)

    def api(self, fn: Any) -> Any:
        async def wrapped(request: Request) -> Response:
            body: Response
            try:
                body = fn(request, self.viewer(request))
            except MusterError as e:
                body = JSONResponse({"error": str(e), "code": e.code}, status_code=e.http_status)
            except Exception as e:  # a bug: one line to the page, the traceback to the log
                log.exception("GET %s failed", request.url.path)
                body = JSONResponse({"error": f"Unexpected error: {type(e).__name__}", "code": "internal"}, 500)
            body.headers.update(_HEADERS)
            return body

        return wrapped

    def me(self, who: Identity) -> dict[str, Any]:
        return {"user": who.user, "uid": who.uid, "admin": who.admin}

    def cluster_view(self, who: Identity, now: float) -> dict[str, Any]:
        key = who.uid if self.private.hides("jobs", who) else None
        hit = self.views.get(key)
        if hit is not None and 0 <= now - hit[0] < CACHE_TTL:
            return hit[1]
        jobs = list(self.ctl.jobs.values())
        mine = self.private.jobs(jobs, who)
        visible = None if key is None else {j.job_id for j in mine}
        view = {
            "cluster": self.ctl.config.cluster_name,
            "now": now,
            "nodes": [node_view(n, visible) for n in self.ctl.nodes.values()],
            "partitions": [{"name": p.name, "nodes": list(p.nodes)} for p in self.ctl.config.partitions],
            "queue": queue(mine, now),
            "queue_total": len(mine),
            "totals": self.ctx.samples.current(self.ctl.nodes.values(), jobs, now),
        }
        if len(self.views) > 1000:
            self.views.clear()
        self.views[key] = (now, view)
        return view

    def state(self, request: Request, who: Identity) -> JSONResponse:
        try:
            since = float(request.query_params.get("since", "0"))
        except ValueError:
            since = 0.0
        view = self.cluster_view(who, self.ctx.clock.now())
        return JSONResponse(
            {
                "me": self.me(who),
                **view,
                "samples": self.ctx.samples.since(since),
                "sample_every": self.ctx.samples.every,
            }
        )

    def job(self, request: Request, who: Identity) -> JSONResponse:
        now = self.ctx.clock.now()
        try:
            ref = parse_job_ref(request.path_params["job_id"])
        except ValueError:
            raise InvalidJobId() from None
        found = self.ctl.queue.resolve(ref)
        if not found and ref.tasks is None:
            stored = self.ctl.store.get_job(ref.job_id)  # ended and purged from memory: the store keeps it
            found = [stored] if stored is not None else []
        found = self.private.jobs(found, who)
        if len(found) != 1:
            raise InvalidJobId()
        j = found[0]
        steps = self.ctx.steps.listing([j]) if j.is_active else []
        detail = job_detail(j, now, steps, self.ctl.store.events(j.job_id))
        return JSONResponse({"me": self.me(who), "now": now, "job": detail})

    def shares(self, request: Request, who: Identity) -> JSONResponse:
        a = self.ctl.accounting
        if a is None:
            return JSONResponse({"me": self.me(who), "rows": [], "available": False})
        a.charge(self.ctl.jobs, self.ctx.clock.now())
        a.refresh()
        rows = self.private.usage_rows(a.shares(), who)
        return JSONResponse({"me": self.me(who), "rows": rows, "available": True, "now": self.ctx.clock.now()})


def build_dashboard_routes(ctx: Context, caller: Any, handler: Handler, private: PrivateData) -> list[Route]:
    """The dashboard's routes; ``caller`` and ``handler`` are the API's (``ctld.api``), used
    by the token route, which a command calls."""
    dash = Dashboard(ctx, caller, private)
    return [
        Route("/v1/dashboard/token", handler(dash.token), methods=["POST"]),
        Route("/dash", lambda request: RedirectResponse("/dash/", status_code=308)),
        Route("/dash/", dash.page),
        Route("/dash/static/{name}", dash.asset),
        Route("/dash/login", dash.login),
        Route("/dash/logout", dash.logout),
        Route("/dash/api/state", dash.api(dash.state)),
        Route("/dash/api/jobs/{job_id}", dash.api(dash.job)),
        Route("/dash/api/shares", dash.api(dash.shares)),
    ]
