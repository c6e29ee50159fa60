"""Event triggers in the controller (``strigger``): set, listed and cleared over HTTP, kept in
the store (they survive a restart), checked every ``INTERVAL`` seconds against the nodes and
jobs in memory (``core.triggers`` decides what fires), and their programs run on the
controller's host as the user who set them, in a session of their own, killed with their
whole process group after ``TIMEOUT`` seconds (strigger(1): 5 minutes)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import InvalidJobId, InvalidRequest, PermissionDenied
from muster.core.states import NodeState
from muster.core.triggers import JobSeen, NodeSeen, Observation, Trigger, TriggerError, fired, make, observe, spent
from muster.ctld.identity import Identity
from muster.ctld.state import ClusterState

log = logging.getLogger("musterctld")

INTERVAL = 5.0  # seconds between checks (Slurm: 15)
TIMEOUT = 300.0  # a trigger's program is killed after this long
META_KEY = "triggers"
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class TriggerSetBody(BaseModel):
    """``strigger --set``: one event per request."""

    model_config = ConfigDict(extra="forbid")
    event: str = Field(max_length=32)
    job_id: int | None = Field(None, ge=1)
    node: str | None = Field(None, max_length=65536)
    offset: int = Field(0, ge=-(10**9), le=10**9)
    program: str = Field(max_length=4096)
    flags: list[str] = Field(default_factory=list, max_length=8)


class TriggerQueryBody(BaseModel):
    """``strigger --get`` and ``--clear``: which triggers (all of them when nothing is given)."""

    model_config = ConfigDict(extra="forbid")
    trig_id: int | None = None
    job_id: int | None = None
    user: str | None = Field(None, max_length=256)
    node: str | None = Field(None, max_length=65536)


class TriggerBook:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.triggers: dict[int, Trigger] = {}
        self.next_id = 1
        self.last: Observation | None = None
        self._config: Any = None
        self._config_gen = 0

    def load(self) -> None:
        raw = self.state.store.get_meta(META_KEY)
        if raw:
            data = json.loads(raw)
            self.next_id = int(data.get("next_id", 1))
            self.triggers = {int(t["trig_id"]): Trigger.from_dict(t) for t in data.get("triggers", [])}

    def _save(self, triggers: dict[int, Trigger], next_id: int) -> None:
        """Committed to the store before memory takes it."""
        data = {"next_id": next_id, "triggers": [t.to_dict() for t in triggers.values()]}
        self.state.store.set_meta(META_KEY, json.dumps(data))
        self.triggers = triggers
        self.next_id = next_id

    # --- requests ----------------------------------------------------------------------

    def may_set(self, who: Identity) -> bool:
        """strigger(1): only SlurmUser may set triggers, unless SlurmUser is root (then any
        user may); root always may."""
        slurm_user = self.state.config.slurm_user or "root"
        return slurm_user == "root" or who.uid == 0 or who.user == slurm_user

    def set(self, who: Identity, req: dict[str, Any]) -> Trigger:
        if not self.may_set(who):
            raise PermissionDenied("Access/permission denied")
        job_id = req.get("job_id")
        if job_id is not None:
            job = self.state.jobs.get(int(job_id))
            if job is None:
                raise InvalidJobId("Invalid job id specified")
            if not who.admin and job.uid != who.uid:
                raise PermissionDenied("Access/permission denied")
        try:
            trig = make(
                self.next_id,
                event=str(req.get("event") or ""),
                job_id=None if job_id is None else int(job_id),
                node=req.get("node"),
                offset=int(req.get("offset") or 0),
                user=who.user,
                uid=who.uid,
                gid=who.gid,
                program=str(req.get("program") or ""),
                flags=req.get("flags") or [],
            )
        except (TriggerError, ValueError) as e:
            raise InvalidRequest(str(e)) from None
        self._save({**self.triggers, trig.trig_id: trig}, self.next_id + 1)
        return trig

    def _select(self, req: dict[str, Any]) -> list[Trigger]:
        out = []
        nodes = set(_expand(req["node"])) if req.get("node") else None
        for t in self.triggers.values():
            if req.get("trig_id") is not None and t.trig_id != int(req["trig_id"]):
                continue
            if req.get("job_id") is not None and (t.res_type != "job" or t.res_id != str(req["job_id"])):
                continue
            if req.get("user") is not None and str(req["user"]) not in (t.user, str(t.uid)):
                continue
            if nodes is not None:
                scope = t.nodes() if t.res_type == "node" else set()
                if t.res_type != "node" or (scope is not None and not (scope & nodes)):
                    continue
            out.append(t)
        return sorted(out, key=lambda t: t.trig_id)

    def get(self, req: dict[str, Any]) -> list[Trigger]:
        return self._select(req)

    def clear(self, who: Identity, req: dict[str, Any]) -> int:
        """Delete the triggers ``req`` names (by id, job or user): only root, an administrator
        or the trigger's creator may; none matching is an error."""
        if req.get("trig_id") is None and req.get("job_id") is None and req.get("user") is None:
            raise InvalidRequest("--id, --jobid, or --user must be specified")
        chosen = self._select(req)
        if not chosen:
            raise InvalidRequest("Invalid trigger specified: no trigger matches")
        mine = [t for t in chosen if who.admin or t.uid == who.uid]
        if not mine:
            raise PermissionDenied("Access/permission denied")
        left = {k: t for k, t in self.triggers.items() if t not in mine}
        self._save(left, self.next_id)
        return len(mine)

    # --- the periodic check --------------------------------------------------------------

    def look(self, now: float) -> Observation:
        if self.state.config is not self._config:
            if self._config is not None:
                self._config_gen += 1
            self._config = self.state.config
        nodes = {}
        for name, n in self.state.nodes.items():
            base = n.base_state()
            nodes[name] = NodeSeen(
                down=base is NodeState.DOWN,
                drained=n.drain and not n.allocs,
                idle=base is NodeState.IDLE and not n.drain,
            )
        jobs: dict[int, JobSeen] = {}
        for t in self.triggers.values():
            if t.res_type == "job":
                job = self.state.jobs.get(int(t.res_id))
                if job is not None:
                    ended = job.state.is_terminal and not job.completing
                    limit = job.expected_end() if job.is_active else None
                    jobs[job.job_id] = JobSeen(ended, limit, tuple(job.nodes))
        return observe(self.last, now, nodes, jobs, self._config_gen)

    def check(self, now: float) -> list[tuple[Trigger, str]]:
        """What fires since the last check; fired triggers marked, spent ones purged (stored)."""
        cur = self.look(now)
        prev, self.last = self.last, cur
        if prev is None:
            prev = cur  # the first look after a start: nothing "went" anywhere yet
            fires = [(t, a) for t, a in fired(self.triggers.values(), prev, cur) if t.event in ("fini", "time", "idle")]
        else:
            fires = fired(self.triggers.values(), prev, cur)
        changed = False
        for trig, _ in fires:
            if trig.event not in trig.fired:
                trig.fired = [*trig.fired, trig.event]
                changed = True
        left = {k: t for k, t in self.triggers.items() if not spent(t, cur)}
        if changed or len(left) != len(self.triggers):
            self._save(left, self.next_id)
        return fires


