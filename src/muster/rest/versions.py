"""The REST API's versions: one table of which fields each data_parser version shows, and how.

musterrestd builds every answer once, in v0.0.40's layout (``layout``), and shows it through
the caller's version: ``view(version, schema, obj)`` keeps, builds or drops the fields this
table names for that version; fields the table does not name are the same in every version.
The OpenAPI document of a version is v0.0.40's, edited by the very same table
(``openapi_document``), so what is served and what is documented cannot drift apart.

The differences are those of Slurm's data_parser plugins (field names are an interface):
v0.0.41 (Slurm 24.05: the job's ``job_resources`` regrouped under ``nodes``), v0.0.42
(24.11: ``result`` and the post response's ids gone, pings ``primary``/``responding``, a
cancel answers ``status[]``, ``exclusive``/``oversubscribe`` no longer submitted), v0.0.43
(25.05: ``std*_expanded``), v0.0.44 (25.11: the job's ``step_id`` with its SLUID,
``submit_line``), v0.0.45 (26.05: accounting's ``sluid``/``original_sluid``, pings'
``mode``/``pinged`` gone, the requeue endpoints).
"""

from __future__ import annotations

import copy
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
# The Slurm release that introduced each version (what ``meta.slurm`` says).
RELEASES = {
    "v0.0.40": ("23", "11", "0"),
    "v0.0.41": ("24", "05", "0"),
    "v0.0.42": ("24", "11", "0"),
    "v0.0.43": ("25", "05", "0"),
    "v0.0.44": ("25", "11", "0"),
    "v0.0.45": ("26", "05", "0"),
}
BASE = "v0.0.40"
# Versions Slurm 25.11 marks deprecated (still served, and marked so in /openapi/v3).
DEPRECATED = ("v0.0.40", "v0.0.41")
# Versions that serve job requeue (GET job/{id}/requeue, POST jobs/requeue).
REQUEUE_SINCE = "v0.0.45"

Build = Callable[[dict[str, Any]], Any]


def at_least(version: str, since: str) -> bool:
    return VERSIONS.index(version) >= VERSIONS.index(since)


@dataclass(frozen=True)
class Field:
    """``schema.name`` is shown in versions ``since`` <= v < ``until``: built by ``build``
    from the v0.0.40 object (kept as it is when None), documented by ``doc`` (v0.0.40 schema
    names in its ``$ref``s; None keeps v0.0.40's). A field with entries is dropped from the
    versions none of its entries covers."""

    schema: str
    name: str
    since: str = BASE
    until: str | None = None
    build: Build | None = None
    doc: dict[str, Any] | None = None

    def covers(self, version: str) -> bool:
        return at_least(version, self.since) and (self.until is None or not at_least(version, self.until))


# --- SLUID (Slurm 25.11) ---------------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def sluid(cluster: str, job_id: int, attempt: int = 0) -> str:
    """A Slurm Lexicographically-sortable Unique ID as Slurm writes one (``s`` and 13
    Crockford base32 digits of 64 bits: the cluster in the top 12). muster has no SLUID of
    its own: it is derived from the cluster, the job id and the attempt, so it is stable,
    unique per run of a job, and a requeued job gets a new one while its ``original_sluid``
    (attempt 0) stays."""
    value = (zlib.crc32(cluster.encode()) & 0xFFF) << 52 | (job_id & 0xFFFFFFFF) << 10 | (attempt & 0x3FF)
    return "s" + "".join(_CROCKFORD[(value >> (5 * i)) & 0x1F] for i in range(12, -1, -1))


def _num(obj: Any) -> int:
    """A v0.0.40 number object (or a bare number) as an int; 0 when unset."""
    if isinstance(obj, dict):
        return int(obj.get("number") or 0) if obj.get("set", True) else 0
    return int(obj or 0)


def _no_val(value: int | None) -> dict[str, Any]:
    return {"set": value is not None, "infinite": False, "number": int(value or 0)}


def _job_step_id(job: dict[str, Any]) -> dict[str, Any]:
    jid = _num(job.get("job_id"))
    return {
        "sluid": sluid(str(job.get("cluster") or ""), jid, int(job.get("restart_cnt") or 0)),
        "job_id": _no_val(jid),
        "step_het_component": _no_val(None),
        "step_id": "batch",
    }


