"""HTTP routes of musterctld: validation, authentication and authorization only.

Every request body is validated by a pydantic model (a malformed body gets a 400 naming
the field); the caller's identity comes from the transport (SO_PEERCRED on the Unix
socket, or a credential on TCP: agent-signed, or MUNGE with
``AuthType=auth/munge``, see ``ctld.usercred``); agent routes require a request signed for
``ctld`` by the node it names. Over TCP nothing is served without one or the other (401,
one log line). ``PrivateData`` (``ctld.privacy``) decides what of other users a caller
sees. State changes are delegated to ``Controller``; side effects to the app (``context.Context``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from muster.core.arrays import JobRef, parse_array, parse_job_ref
from muster.core.errors import AuthError, InvalidJobId, InvalidRequest, MusterError, ResourceBusy, StaleCredential
from muster.core.hetjob import NOT_WHOLE
from muster.core.hostlist import compress, expand
from muster.core.job import Job
from muster.core.states import JobState
from muster.core.topoconf import show_topology
from muster.ctld.acct_api import accounting_routes
from muster.ctld.actions import parse_signal
from muster.ctld.agent_api import build_agent_routes
from muster.ctld.bodies import (
    HoldBody,
    NodeUpdateBody,
    RequeueBody,
    ReservationBody,
    SignalBody,
    SpecModel,
    SubmitBody,
    UpdateBody,
    known_only,
)
from muster.ctld.columns import PartitionCache, jobs_by_node, node_rows
from muster.ctld.commits import GroupCommit
from muster.ctld.context import Context, Endpoint
from muster.ctld.dashboard import build_dashboard_routes
from muster.ctld.identity import Identity
from muster.ctld.jwtauth import USER_HEADER, JwtAuth, token_in
from muster.ctld.listing import JobListing
from muster.ctld.listing import select as select_fields
from muster.ctld.observe_api import build_observe_routes
from muster.ctld.partition_api import build_partition_routes
from muster.ctld.privacy import PrivateData
from muster.ctld.reconfig import build_reconfig_routes
from muster.ctld.reservations import Reservation
from muster.ctld.stepapi import build_step_routes
from muster.ctld.token_api import build_token_routes
from muster.ctld.triggers import build_trigger_routes
from muster.ctld.wire import node_wire, partition_wire
from muster.protocol import versions
from muster.protocol.httpd import PEER_KEY, TLS_PEER_KEY, SignatureError, refusal
from muster.protocol.replay import StaleMessage
from muster.protocol.signing import CRED_HEADER

# failure-ledger records shown per node by ``scontrol show node X``
FAILURES_SHOWN = 5

log = logging.getLogger("musterctld.api")
IDENTITY_KEY = "muster.identity"  # the caller, once proven, for the rest of the request
MUNGE_KEY = "muster.munge"  # munged's answer for the request's MUNGE credential, asked off the loop
IGNORED_KEY = "muster.ignored"  # the body's fields a newer command sent that this controller ignored
IGNORED_HEADER = "X-Muster-Ignored"  # ... named in the answer, for the command to say so
# Commands of the next release are served (the window runs both ways for commands: they
# may be upgraded before the controller, or it rolled back before them); their bodies'
# fields this controller does not know are ignored, logged and named in the answer.
NEWER_COMMANDS = versions.PROTOCOL + 1


def check_client_protocol(head: Any) -> int:
    """A command's protocol, when this controller serves it (N-1..N+1); else ``ProtocolMismatch``."""
    if versions.peer_protocol(head) == NEWER_COMMANDS:
        return NEWER_COMMANDS
    return versions.check(head, "client", "", "this controller")


