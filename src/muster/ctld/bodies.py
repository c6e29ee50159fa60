"""The request bodies of the controller's HTTP API (``ctld.api``), as pydantic models.

``SpecModel`` is derived from ``core.job.JobSpec``: each field carries the checks
``core.job`` declares, so the submission schema and the job model cannot drift apart.

Every body refuses a field it does not know (a typo, a bug), except from a command one
protocol newer than the controller: ``known_only`` leaves out its new fields first, and
``ctld.api`` logs them and names them in the answer (docs/upgrade.md).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, get_args, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from muster.core import rlimits
from muster.core.errors import InvalidRequest
from muster.core.job import COUNT, JobSpec
from muster.core.resources import gpu_request
from muster.core.timefmt import MAX_TIME_LIMIT


class _SpecBase(BaseModel):
    """What the submission schema adds to JobSpec's own fields: ``gres`` as sbatch's text
    (turned into ``gpus_per_node``/``gpu_type``), and the conversion to a ``JobSpec`` (with
    the names and values of ``rlimits`` checked: ``core.rlimits``)."""

    model_config = ConfigDict(extra="forbid")

    gres: str | None = None

    def to_spec(self) -> JobSpec:
        data = self.model_dump()
        gres = data.pop("gres")
        if gres:
            try:
                count, gtype = gpu_request(gres)
            except ValueError as e:
                raise InvalidRequest(str(e)) from None
            data["gpus_per_node"] = max(data["gpus_per_node"], count)
            if gtype:
                data["gpu_type"] = gtype
        if data.get("rlimits") is not None:
            try:
                data["rlimits"] = rlimits.check(data["rlimits"])
            except rlimits.RlimitError as e:
                raise InvalidRequest(str(e)) from None
        return JobSpec.from_dict(data)


def _spec_fields() -> dict[str, Any]:
    """JobSpec's fields as pydantic fields, with the checks written next to each."""
    hints = get_type_hints(JobSpec)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(JobSpec):
        checks = dict(f.metadata.get("check", {}))
        if f.default_factory is not dataclasses.MISSING:
            spec = Field(default_factory=f.default_factory, **checks)
        else:
            spec = Field(f.default, **checks)
        out[f.name] = (hints[f.name], spec)
    return out


# The submission body: JobSpec's fields, each checked as ``core.job`` says (one schema).
if TYPE_CHECKING:  # built at run time from JobSpec; the checker sees the fields read here

    class SpecModel(_SpecBase):
        script: str | None
        array: str | None

else:
    SpecModel = create_model("SpecModel", __base__=_SpecBase, **_spec_fields())


class SubmitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: SpecModel
    # A heterogeneous job: every component's request, ``spec`` being the first's.
    components: list[SpecModel] | None = Field(None, min_length=2, max_length=128)


class SignalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_ids: list[int | str] = []  # 123, or array forms "123_4", "123_[1-3]"
    user: str | None = None
    name: str | None = None
    partition: str | None = None
    states: list[str] | None = None
    signal: str | int | None = None
    batch_only: bool = False


class HoldBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    admin: bool = True


class UpdateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time_limit: int | None = Field(None, ge=1, le=MAX_TIME_LIMIT)
    priority: int | None = Field(None, ge=0, le=2**32 - 1)
    nice: int | None = Field(None, ge=-2147483645, le=2147483645)
    name: str | None = None
    partition: str | None = None
    comment: str | None = None
    begin_time: float | None = None
    min_nodes: int | None = Field(None, ge=1, le=COUNT)
    array_throttle: int | None = Field(None, ge=0, le=COUNT)


class RequeueBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hold: bool = False


class NodeUpdateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: list[str] = Field(min_length=1)
    state: str | None = None
    reason: str | None = Field(None, max_length=1024)


class ReservationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]+$", max_length=256)
    start_time: float | None = None
    end_time: float | None = None
    duration: int | None = Field(None, ge=1)
    nodes: list[str] | None = None
    node_cnt: int | None = Field(None, ge=1)
    users: list[str] | None = None
    accounts: list[str] | None = None
    flags: list[str] | None = None
    partition: str | None = None
    features: str | None = Field(None, max_length=1024)


def known_only(model: type[BaseModel], data: Any, where: str = "") -> tuple[Any, list[str]]:
    """``data`` without the fields ``model`` (and the models nested in it) does not know,
    and the paths of those left out (``spec.new_limit``, ``components[1].x``). For a
    command one release newer than this controller (``ctld.api``): its new fields are
    ignored, and said so, while the known ones are checked as ever."""
    if not isinstance(data, dict):
        return data, []
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            ignored.append(f"{where}{key}")
            continue
        sub = _model_in(field.annotation)
        if sub is not None and isinstance(value, dict):
            value, more = known_only(sub, value, f"{where}{key}.")
            ignored += more
        elif sub is not None and isinstance(value, list):
            items = []
            for i, item in enumerate(value):
                item, more = known_only(sub, item, f"{where}{key}[{i}].")
                items.append(item)
                ignored += more
            value = items
        out[key] = value
    return out, ignored


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (itself, in a list, or optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