def _job_resources_v41(job: dict[str, Any]) -> dict[str, Any]:
    old = job.get("job_resources") or {}
    alloc = old.get("allocated_nodes") or []
    return {
        "select_type": ["CPU", "MEMORY"],
        "nodes": {
            "count": int(old.get("allocated_hosts") or 0),
            "select_type": ["AVAILABLE"],
            "list": str(old.get("nodes") or ""),
            "whole": False,
            "allocation": [
                {
                    "index": i,
                    "name": str(a.get("nodename") or ""),
                    "cpus": {"count": int(a.get("cpus_used") or 0), "used": int(a.get("cpus_used") or 0)},
                    "memory": {
                        "used": int(a.get("memory_used") or 0),
                        "allocated": int(a.get("memory_allocated") or 0),
                    },
                    "sockets": [],
                }
                for i, a in enumerate(alloc)
            ],
        },
        "cpus": int(old.get("allocated_cpus") or 0),
        "threads_per_core": _no_val(1),
    }


def _submit_line(job: dict[str, Any]) -> str:
    return str(job.get("command") or "")


def _ping_primary(ping: dict[str, Any]) -> bool:
    return ping.get("mode") == "primary"


def _ping_responding(ping: dict[str, Any]) -> bool:
    return ping.get("pinged") == "UP"


def _db_sluid(job: dict[str, Any]) -> str:
    return sluid(str(job.get("cluster") or ""), int(job.get("job_id") or 0), int(job.get("restart_cnt") or 0))


def _db_original_sluid(job: dict[str, Any]) -> str:
    return sluid(str(job.get("cluster") or ""), int(job.get("job_id") or 0), 0)


_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}
_NO_VAL = {"$ref": "#/components/schemas/v0.0.40_uint32_no_val"}
_SLUID = {"type": "string", "description": "SLUID"}

FIELDS: tuple[Field, ...] = (
    # job_info (GET jobs, GET job/{id})
    Field("job_info", "job_resources", BASE, "v0.0.41"),
    Field(
        "job_info",
        "job_resources",
        "v0.0.41",
        build=_job_resources_v41,
        doc={
            "type": "object",
            "properties": {
                "select_type": {"type": "array", "items": _STR},
                "nodes": {
                    "type": "object",
                    "properties": {
                        "count": _INT,
                        "select_type": {"type": "array", "items": _STR},
                        "list": _STR,
                        "whole": _BOOL,
                        "allocation": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "index": _INT,
                                    "name": _STR,
                                    "cpus": {"type": "object", "properties": {"count": _INT, "used": _INT}},
                                    "memory": {"type": "object", "properties": {"used": _INT, "allocated": _INT}},
                                    "sockets": {"type": "array", "items": {"type": "object"}},
                                },
                            },
                        },
                    },
                },
                "cpus": _INT,
                "threads_per_core": {"$ref": "#/components/schemas/v0.0.40_uint16_no_val"},
            },
        },
    ),
    Field("job_info", "stdout_expanded", "v0.0.43", build=lambda j: j.get("standard_output") or "", doc=_STR),
    Field("job_info", "stderr_expanded", "v0.0.43", build=lambda j: j.get("standard_error") or "", doc=_STR),
    Field("job_info", "stdin_expanded", "v0.0.43", build=lambda j: j.get("standard_input") or "", doc=_STR),
    Field(
        "job_info",
        "step_id",
        "v0.0.44",
        build=_job_step_id,
        doc={
            "type": "object",
            "properties": {
                "sluid": _SLUID,
                "job_id": _NO_VAL,
                "step_het_component": _NO_VAL,
                "step_id": _STR,
            },
        },
    ),
    Field("job_info", "submit_line", "v0.0.44", build=_submit_line, doc=_STR),
    # POST job/submit, POST job/{id}
    Field("openapi_job_submit_response", "result", BASE, "v0.0.42"),
    Field("openapi_job_post_response", "job_id", BASE, "v0.0.42"),
    Field("openapi_job_post_response", "step_id", BASE, "v0.0.42"),
    Field("openapi_job_post_response", "job_submit_user_msg", BASE, "v0.0.42"),
    # GET ping
    Field("controller_ping", "primary", "v0.0.42", build=_ping_primary, doc=_BOOL),
    Field("controller_ping", "responding", "v0.0.42", build=_ping_responding, doc=_BOOL),
    Field("controller_ping", "mode", BASE, "v0.0.45"),
    Field("controller_ping", "pinged", BASE, "v0.0.45"),
    # slurmdb job
    Field("job", "sluid", "v0.0.45", build=_db_sluid, doc=_SLUID),
    Field("job", "original_sluid", "v0.0.45", build=_db_original_sluid, doc=_SLUID),
)

# job_desc_msg fields by version: accepted and ignored (with a warning) from ``since``;
# no longer in the schema from ``until`` (refused as any field the schema does not have).
DESC_IGNORED_SINCE = {
    "resv_mpi_ports": ("v0.0.41", "v0.0.42"),
    "segment_size": ("v0.0.41", None),
    "oom_kill_step": ("v0.0.42", None),
    "step_id": ("v0.0.44", None),
    "container_type": ("v0.0.45", None),
    "memory_update_delay": ("v0.0.45", None),
    "memory_update_margin": ("v0.0.45", None),
}
DESC_REMOVED = {"exclusive": "v0.0.42", "oversubscribe": "v0.0.42"}