class _Refused(Exception):
    """A daemon's signed request that must be refused (answered 401, logged once)."""

    def __init__(self, cause: SignatureError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def error_response(err: MusterError, **extra: Any) -> JSONResponse:
    body = {"error": str(err), "code": err.code, **extra}
    if err.detail:
        body["detail"] = err.detail
    return JSONResponse(body, status_code=err.http_status)


def _validation_message(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "spec") or "body"
    return f"invalid request: {where}: {first.get('msg', 'invalid value')}"


def _cancelled_pending(job: Job | None) -> bool:
    return job is not None and job.state is JobState.CANCELLED and job.start_time is None


def prove_caller(ctx: Context, request: Request, jwt_auth: JwtAuth | None = None) -> Identity:
    """Who sent the request: proven once (a credential is good for one request). With
    ``jwt_auth``, a token proves its user over any transport (musterrestd's requests)."""
    known = request.scope.get(IDENTITY_KEY)
    if known is not None:
        return known  # type: ignore[no-any-return]
    peer = request.scope.get(PEER_KEY)
    token = token_in(request.headers) if jwt_auth is not None else None
    if token is not None:
        assert jwt_auth is not None
        tu = jwt_auth.verify(token, request.headers.get(USER_HEADER), ctx.clock.now())
        who = ctx.controller.identity(tu.uid, tu.gid, ctx.hostname)
    elif peer is not None:
        _pid, uid, gid = peer
        who = ctx.controller.identity(uid, gid, ctx.hostname)
    else:
        cred = request.headers.get(CRED_HEADER)
        if not cred:
            raise AuthError("Authentication failure: no credential")
        try:
            decoded = request.scope.get(MUNGE_KEY)
            uid, gid, host = ctx.credentials.verify(cred, ctx.clock.now(), ctx.verifier.guard, decoded)
        except StaleMessage as e:  # made before this controller started or took over
            raise StaleCredential(f"Invalid credential: {e}") from None
        except SignatureError as e:
            raise AuthError(f"Invalid credential: {e}") from None
        who = ctx.controller.identity(uid, gid, host)
    request.scope[IDENTITY_KEY] = who
    return who


def build_routes(ctx: Context) -> list[Route]:
    ctl = ctx.controller

    private = PrivateData(ctl.config)
    # jobs encoded once per change (ctld.listing); the test suite has it check itself
    listing = JobListing(ctl.job_versions, check=os.environ.get("MUSTER_CHECK_LISTING") == "1")
    part_lists = PartitionCache()  # partitions' node lists, once per configuration
    ended = GroupCommit(ctl, ctl.launches.job_done)  # agents' reports, one commit a group
    jwt_auth = JwtAuth(ctl.config)  # AuthAltTypes=auth/jwt: tokens from scontrol token

    async def parse(request: Request, model: type[BaseModel]) -> Any:
        raw = await request.body()
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise InvalidRequest("invalid request: body is not valid JSON") from None
        protocol = versions.peer_protocol(request.headers)
        if protocol > versions.PROTOCOL:  # a newer command: its new fields are ignored, said so
            data, ignored = known_only(model, data)
            if ignored:
                log.warning(
                    "%s %s: a command of protocol %d sent fields this controller (protocol %d) does not know; "
                    "ignored: %s",
                    request.method,
                    request.url.path,
                    protocol,
                    versions.PROTOCOL,
                    ", ".join(ignored),
                )
                request.scope[IGNORED_KEY] = ignored
        try:  # the same protocol or older: an unknown field is refused, named (a typo, a bug)
            return model.model_validate(data)
        except ValidationError as e:
            raise InvalidRequest(_validation_message(e)) from None

    def caller(request: Request) -> Identity:
        return prove_caller(ctx, request, jwt_auth)

    async def signed_body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        path = request.scope["path"]
        if request.scope.get("query_string"):
            path += "?" + request.scope["query_string"].decode()
        try:
            headers = {k.lower(): v for k, v in request.headers.items()}
            sender = ctx.verifier.verify(request.method, path, raw, headers, request.scope.get(TLS_PEER_KEY))
        except SignatureError as e:
            raise _Refused(e) from None
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise InvalidRequest("invalid request: body is not valid JSON") from None
        if not isinstance(body, dict):
            raise InvalidRequest("invalid request: body must be a JSON object")
        named = body.get("node")
        if named is not None and named != sender:  # a node speaks for itself only
            raise _Refused(SignatureError(f"message from {sender} speaks for node {named}"))
        for key in ("heartbeats", "reports"):
            batch = body.get(key)
            if isinstance(batch, list):  # the nodes one agent process hosts: its sender names them
                hosted = set(expand(sender))
                for one in batch:
                    named = one.get("node") if isinstance(one, dict) else None
                    if (key == "heartbeats" or named is not None) and named not in hosted:
                        raise _Refused(SignatureError(f"message from {sender} speaks for node {named}"))
        return body

    def handler(fn: Endpoint) -> Endpoint:
        async def wrapped(request: Request) -> Response:
            try:
                if not request.url.path.startswith("/v1/agent/"):  # a daemon's: ``signing.check_protocol``
                    check_client_protocol(request.headers)
                unproven = request.scope.get(PEER_KEY) is None or token_in(request.headers) is not None
                if unproven and not request.url.path.startswith("/v1/agent/"):
                    if IDENTITY_KEY not in request.scope:  # MUNGE: munged is asked in a thread
                        decoded = await ctx.credentials.decode_munge(request.headers.get(CRED_HEADER))
                        if decoded is not None:
                            request.scope[MUNGE_KEY] = decoded
                    caller(request)  # over TCP (or with a token) nothing is served to an unproven caller
                response = await fn(request)
                ignored = request.scope.get(IGNORED_KEY)
                if ignored:
                    response.headers[IGNORED_HEADER] = ",".join(ignored)
                return response
            except _Refused as e:
                client = request.client.host if request.client else "?"
                log.warning(
                    "refused %s %s from %s (sender %s, receiver %s): %s",
                    request.method,
                    request.url.path,
                    client,
                    request.headers.get("x-muster-from", "-"),
                    request.headers.get("x-muster-to", "-"),
                    e.cause,
                )
                return JSONResponse(refusal(e.cause), status_code=getattr(e.cause, "status", 401))
            except versions.ProtocolMismatch as e:
                log.warning("refused %s %s: %s", request.method, request.url.path, e)
                return JSONResponse({"error": str(e), "code": "protocol"}, status_code=e.status)
            except AuthError as e:
                client = request.client.host if request.client else "?"
                log.warning("refused %s %s from %s: %s", request.method, request.url.path, client, e)
                return error_response(e)
            except MusterError as e:
                return error_response(e)
            except Exception as e:  # a bug: one line to the caller, the traceback to the log
                log.exception("%s %s failed", request.method, request.url.path)
                return JSONResponse(
                    {"error": f"Unexpected error in the controller: {type(e).__name__}: {e}", "code": "internal"},
                    status_code=500,
                )

        return wrapped

    def query_list(request: Request, key: str) -> list[str] | None:
        v = request.query_params.get(key)
        return [x for x in v.split(",") if x] if v else None

    @handler
    async def ping(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "cluster": ctl.config.cluster_name, "now": ctx.clock.now()})

    def check_limits(spec: SpecModel, who: Identity) -> None:
        """Script size, MaxJobCount and the per-user cap: before any work is done."""
        cfg = ctl.config
        if spec.script is not None:
            size = len(spec.script.encode())
            if size > cfg.max_script_size:
                raise InvalidRequest(  # Slurm's words (ESLURM_PATHNAME_TOO_LONG), and why
                    "Pathname of a file, directory or other parameter too long "
                    f"(the batch script has {size} bytes; max_script_size is {cfg.max_script_size})"
                )
        adding = 1
        if spec.array:
            try:
                adding = len(parse_array(spec.array, cfg.max_array_size).indices)
            except ValueError:
                adding = 1  # the controller says what is wrong with it
        if len(ctl.jobs) + adding > cfg.max_job_count:
            log.warning(
                "refused a submission of %d job(s) by %s: %d jobs in memory, MaxJobCount=%d",
                adding,
                who.user,
                len(ctl.jobs),
                cfg.max_job_count,
            )
            raise ResourceBusy()
        cap = 0 if who.admin else cfg.max_submit_jobs_per_user  # a cap on users, not on operators
        queued = (j for j in ctl.jobs.values() if j.uid == who.uid and (j.state is JobState.PENDING or j.is_active))
        if cap and sum(1 for _ in queued) + adding > cap:
            log.warning("refused a submission by %s: max_submit_jobs_per_user=%d reached", who.user, cap)
            raise ResourceBusy()

    @handler
    async def submit(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, SubmitBody)
        check_limits(body.spec, who)
        if body.components:
            for part in body.components[1:]:
                check_limits(part, who)
            token = request.headers.get("x-muster-request")
            jobs = ctl.hets.submit([part.to_spec() for part in body.components], who, token)
            ctx.kick()
            return JSONResponse({"job_id": jobs[0].job_id, "job_ids": [j.job_id for j in jobs]})
        # the client's token for this submission: a retry after a lost answer (the controller
        # died, a backup took over) gets the same job back (client.failover)
        job = ctl.queue.submit(body.spec.to_spec(), who, request.headers.get("x-muster-request"))
        if not job.hold or job.spec.deadline is not None:
            # A held job (an array's tasks alike) can start in no pass, and a pass would
            # tell nothing new of it (its reason is set, its priority 0), so it asks for
            # none (one with a --deadline does: a pass ends it if it can no longer be met).
            # A stream of held submissions then costs no pass over the whole queue each;
            # the periodic pass (SchedulerInterval) still sees them.
            ctx.kick()
        return JSONResponse({"job_id": job.job_id})

    @handler
    async def list_jobs(request: Request) -> Response:
        now = ctx.clock.now()
        ids = query_list(request, "job_id")
        refs = [job_ref(i) for i in ids or ()]
        job_ids = ctl.queue.job_ids(refs) if ids else None
        if job_ids and all(ref.tasks is not None for ref in refs):
            # As in Slurm, an array task cancelled while it pended leaves no job record
            # of its own (only accounting knows it): asked for by its task id, it is gone.
            job_ids = [i for i in job_ids if not _cancelled_pending(ctl.jobs.get(i))]
            if not job_ids:
                raise InvalidJobId()
        selected = ctl.queue.select_jobs(
            job_ids,
            query_list(request, "user"),
            request.query_params.get("name"),
            query_list(request, "partition"),
            query_list(request, "state"),
        )
        if private.hides("jobs", caller(request)):
            selected = private.jobs(selected, caller(request))
        if ids and not selected and len(ids) == 1:
            raise InvalidJobId()
        if job_ids is None:
            listing.prune(ctl.jobs)
        brief = request.query_params.get("view") == "brief"
        fields = query_list(request, "fields")
        if fields is not None and not brief:
            raise InvalidRequest("fields= narrows the brief view only (view=brief)")
        narrowed = select_fields(fields) if fields is not None else None
        body = listing.body(selected, now, brief, ctl.jobs, narrowed)
        return Response(body, media_type="application/json")

    @handler
    async def get_job(request: Request) -> Response:
        ref = job_ref(request.path_params["job_id"])
        if ref.tasks is None:
            job = ctl.queue.get_job(ref.job_id)
        else:
            found = ctl.queue.resolve(ref)
            if not found:
                raise InvalidJobId()
            job = found[0]
        if not private.jobs([job], caller(request)):
            raise InvalidJobId()  # PrivateData=jobs: another user's job is not there
        now = ctx.clock.now()
        frag = listing.fragment(job, now, False, ctl.jobs)
        body = b'{"job":' + frag + b',"now":' + json.dumps(now).encode() + b"}"
        return Response(body, media_type="application/json")

    @handler
    async def hang_evidence(request: Request) -> JSONResponse:
        """What each process of the job's hung attempts was doing (``ctld.training``): the
        ``hang_evidence`` events of the job, oldest first."""
        job = ctl.queue.get_job(job_ref(request.path_params["job_id"]).job_id)
        if not private.jobs([job], caller(request)):
            raise InvalidJobId()
        found = [{"time": t, **d} for t, kind, d in ctl.store.events(job.job_id) if kind == "hang_evidence"]
        return JSONResponse({"job_id": job.job_id, "evidence": found})

    @handler
    async def signal_jobs(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, SignalBody)
        sig = parse_signal(body.signal) if body.signal is not None else None
        filters = (
            [body.user] if body.user else None,
            body.name,
            [body.partition] if body.partition else None,
            body.states,
        )
        results: list[dict[str, Any]] = []
        targets: list[Job]
        if body.job_ids:
            targets = []
            for item in body.job_ids:
                ref = job_ref(str(item))
                jobs = ctl.queue.resolve(ref)
                if not jobs or (sig is None and ref.offset and jobs[0].state is JobState.PENDING):
                    # one component of a pending het job cannot be cancelled, only the whole
                    err = InvalidRequest(NOT_WHOLE) if jobs else InvalidJobId()
                    results.append({"job_id": str(ref), "ok": False, "error": str(err), "code": err.code})
                    continue
                chosen = {j.job_id for j in ctl.queue.select_jobs([j.job_id for j in jobs], *filters)}
                targets.extend(j for j in jobs if j.job_id in chosen)
        else:
            targets = ctl.queue.select_jobs(None, *filters)
            if not who.admin and body.user is None:
                targets = [j for j in targets if j.uid == who.uid]
        if sig is None:
            # cancelling: one transaction for all (a whole array is many jobs)
            actions, done = ctl.queue.cancel_all(targets, who)
            ctx.perform(actions)
            results.extend(done)
            targets = []
        for job in targets:
            try:
                if sig is None:
                    actions = ctl.queue.cancel(job, who)
                else:
                    actions = ctl.queue.signal(job, who, sig, body.batch_only)
                ctx.perform(actions)
                results.append({"job_id": job.job_id, "ok": True})
            except MusterError as e:
                results.append({"job_id": job.job_id, "ok": False, "error": str(e), "code": e.code})
        if sig is None:
            ctx.kick()
        return JSONResponse({"results": results})

    def job_ref(text: str) -> JobRef:
        try:
            return parse_job_ref(text)
        except ValueError:
            raise InvalidJobId() from None

    def each_job(request: Request, act: Any) -> None:
        """Apply ``act`` to every job the path's id names (an array id: all its tasks).
        An error is raised only when it failed for every one of them."""
        jobs = ctl.queue.resolve(job_ref(request.path_params["job_id"]))
        if not jobs:
            raise InvalidJobId()
        first_error: MusterError | None = None
        done = 0
        for job in jobs:
            try:
                act(job)
                done += 1
            except MusterError as e:
                first_error = first_error or e
        if not done and first_error is not None:
            raise first_error

    @handler
    async def hold(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, HoldBody)
        each_job(request, lambda job: ctl.queue.hold(job, who, body.admin))
        return JSONResponse({"ok": True})

    @handler
    async def release(request: Request) -> JSONResponse:
        who = caller(request)
        each_job(request, lambda job: ctl.queue.release(job, who))
        ctx.kick()
        return JSONResponse({"ok": True})

    @handler
    async def update(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, UpdateBody)
        changes = body.model_dump(exclude_none=True)
        each_job(request, lambda job: ctx.perform(ctl.queue.update(job, who, changes)))
        ctx.kick()
        return JSONResponse({"ok": True})

    @handler
    async def requeue(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, RequeueBody)
        each_job(request, lambda job: ctx.perform(ctl.queue.requeue_job(job, who, body.hold)))
        ctx.kick()
        return JSONResponse({"ok": True})

    @handler
    async def suspend(request: Request) -> JSONResponse:
        """``scontrol suspend`` (``/suspend``) and ``scontrol resume`` (``/resume``)."""
        who = caller(request)
        op = ctl.suspensions.resume if request.url.path.endswith("/resume") else ctl.suspensions.suspend
        each_job(request, lambda job: ctx.perform(op(job, who)))
        return JSONResponse({"ok": True})

    @handler
    async def update_nodes(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, NodeUpdateBody)
        ctx.perform(ctl.liveness.update_nodes(who, body.names, body.state, body.reason))
        ctx.kick()
        return JSONResponse({"ok": True})

    @handler
    async def list_nodes(request: Request) -> JSONResponse:
        names = query_list(request, "name")
        chosen = [n for n in ctl.nodes.values() if not names or n.name in names]
        fields = query_list(request, "fields")
        # partitions=1: the partitions too, as GET /v1/partitions gives them (sinfo: one request)
        extra = {"partitions": partitions()} if request.query_params.get("partitions") == "1" else {}
        if fields is not None:  # in columns, only what the command's format needs (ctld.columns)
            return JSONResponse({**node_rows(chosen, fields, ctl.jobs.values()), **extra, "now": ctx.clock.now()})
        jobs_on = jobs_by_node(ctl.jobs.values())
        nodes = [node_wire(n, jobs_on.get(n.name, [])) for n in chosen]
        if names:  # nodes asked for by name: their latest failure-ledger records too (scontrol show node X)
            for d in nodes:
                d["failures"] = [e.to_dict() for e in ctl.ledger.history(d["name"], FAILURES_SHOWN)]
        return JSONResponse({"nodes": nodes, **extra, "now": ctx.clock.now()})

    @handler
    async def node_failures(request: Request) -> JSONResponse:
        """A node's failure-ledger records kept in memory, oldest first (docs/recovery.md)."""
        node = ctl.node(request.path_params["name"])
        history = [e.to_dict() for e in ctl.ledger.history(node.name)]
        return JSONResponse({"node": node.name, "failures": history, "now": ctx.clock.now()})

    def partitions() -> list[dict[str, Any]]:
        return [partition_wire(ctl.config, p.name, ctl.nodes, part_lists.lists) for p in ctl.config.partitions]

    @handler
    async def list_partitions(request: Request) -> JSONResponse:
        return JSONResponse({"partitions": partitions(), "now": ctx.clock.now()})

    @handler
    async def config(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "settings": dict(ctl.config.settings),
                "now": ctx.clock.now(),
                "boot_time": ctl.started_at,
                "node_count": len(ctl.nodes),
                "topology": show_topology(ctl.config.topology) if ctl.config.topology is not None else None,
            }
        )

    def reservation_wire(res: Reservation) -> dict[str, Any]:
        now = ctx.clock.now()
        d = res.to_dict()
        nodes = [ctl.nodes[n] for n in res.nodes if n in ctl.nodes]
        d.update(
            nodelist=compress(res.nodes),
            node_cnt=len(res.nodes),
            core_cnt=sum(n.cpus for n in nodes),
            gpu_cnt=sum(n.gpus for n in nodes),
            state="ACTIVE" if res.active(now) else "INACTIVE",
        )
        return d

    @handler
    async def list_reservations(request: Request) -> JSONResponse:
        out = [reservation_wire(r) for r in sorted(ctl.reservations.values(), key=lambda r: (r.start, r.name))]
        return JSONResponse({"reservations": out, "now": ctx.clock.now()})

    @handler
    async def create_reservation(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, ReservationBody)
        res = ctl.resv.create(who, body.model_dump())
        ctx.kick()
        return JSONResponse({"name": res.name, "reservation": reservation_wire(res)})

    @handler
    async def update_reservation(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, ReservationBody)
        res = ctl.resv.update(who, request.path_params["name"], body.model_dump())
        ctx.kick()
        return JSONResponse({"name": res.name, "reservation": reservation_wire(res)})

    @handler
    async def delete_reservation(request: Request) -> JSONResponse:
        who = caller(request)
        ctl.resv.delete(who, request.path_params["name"])
        ctx.kick()
        return JSONResponse({"ok": True})

    return accounting_routes(ctx, caller, parse, handler, private) + [
        Route("/v1/ping", ping),
        Route("/v1/jobs", submit, methods=["POST"]),
        Route("/v1/jobs", list_jobs, methods=["GET"]),
        Route("/v1/jobs/signal", signal_jobs, methods=["POST"]),
        Route("/v1/jobs/{job_id}", get_job, methods=["GET"]),
        Route("/v1/jobs/{job_id}/hang_evidence", hang_evidence, methods=["GET"]),
        Route("/v1/jobs/{job_id}/hold", hold, methods=["POST"]),
        Route("/v1/jobs/{job_id}/release", release, methods=["POST"]),
        Route("/v1/jobs/{job_id}/update", update, methods=["POST"]),
        Route("/v1/jobs/{job_id}/requeue", requeue, methods=["POST"]),
        Route("/v1/jobs/{job_id}/suspend", suspend, methods=["POST"]),
        Route("/v1/jobs/{job_id}/resume", suspend, methods=["POST"]),
        Route("/v1/nodes", list_nodes),
        Route("/v1/nodes/update", update_nodes, methods=["POST"]),
        Route("/v1/nodes/{name}/failures", node_failures),
        Route("/v1/partitions", list_partitions),
        Route("/v1/config", config),
        Route("/v1/reservations", list_reservations, methods=["GET"]),
        Route("/v1/reservations", create_reservation, methods=["POST"]),
        Route("/v1/reservations/{name}/update", update_reservation, methods=["POST"]),
        Route("/v1/reservations/{name}/delete", delete_reservation, methods=["POST"]),
        *build_agent_routes(ctx, signed_body, handler, ended),
        *build_step_routes(ctx, caller, parse, handler, private),
        *build_reconfig_routes(ctx, caller, handler),
        *build_partition_routes(ctx, caller, handler),
        *build_observe_routes(ctx, caller, handler),
        *build_dashboard_routes(ctx, caller, handler, private),
        *build_token_routes(ctx, caller, parse, handler, jwt_auth),
        *build_trigger_routes(lambda: ctl.triggers, caller, handler),
    ]
