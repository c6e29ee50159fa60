"""``-m arbitrary``'s SLURM_HOSTFILE as sbatch/salloc/srun(1) read it: one host a line or comma
separated, its first N with ``-n``, block without the variable."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.optionvalues import OptionValueError
from muster.slurm.jobrequest import arbitrary_nodes, read_hostfile


def test_lines_and_commas_in_order(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("node3\nnode1,node3\n\nnode2\n")
    env = {"SLURM_HOSTFILE": str(path)}
    assert read_hostfile(env) == ["node3", "node1", "node3", "node2"]
    assert read_hostfile(env, 2) == ["node3", "node1"]
    with pytest.raises(OptionValueError, match="fewer than the 5 tasks"):
        read_hostfile(env, 5)
    assert read_hostfile({}) is None
    with pytest.raises(OptionValueError, match="Unable to open SLURM_HOSTFILE"):
        read_hostfile({"SLURM_HOSTFILE": str(tmp_path / "missing")})


def test_a_jobs_nodes_and_tasks_come_from_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("node3\nnode1\nnode3\n")
    spec: dict[str, object] = {}
    arbitrary_nodes(spec, {"SLURM_HOSTFILE": str(path)})
    assert spec == {"nodelist": ["node3", "node1"], "min_nodes": 2, "max_nodes": 2, "ntasks": 3, "ntasks_per_node": 2}
    untouched: dict[str, object] = {"ntasks": 1}
    arbitrary_nodes(untouched, {})
    assert untouched == {"ntasks": 1}