_BY_SCHEMA: dict[str, dict[str, list[Field]]] = {}
for _f in FIELDS:
    _BY_SCHEMA.setdefault(_f.schema, {}).setdefault(_f.name, []).append(_f)


def view(version: str, schema: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a ``schema`` in v0.0.40's layout) as ``version`` shows it; a new dict."""
    fields = _BY_SCHEMA.get(schema)
    if not fields:
        return obj
    out = dict(obj)
    for name, entries in fields.items():
        entry = next((e for e in entries if e.covers(version)), None)
        if entry is None:
            out.pop(name, None)
        elif entry.build is not None:
            out[name] = entry.build(obj)
    return out


def job_desc(version: str, job: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A submitted ``job`` of ``version`` as v0.0.40's, and the warnings for what it ignores.
    Raises ValueError naming a field this version's schema does not have."""
    out = dict(job)
    warnings = []
    for name in job:
        removed = DESC_REMOVED.get(name)
        if removed is not None and at_least(version, removed):
            raise ValueError(f"{name}: not a field of {version}'s job_desc_msg (use shared)")
        span = DESC_IGNORED_SINCE.get(name)
        if span is not None:
            since, until = span
            if not at_least(version, since) or until is not None and at_least(version, until):
                raise ValueError(f"{name}: not a field of {version}'s job_desc_msg")
            warnings.append(f"{name}: not used by muster; ignored")
            del out[name]
    return out, warnings


def meta(version: str, m: dict[str, Any]) -> dict[str, Any]:
    """``meta`` as ``version`` says it: its data_parser and the Slurm release that has it."""
    major, minor, micro = RELEASES[version]
    m["plugin"]["data_parser"] = f"data_parser/{version}"
    m["slurm"]["version"] = {"major": major, "minor": minor, "micro": micro}
    m["slurm"]["release"] = f"{major}.{minor}.{micro}"
    return m


# --- OpenAPI ------------------------------------------------------------------------------------

_STATUS_ENTRY = {
    "type": "object",
    "properties": {
        "job_id": _INT,
        "step_id": _STR,
        "error": _STR,
        "error_code": _INT,
        "why": _STR,
    },
}
_RESP = {
    "meta": {"$ref": "#/components/schemas/v0.0.40_openapi_meta"},
    "errors": {"type": "array", "items": {"$ref": "#/components/schemas/v0.0.40_openapi_error"}},
    "warnings": {"type": "array", "items": {"$ref": "#/components/schemas/v0.0.40_openapi_warning"}},
}
_SCHEMAS_SINCE: dict[str, tuple[str, dict[str, Any]]] = {
    "v0.0.40_openapi_kill_job_resp": (
        "v0.0.42",
        {
            "type": "object",
            "properties": {
                "status": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "error": {
                                "type": "object",
                                "properties": {"string": _STR, "code": _INT, "message": _STR},
                            },
                            "step_id": _STR,
                            "job_id": _NO_VAL,
                            "federation": {"type": "object", "properties": {"sibling": _STR}},
                        },
                    },
                },
                **_RESP,
            },
        },
    ),
    "v0.0.40_job_array_response_msg_entry": (REQUEUE_SINCE, _STATUS_ENTRY),
    "v0.0.40_openapi_job_requeue_resp": (
        REQUEUE_SINCE,
        {
            "type": "object",
            "properties": {
                "status": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/v0.0.40_job_array_response_msg_entry"},
                },
                **_RESP,
            },
        },
    ),
    "v0.0.40_openapi_jobs_requeue_resp": (
        REQUEUE_SINCE,
        {
            "type": "object",
            "properties": {
                "status": {
                    "type": "array",
                    "items": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/v0.0.40_job_array_response_msg_entry"},
                    },
                },
                **_RESP,
            },
        },
    ),
    "v0.0.40_openapi_jobs_requeue_query": (
        REQUEUE_SINCE,
        {
            "type": "object",
            "properties": {
                "flags": {"type": "array", "items": {"type": "string", "enum": ["Incomplete", "Hold", "SpecialExit"]}},
                "jobs": {"type": "array", "items": _STR},
            },
        },
    ),
}


def _op(op_id: str, summary: str, schema: str, **extra: Any) -> dict[str, Any]:
    err = {"$ref": "#/components/schemas/v0.0.40_openapi_resp"}
    return {
        "operationId": op_id,
        "summary": summary,
        "tags": ["slurm"],
        "responses": {
            "200": {
                "description": summary,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
            },
            "default": {"description": "an error, in errors[]", "content": {"application/json": {"schema": err}}},
        },
        "security": [{"user": [], "token": []}, {"bearer": []}, {}],
        **extra,
    }


