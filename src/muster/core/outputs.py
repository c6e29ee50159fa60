"""Where a job's or a step's stdout and stderr go: Slurm's filename patterns, resolved
purely (by the agent that opens the files, and by the controller that shows them).

``expand_pattern`` replaces the ``%`` escapes of ``sbatch --output/--error`` and of
``srun --output/--error/--input`` (one resolver for both: an srun inside array task 7_3,
job id 10, sees ``%A`` 7, ``%a`` 3, ``%j`` 10, as the batch script's own output does):

====  ===========================================================================
%%    a literal ``%``
%j    job id                      %J   job id.step id (the batch step: job id alone)
%x    job name                    %u   user name
%N    short node name             %n   node index within the allocation or step
%A    array master job id (= job id when not an array)
%a    array task id (4294967294, Slurm's "no value", when not an array)
%b    array task id modulo 10     %s   step id ("batch" for the batch script)
%t    task id (0 for the batch script)
====  ===========================================================================

A number between ``%`` and the letter zero-pads numeric fields (``%5j`` -> ``00042``);
text fields ignore it. An unknown escape is kept as written. A pattern holding a
backslash is taken literally, less its backslashes (Slurm's "do not process" rule).

``output_paths`` applies the defaults (``slurm-%j.out``, ``slurm-%A_%a.out`` for an array
task; stderr goes to the stdout file) and makes relative paths relative to the job's
working directory. It touches no file: opening happens in the launched child, as the user.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PatternFields",
    "expand_pattern",
    "fields_for_job",
    "fields_for_task",
    "output_paths",
    "resolve_paths",
]

NO_ARRAY_TASK = 4294967294  # what Slurm prints for %a outside an array

_ESCAPE_RE = re.compile(r"%(\d*)([%A-Za-z])")


@dataclass(frozen=True, slots=True)
class PatternFields:
    job_id: int
    job_name: str
    user: str
    node: str
    node_index: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    step_id: int | None = None  # None: the batch script
    task: int = 0


def expand_pattern(pattern: str, fields: PatternFields) -> str:
    if "\\" in pattern:
        return pattern.replace("\\", "")

    array_master = fields.array_job_id if fields.array_job_id is not None else fields.job_id
    array_task = fields.array_task_id if fields.array_task_id is not None else NO_ARRAY_TASK
    numbers: dict[str, int] = {
        "j": fields.job_id,
        "J": fields.job_id,
        "A": array_master,
        "a": array_task,
        "b": array_task % 10,
        "n": fields.node_index,
        "t": fields.task,
    }
    texts: dict[str, str] = {
        "x": fields.job_name,
        "u": fields.user,
        "N": fields.node.split(".", 1)[0],
        "s": "batch",
    }
    if fields.step_id is not None:
        numbers["s"] = fields.step_id
        texts["J"] = f"{fields.job_id}.{fields.step_id}"
        del numbers["J"]

    def replace(m: re.Match[str]) -> str:
        width, letter = m.group(1), m.group(2)
        if letter == "%":
            return "%" if not width else m.group(0)
        if letter in numbers:
            return str(numbers[letter]).zfill(int(width) if width else 0)
        if letter in texts:
            return texts[letter]
        return m.group(0)

    return _ESCAPE_RE.sub(replace, pattern)


def fields_for_job(job: Mapping[str, Any], node: str, node_index: int = 0) -> PatternFields:
    """Pattern fields from a job as sent by the controller (``Job.to_dict()`` plus extras)."""
    spec = job.get("spec") or {}
    return PatternFields(
        job_id=int(job["job_id"]),
        job_name=str(spec.get("name") or "sbatch"),
        user=str(job.get("user") or job.get("uid", "")),
        node=node,
        node_index=node_index,
        array_job_id=_opt_int(job.get("array_job_id")),
        array_task_id=_opt_int(job.get("array_task_id")),
    )


def fields_for_task(grant: Mapping[str, Any], node: str, node_index: int, task: int) -> PatternFields:
    """Pattern fields for one task of a step, from the step's grant (``ctld.steps``):
    its ``job_id``, ``step_id``, ``user`` and ``job`` (``name``, ``array_job_id``,
    ``array_task_id``)."""
    job = grant.get("job") or {}
    return PatternFields(
        job_id=int(grant["job_id"]),
        job_name=str(job.get("name") or ""),
        user=str(grant.get("user") or ""),
        node=node,
        node_index=node_index,
        array_job_id=_opt_int(job.get("array_job_id")),
        array_task_id=_opt_int(job.get("array_task_id")),
        step_id=int(grant["step_id"]),
        task=task,
    )


def output_paths(job: Mapping[str, Any], node: str, node_index: int = 0) -> tuple[str, str]:
    """Absolute (stdout, stderr) paths for the batch script; equal when stderr is unset."""
    spec = job.get("spec") or {}
    return resolve_paths(
        fields_for_job(job, node, node_index), str(spec.get("workdir") or "/"), spec.get("stdout"), spec.get("stderr")
    )


def resolve_paths(fields: PatternFields, workdir: str, stdout: str | None, stderr: str | None) -> tuple[str, str]:
    """(stdout, stderr) from the patterns given (None: the defaults), absolute."""
    default = "slurm-%A_%a.out" if fields.array_task_id is not None else "slurm-%j.out"
    out = _resolve(expand_pattern(stdout or default, fields), workdir)
    err = _resolve(expand_pattern(stderr, fields), workdir) if stderr else out
    return out, err


def _resolve(path: str, workdir: str) -> str:
    return os.path.normpath(os.path.join(workdir, path))


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
