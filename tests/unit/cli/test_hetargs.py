"""Heterogeneous jobs on sbatch's command line (``A : B``) and in its scripts
(``#SBATCH hetjob``): one request per component, options carried over as Slurm does."""

from __future__ import annotations

import io

import pytest

from muster.cli import sbatch
from muster.cli.common import CommandError
from muster.cli.directives import script_directive_groups, script_directives
from muster.core.hetjob import het_label, split_components


def _build(argv: list[str], environ: dict | None = None) -> sbatch.Submission:
    result = sbatch.build(argv, environ or {"HOME": "/h"}, "/work", io.StringIO(""), now=1_000_000.0)
    assert isinstance(result, sbatch.Submission)
    return result


def _script(tmp_path, text: str) -> str:
    path = tmp_path / "het.sh"
    path.write_text(text)
    return str(path)


def test_colons_on_the_command_line_make_one_request_per_component(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/sh\nhostname\n")
    sub = _build(["-N1", "-J", "train", ":", "-N2", "-n", "4", path, "arg"])
    assert sub.components is not None and len(sub.components) == 2
    first, second = sub.components
    assert first is sub.spec
    assert (first["min_nodes"], second["min_nodes"]) == (1, 2)
    assert second["ntasks"] == 4 and first.get("ntasks") is None
    # the job name carries over; only the first component runs the script
    assert first["name"] == second["name"] == "train"
    assert first["script"].startswith("#!/bin/sh") and second["script"] is None
    assert first["argv"] == ["arg"] and second["argv"] == []


def test_hetjob_lines_split_a_scripts_directives(tmp_path) -> None:
    text = (
        "#!/bin/bash\n"
        "#SBATCH --job-name=trainer-0 --ntasks-per-node=1 --cpus-per-task=2\n"
        "#SBATCH hetjob\n"
        "#SBATCH --job-name=trainer-1 -N 2\n"
        "#SBATCH packjob\n"
        "#SBATCH --mem=100\n"
        "srun hostname\n"
    )
    groups = script_directive_groups(text)
    assert groups == [
        ["--job-name=trainer-0", "--ntasks-per-node=1", "--cpus-per-task=2"],
        ["--job-name=trainer-1", "-N", "2"],
        ["--mem=100"],
    ]
    sub = _build([_script(tmp_path, text)])
    assert sub.components is not None
    names = [c["name"] for c in sub.components]
    assert names == ["trainer-0", "trainer-1", "trainer-1"]  # a name carries over
    assert sub.components[0]["cpus_per_task"] == 2
    assert "cpus_per_task" not in sub.components[1]  # --cpus-per-task does not carry over
    assert sub.components[1]["min_nodes"] == 2
    assert sub.components[2]["mem_per_node"] == 100


def test_time_carries_over_but_can_be_set_again_and_each_component_names_its_partition(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/sh\ntrue\n")
    sub = _build(["-p", "gpu", "-t", "10", ":", "-t", "5", ":", "-n", "2", "-p", "cpu", path])
    assert sub.components is not None
    assert [c.get("partitions") for c in sub.components] == [["gpu"], None, ["cpu"]]
    assert [c["time_limit"] for c in sub.components] == [600, 300, 300]


def test_a_plain_script_is_no_heterogeneous_job(tmp_path) -> None:
    sub = _build([_script(tmp_path, "#!/bin/sh\n#SBATCH -N 2\ntrue\n")])
    assert sub.components is None


def test_the_word_hetjob_inside_an_option_is_no_separator() -> None:
    text = "#!/bin/sh\n#SBATCH --job-name hetjob\ntrue\n"
    assert script_directive_groups(text) == [["--job-name", "hetjob"]]
    assert script_directives(text) == ["--job-name", "hetjob"]


def test_a_bad_option_in_a_later_component_is_refused_like_any_other(tmp_path) -> None:
    path = _script(tmp_path, "#!/bin/sh\ntrue\n")
    with pytest.raises(CommandError):
        _build(["-N1", ":", "--nodes=zero", path])


def test_split_components_and_labels() -> None:
    assert split_components(["-n1", ":", "-n2", "cmd"]) == [["-n1"], ["-n2", "cmd"]]
    assert het_label(7, 7, 1) == "7+1"
    assert het_label(7, None, None) == "7"


def test_json_outputs_carry_the_het_job_fields() -> None:
    from muster.slurm.slurmjson import sacct_job, squeue_job

    job = {"job_id": 8, "het_job_id": 7, "het_job_offset": 1, "spec": {"name": "w"}}
    row = squeue_job(job, "RUNNING")
    assert row["het_job_id"] == {"set": True, "infinite": False, "number": 7}
    assert row["het_job_offset"]["number"] == 1 and row["het_job_offset"]["set"]
    plain = squeue_job({"job_id": 9, "spec": {}}, "PENDING")
    assert plain["het_job_id"]["number"] == 0 and not plain["het_job_offset"]["set"]
    rec = sacct_job({"job_id": 8, "het_job_id": 7, "het_job_offset": 1, "state": "COMPLETED"})
    assert rec["het"] == {"job_id": 7, "job_offset": {"set": True, "infinite": False, "number": 1}}
