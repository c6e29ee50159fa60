"""Packaging: the distribution ``muster-wlm``, a version per build from git
(docs/decisions/0002-versions.md), and the systemd units in the wheel.

The wheels are built from a clone of this repository's HEAD (what CI and a release build),
without build isolation (hatchling and hatch-vcs are in the ``test`` extra), so nothing is
fetched."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest
from packaging.version import Version

import muster

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BIN = pathlib.Path(sys.executable).parent
GIT = shutil.which("git")
UNITS = ("musterctld.service", "musterd.service", "musterrestd.service")


def _git(repo: pathlib.Path, *args: str) -> str:
    out = subprocess.run(
        [GIT or "git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def scm_version(repo: pathlib.Path) -> str:
    """The version hatch-vcs gives a build of ``repo``: setuptools-scm with pyproject's options."""
    from setuptools_scm import get_version

    return get_version(root=str(repo), **PYPROJECT["tool"]["hatch"]["version"]["raw-options"])


def test_the_distribution_is_not_the_unrelated_muster_on_pypi() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == "muster-wlm"
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["source"] == "vcs"
    # the commands and the daemons keep their names
    assert {"muster", "musterd", "musterctld", "musterrestd", "sbatch", "sdiag"} <= set(project["scripts"])


# setuptools-scm 10 renamed release-branch-semver (older ones know only that name)
@pytest.mark.filterwarnings("ignore:Version scheme:DeprecationWarning")
@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_the_version_from_git_differs_between_two_commits(tmp_path: pathlib.Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "f").write_text("1")
    _git(repo, "add", "f")
    _git(repo, "commit", "-qm", "one")
    untagged = scm_version(repo)
    assert untagged.startswith("0.1.0.dev1+g"), untagged  # a clone without tags: still distinct
    _git(repo, "tag", "-a", "v0.1.0", "-m", "0.1.0")
    assert scm_version(repo) == "0.1.0"  # a release is its tag
    (repo / "f").write_text("2")
    _git(repo, "commit", "-qam", "two")
    first = scm_version(repo)
    (repo / "f").write_text("3")
    _git(repo, "commit", "-qam", "three")
    second = scm_version(repo)
    head = _git(repo, "rev-parse", "--short=7", "HEAD")
    assert first.startswith("0.2.0.dev1+g") and second.startswith("0.2.0.dev2+g"), (first, second)
    assert head in second
    # pip upgrades: each later build orders after the one before, a release after its dev builds
    assert Version("0.1.0") < Version(first) < Version(second) < Version("0.2.0")
    (repo / "f").write_text("uncommitted")
    assert scm_version(repo).startswith(second + ".d")  # a dirty tree says so


def _build(src: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.mark.filterwarnings("ignore:Version scheme:DeprecationWarning")
@pytest.mark.skipif(GIT is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout")
def test_the_wheel_carries_its_git_version_and_the_units_and_an_sdist_builds_without_git(
    tmp_path: pathlib.Path,
) -> None:
    clone = tmp_path / "clone"
    subprocess.run([GIT or "git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    version = scm_version(clone)
    wheel = _build(clone, tmp_path / "w1")
    assert wheel.name == f"muster_wlm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert z.read("muster/_version.py").decode() == f"__version__ = {version!r}\n"
        data = f"muster_wlm-{version}.data/data/share/muster/systemd"
        for unit in UNITS:
            assert f"{data}/{unit}" in names, sorted(n for n in names if ".data/" in n)
        agent = z.read(f"{data}/musterd.service").decode().splitlines()
        assert "muster/deploy" not in "".join(names)  # the units are data, not a package
    for line in ("LimitMEMLOCK=infinity", "LimitNOFILE=131072", "LimitSTACK=infinity"):
        assert line in agent
    rest = (clone / "deploy" / "systemd" / "musterrestd.service").read_text()
    assert "ExecStart=/opt/muster/bin/musterrestd " in rest and "DynamicUser=yes" in rest

    # an sdist (no .git inside) builds a wheel of the same version
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from hatchling.build import build_sdist; print(build_sdist(sys.argv[1]))"]
        + [str(tmp_path / "sd")],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    with tarfile.open(tmp_path / "sd" / out.stdout.strip().splitlines()[-1]) as tar:
        tar.extractall(tmp_path / "unpacked")  # our own sdist
    (src,) = (tmp_path / "unpacked").iterdir()
    assert not (src / ".git").exists()
    assert _build(src, tmp_path / "w2").name == wheel.name


def _version_of(command: str) -> str:
    out = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_installed_build_knows_its_version() -> None:
    assert muster.__version__ not in ("0+unknown", "0.1.0")
    Version(muster.__version__)  # PEP 440


@pytest.mark.parametrize("command", ["sbatch", "squeue", "sinfo", "scontrol", "sdiag", "srun", "sacct"])
def test_every_command_prints_the_builds_version_in_slurms_form(command: str) -> None:
    assert _version_of(command) == f"slurm 22.05.8 (muster {muster.__version__})"


@pytest.mark.parametrize("command", ["muster", "musterd", "musterctld", "musterrestd", "muster-progress"])
def test_the_daemons_print_the_builds_version(command: str) -> None:
    assert _version_of(command) == f"muster {muster.__version__} (slurm 22.05 compatible)"
