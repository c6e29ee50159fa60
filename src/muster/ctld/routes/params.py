"""What the controller's routes read from a request's path and query: comma-separated
lists (``?user=a,b``) and job references (``12``, ``12_3``, ``12+1``), a bad one ``InvalidJobId``."""

from __future__ import annotations

from starlette.requests import Request

from muster.core.arrays import JobRef, parse_job_ref
from muster.core.errors import InvalidJobId


def query_list(request: Request, key: str) -> list[str] | None:
    v = request.query_params.get(key)
    return [x for x in v.split(",") if x] if v else None


def job_ref(text: str) -> JobRef:
    try:
        return parse_job_ref(text)
    except ValueError:
        raise InvalidJobId() from None
