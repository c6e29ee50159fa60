"""srun's container options (cli.containeropts): the launch body's ``container``."""

from __future__ import annotations

import pytest

from muster.cli import srun
from muster.cli.common import CommandError
from muster.cli.containeropts import SPANK_PREFIX as SPANK


def container(*argv: str, env: dict[str, str] | None = None) -> object:
    return srun.build([*argv, "true"], env or {"PATH": "/bin"}, "/home/ada/run").container


def test_no_container_options_no_container() -> None:
    assert container() is None


def test_pyxis_options_become_the_request() -> None:
    assert container(
        "--container-image=nvcr.io/nvidia/pytorch:24.01",
        "--container-mounts=/data:/data:ro,/scratch",
        "--container-workdir=/data",
        "--container-name=train",
        "--container-writable",
        "--no-container-mount-home",
        "--container-env=PATH, HOME",
    ) == {
        "image": "nvcr.io/nvidia/pytorch:24.01",
        "mounts": "/data:/data:ro,/scratch",
        "workdir": "/data",
        "name": "train",
        "writable": True,
        "mount_home": False,
        "env": "PATH,HOME",
    }


def test_paths_are_made_absolute_against_sruns_directory() -> None:
    assert container("--container-image=./img.tar.gz") == {"image": "/home/ada/run/img.tar.gz"}
    assert container("--container=bundle") == {"bundle": "/home/ada/run/bundle"}
    assert container(env={"PATH": "/bin", "SLURM_CONTAINER": "/b"}) == {"bundle": "/b"}


def test_a_name_alone_reuses_the_jobs_container() -> None:
    assert container("--container-name=train") == {"name": "train"}


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--container-workdir=/x"], "--container-image"),
        (["--container-image=/i.tar", "--container=/b"], "cannot be used together"),
        (["--container-image=/i.tar", "--container-mounts=rel:/x"], "invalid mount"),
        (["--container-image=/i.tar", "--container-workdir=rel"], "absolute"),
        (["--container-name=../x"], "not a valid container name"),
    ],
)
def test_bad_container_options_are_refused(argv: list[str], error: str) -> None:
    with pytest.raises(CommandError, match=error):
        container(*argv)


def test_sbatchs_pyxis_options_are_the_defaults_of_the_jobs_sruns() -> None:
    from muster.cli import sbatch

    sub = sbatch.build(
        ["--container-image=/img.tar", "--container-writable", "--wrap", "srun true"], {"PATH": "/bin"}, "/w"
    )
    assert isinstance(sub, sbatch.Submission)
    env = sub.spec["environment"]
    assert isinstance(env, dict)
    assert env[SPANK + "container_image"] == "/img.tar" and env[SPANK + "container_writable"] == "1"
    # the job's srun reads them; its own command line wins
    assert container(env=env) == {"image": "/img.tar", "writable": True}
    assert container("--container-image=/other.tar", env=env) == {"image": "/other.tar", "writable": True}


def test_a_container_step_is_refused_where_an_agent_is_too_old_to_run_it() -> None:
    from muster.cli.containeropts import CONTAINER_PROTOCOL, check_agents

    check_agents([{"name": "node1", "protocol": CONTAINER_PROTOCOL}])
    with pytest.raises(CommandError, match="node2's musterd \\(protocol 2\\) cannot run containers"):
        check_agents([{"name": "node1", "protocol": CONTAINER_PROTOCOL}, {"name": "node2", "protocol": 2}])
    with pytest.raises(CommandError, match="unknown protocol"):
        check_agents([{"name": "node1"}])  # a controller that does not say


def test_sbatchs_container_is_the_jobs_slurm_container_made_absolute() -> None:
    from muster.cli import sbatch

    sub = sbatch.build(["--container=bundles/b1", "--wrap", "srun true"], {"PATH": "/bin"}, "/w")
    assert isinstance(sub, sbatch.Submission)
    env = sub.spec["environment"]
    assert isinstance(env, dict) and env["SLURM_CONTAINER"] == "/w/bundles/b1"
    assert container(env=env) == {"bundle": "/w/bundles/b1"}  # the job's sruns: the same bundle