def _expand(expr: str) -> list[str]:
    from muster.core.hostlist import HostlistError, expand

    try:
        return expand(expr)
    except HostlistError as e:
        raise InvalidRequest(str(e)) from None


def wire(t: Trigger) -> dict[str, Any]:
    return t.to_dict()


class TriggerRunner:
    """Runs fired triggers' programs without holding up the controller."""

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self.tasks: set[asyncio.Task[None]] = set()
        self.running: set[asyncio.subprocess.Process] = set()

    def run(self, trig: Trigger, arg: str) -> None:
        task = asyncio.create_task(self._run(trig, arg), name=f"trigger-{trig.trig_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, trig: Trigger, arg: str) -> None:
        try:
            argv = shlex.split(trig.program)
        except ValueError:
            argv = [trig.program]
        if arg:
            argv.append(arg)
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0 and trig.uid != 0:
            kwargs.update(user=trig.uid, group=trig.gid, extra_groups=[])
        elif os.geteuid() not in (0, trig.uid):
            log.error(
                "trigger %d: cannot run %s as uid %d (the controller is not root)", trig.trig_id, argv[0], trig.uid
            )
            return
        env = {**BASE_ENV, "USER": trig.user, "LOGNAME": trig.user}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=env,
                cwd="/",
                start_new_session=True,
                **kwargs,
            )
        except OSError as exc:
            log.error("trigger %d: cannot run %s: %s", trig.trig_id, argv[0], exc.strerror or exc)
            return
        self.running.add(proc)
        try:
            await asyncio.wait_for(proc.wait(), self.timeout)
            if proc.returncode:
                log.warning("trigger %d: %s exited with status %d", trig.trig_id, argv[0], proc.returncode)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            log.error("trigger %d: %s killed after %g s", trig.trig_id, argv[0], self.timeout)
        except asyncio.CancelledError:
            _kill(proc)
            raise
        finally:
            self.running.discard(proc)

    async def stop(self) -> None:
        for proc in list(self.running):
            _kill(proc)
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def build_trigger_routes(
    book: Callable[[], TriggerBook],
    caller: Callable[[Request], Identity],
    handler: Callable[[Any], Any],
) -> list[Route]:
    async def body(request: Request, model: type[BaseModel]) -> dict[str, Any]:
        try:
            data = json.loads(await request.body() or b"{}")
        except (ValueError, RecursionError):
            raise InvalidRequest("invalid request: body is not valid JSON") from None
        try:
            return model.model_validate(data).model_dump()
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise InvalidRequest(f"invalid request: {where}: {first.get('msg', 'invalid value')}") from None

    @handler
    async def set_trigger(request: Request) -> JSONResponse:
        who = caller(request)
        trig = book().set(who, await body(request, TriggerSetBody))
        return JSONResponse({"trigger": wire(trig)})

    @handler
    async def get_triggers(request: Request) -> JSONResponse:
        caller(request)
        return JSONResponse({"triggers": [wire(t) for t in book().get(await body(request, TriggerQueryBody))]})

    @handler
    async def clear_triggers(request: Request) -> JSONResponse:
        who = caller(request)
        return JSONResponse({"cleared": book().clear(who, await body(request, TriggerQueryBody))})

    return [
        Route("/v1/triggers", set_trigger, methods=["POST"]),
        Route("/v1/triggers/get", get_triggers, methods=["POST"]),
        Route("/v1/triggers/clear", clear_triggers, methods=["POST"]),
    ]
