"""musterrestd's routes: Slurm's REST API (OpenAPI plugins ``slurmctld`` and ``slurmdbd``,
data_parser v0.0.40 to v0.0.45: each version a view of one model, ``rest.versions``) in front
of the controller's own API.

Every request is made to the controller *as the caller*: with the caller's token
(``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN`` or ``Authorization: Bearer``), which the
controller verifies itself, or, on a Unix socket, as musterrestd's own user when the peer
(SO_PEERCRED) is that very user (Slurm's ``rest_auth/local``). musterrestd holds no key and
decides nothing about permissions: the controller applies the same rules as for the
commands. See docs/rest.md and docs/security.md.

The handlers are ``rest.routes``' (by plugin and resource, over one ``routes.kit.Kit``); this
module lists each served version's paths to them.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.client.settings import ClientSettings
from muster.rest import layout, versions
from muster.rest.routes.cluster import ClusterRoutes
from muster.rest.routes.jobs import JobRoutes
from muster.rest.routes.kit import ERRORS, INVALID, Kit
from muster.rest.routes.slurmdb import AccountingRoutes

log = logging.getLogger("musterrestd")

VERSION = "v0.0.40"
SLURM = f"/slurm/{VERSION}"
SLURMDB = f"/slurmdb/{VERSION}"
VERSIONS = versions.VERSIONS  # every version served: one model, each version a view (rest.versions)

# Guarded's refusals (protocol.httpd: a body too large, too much in flight, too many
# failed authentications) as Slurm's error numbers and texts.
_REFUSALS = {"busy": ERRORS["busy"], "rate_limited": ERRORS["auth"]}


def refusal_document(scope: dict[str, Any], status: int, message: str, code: str, cluster: str = "") -> dict[str, Any]:
    """What musterrestd answers for a request its server refused before any route saw it
    (``httpd.make_server``'s ``refusal``): Slurm's ``errors[]`` document, as for any error."""
    number, text = _REFUSALS.get(code, INVALID)
    command = [str(scope.get("method", "")), str(scope.get("path", ""))]
    return layout.error_document(command, message, text, number, "musterrestd", cluster)


def openapi_document() -> dict[str, Any]:
    text = resources.files("muster.rest").joinpath("openapi.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def build_app(settings: ClientSettings, local: bool = True) -> Starlette:
    """The REST API; ``local``: a Unix-socket peer that is musterrestd's own user needs no token."""
    kit = Kit(settings, local)
    route = kit.route
    cluster_routes, job_routes, db_routes = ClusterRoutes(kit), JobRoutes(kit), AccountingRoutes(kit)
    doc = versions.combined_document(openapi_document())

    async def openapi(req: Request) -> JSONResponse:
        return JSONResponse(doc)

    def version_routes(v: str) -> list[Route]:
        """One version's routes: the same handlers, each answer shown as ``v`` shows it."""
        s, db = f"/slurm/{v}", f"/slurmdb/{v}"
        c, j, a = cluster_routes, job_routes, db_routes
        out = [
            Route(f"{s}/ping", route(c.ping)),
            Route(f"{s}/diag", route(c.diag)),
            Route(f"{s}/jobs", route(j.jobs)),
            Route(f"{s}/job/submit", route(j.submit), methods=["POST"]),
            Route(f"{s}/job/{{job_id}}", route(j.job), methods=["GET"]),
            Route(f"{s}/job/{{job_id}}", route(j.update_job), methods=["POST"]),
            Route(f"{s}/job/{{job_id}}", route(j.cancel_job), methods=["DELETE"]),
            Route(f"{s}/nodes", route(c.nodes)),
            Route(f"{s}/node/{{node_name}}", route(c.node), methods=["GET"]),
            Route(f"{s}/node/{{node_name}}", route(c.update_node), methods=["POST"]),
            Route(f"{s}/partitions", route(c.partitions)),
            Route(f"{s}/partition/{{partition_name}}", route(c.partition)),
            Route(f"{s}/reservations", route(c.reservations)),
            Route(f"{s}/reservation/{{reservation_name}}", route(c.reservation)),
            Route(f"{s}/shares", route(c.shares)),
            Route(f"{db}/jobs", route(a.db_jobs)),
            Route(f"{db}/job/{{job_id}}", route(a.db_job)),
            Route(f"{db}/accounts", route(a.accounts)),
            Route(f"{db}/users", route(a.users)),
            Route(f"{db}/associations", route(a.associations)),
            Route(f"{db}/qos", route(a.qos)),
        ]
        if versions.at_least(v, versions.REQUEUE_SINCE):
            out.append(Route(f"{s}/job/{{job_id}}/requeue", route(j.requeue_job), methods=["GET"]))
            out.append(Route(f"{s}/jobs/requeue", route(j.requeue_jobs), methods=["POST"]))
        return out

    async def no_route(req: Request, exc: Exception) -> JSONResponse:
        """An unknown URL (another plugin version included) or method, in ``errors[]`` form."""
        status = getattr(exc, "status_code", 404)
        path = req.url.path
        # "/slurm/v0.0.40" and the like: the plugins and versions served, read from the routes
        prefixes = {"/".join(str(getattr(r, "path", "")).split("/")[:3]) for r in req.app.routes}
        parts = path.split("/")
        if status == 405:
            description = f"Method {req.method} not allowed for {path}"
        elif len(parts) > 2 and parts[1] in ("slurm", "slurmdb") and f"/{parts[1]}/{parts[2]}" not in prefixes:
            speaks = ", ".join(sorted({p.rsplit("/", 1)[1] for p in prefixes if p.startswith(f"/{parts[1]}/")}))
            description = f"Unsupported API version {parts[2]!r} in {path}: this server speaks {speaks}"
        else:
            description = f"Unable to find requested URL: {path}"
        document = layout.error_document(
            [req.method, path], description, INVALID[1], INVALID[0], "musterrestd", kit.cluster
        )
        return JSONResponse(document, status_code=status)

    return Starlette(
        exception_handlers={404: no_route, 405: no_route},
        routes=[
            Route("/openapi/v3", openapi),
            Route("/openapi.json", openapi),
            *(r for v in VERSIONS for r in version_routes(v)),
        ],
    )