def _requeue_paths() -> dict[str, Any]:
    job_id = {"name": "job_id", "in": "path", "required": True, "schema": _STR}
    flags = {
        "name": "flags",
        "in": "query",
        "required": False,
        "schema": {"type": "string"},
        "description": "Incomplete, Hold (comma-separated; SpecialExit is not supported)",
    }
    body = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/v0.0.40_openapi_jobs_requeue_query"}}
        },
    }
    return {
        "/slurm/v0.0.40/job/{job_id}/requeue": {
            "get": _op(
                "slurm_v0040_get_job_requeue",
                "request job requeue",
                "v0.0.40_openapi_job_requeue_resp",
                parameters=[job_id, flags],
            )
        },
        "/slurm/v0.0.40/jobs/requeue": {
            "post": _op(
                "slurm_v0040_post_jobs_requeue",
                "batch requeue job(s)",
                "v0.0.40_openapi_jobs_requeue_resp",
                requestBody=body,
            )
        },
    }


def _remove_desc(schemas: dict[str, Any], version: str) -> None:
    props = schemas["v0.0.40_job_desc_msg"]["properties"]
    for name, since in DESC_REMOVED.items():
        if at_least(version, since):
            props.pop(name, None)
    for name, (since, until) in DESC_IGNORED_SINCE.items():
        if at_least(version, since) and (until is None or not at_least(version, until)):
            props[name] = {"description": "accepted and ignored by muster"}


def openapi_document(base: dict[str, Any], version: str) -> dict[str, Any]:
    """``version``'s document: v0.0.40's (``base``) edited by the table, its names renamed."""
    doc = copy.deepcopy(base)
    schemas = doc["components"]["schemas"]
    for schema, fields in _BY_SCHEMA.items():
        props = schemas[f"v0.0.40_{schema}"]["properties"]
        for name, entries in fields.items():
            entry = next((e for e in entries if e.covers(version)), None)
            if entry is None:
                props.pop(name, None)
            elif entry.doc is not None:
                props[name] = copy.deepcopy(entry.doc)
    _remove_desc(schemas, version)
    for name, (since, schema_doc) in _SCHEMAS_SINCE.items():
        if at_least(version, since):
            schemas[name] = copy.deepcopy(schema_doc)
    if at_least(version, "v0.0.42"):
        delete = doc["paths"]["/slurm/v0.0.40/job/{job_id}"]["delete"]
        delete["responses"]["200"]["content"]["application/json"]["schema"] = {
            "$ref": "#/components/schemas/v0.0.40_openapi_kill_job_resp"
        }
    if at_least(version, REQUEUE_SINCE):
        doc["paths"].update(_requeue_paths())
    if version == BASE:
        return doc
    text = json.dumps(doc).replace("v0.0.40", version).replace("v0040", version.replace(".", ""))
    out: dict[str, Any] = json.loads(text)
    return out


def combined_document(base: dict[str, Any]) -> dict[str, Any]:
    """Every version's paths and schemas in one document, as slurmrestd serves ``/openapi/v3``."""
    out = copy.deepcopy(base)
    out["info"]["version"] = ",".join(VERSIONS)
    for version in VERSIONS[1:]:
        doc = openapi_document(base, version)
        out["paths"].update(doc["paths"])
        out["components"]["schemas"].update(doc["components"]["schemas"])
    for path, ops in out["paths"].items():  # as Slurm 25.11 marks them
        if path.split("/")[2:3] and path.split("/")[2] in DEPRECATED:
            for op in ops.values():
                op["deprecated"] = True
    return out


def version_of(path: str) -> str:
    """The version a request path names (``/slurm/v0.0.42/jobs`` -> ``v0.0.42``)."""
    parts = path.split("/")
    return parts[2] if len(parts) > 2 and parts[2] in VERSIONS else BASE


# What the items of an answer's lists are, by key (``jobs``: slurmdb's records or job_info).
_ITEMS = {"pings": "controller_ping"}


def render(version: str, path: str, document: dict[str, Any], schema: str | None = None) -> dict[str, Any]:
    """A whole answer (built in v0.0.40's layout) as ``version`` shows it: ``schema`` names
    the answer's own schema where the table has fields of it; its lists' items are shown by
    theirs."""
    if version == BASE:
        return document
    out = view(version, schema, document) if schema else dict(document)
    items = dict(_ITEMS, jobs="job" if path.startswith("/slurmdb/") else "job_info")
    for key, item_schema in items.items():
        if isinstance(out.get(key), list):
            out[key] = [view(version, item_schema, x) if isinstance(x, dict) else x for x in out[key]]
    if isinstance(out.get("meta"), dict):
        out["meta"] = meta(version, copy.deepcopy(out["meta"]))
    return out
