"""The runtime install is lean and complete: ``pip install muster-wlm`` pulls what the
controller, the agents and the commands import, and nothing they do not.

* Every third-party module that ``src/muster`` imports is a base dependency of
  pyproject.toml, or an optional one: listed in ``muster.core.extras.EXTRAS`` under an extra
  of pyproject.toml that installs it, imported only inside functions of a module that
  calls ``require`` for it (so a missing one is a clear error naming the extra), or
  imported under ``try: ... except ImportError`` with a fallback (NVML, where nvidia-smi
  answers instead).
* Every module of muster imports in a Python that can import only the standard library,
  muster and the base dependencies with their own dependencies (the rest is blocked).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import pathlib
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from muster.core.extras import EXTRAS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "muster"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(reqs: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in reqs}


BASE = _names(PYPROJECT["dependencies"])


def _dists_of(module: str) -> set[str]:
    """The installed distributions that provide top-level ``module``."""
    return {canonicalize_name(d) for d in md.packages_distributions().get(module, [])}


def _third_party_imports() -> list[tuple[pathlib.Path, str, ast.AST, list[ast.AST]]]:
    """(file, top-level module, import node, its ancestors) for each third-party import."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))

        def walk(node: ast.AST, parents: list[ast.AST], path: pathlib.Path = path) -> None:
            for child in ast.iter_child_nodes(node):
                mods: list[str] = []
                if isinstance(child, ast.Import):
                    mods = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    mods = [child.module]
                for m in mods:
                    top = m.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "muster":
                        found.append((path, top, child, parents))
                walk(child, [*parents, child])

        walk(tree, [])
    return found


def _under_import_guard(parents: list[ast.AST], node: ast.AST) -> bool:
    """Whether ``node`` sits in the body of a ``try`` that catches ImportError."""
    for parent in parents:
        if not isinstance(parent, ast.Try) or not any(node in ast.walk(stmt) for stmt in parent.body):
            continue
        for handler in parent.handlers:
            caught = handler.type
            names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
            if any(
                isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")
                for n in names
            ):
                return True
    return False


def test_every_third_party_import_is_a_base_dependency_or_an_extra_or_guarded() -> None:
    extras = {name: _names(reqs) for name, reqs in PYPROJECT["optional-dependencies"].items()}
    wrong = []
    for path, top, node, parents in _third_party_imports():
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {top}"
        dists = _dists_of(top)
        if dists & BASE:
            continue
        if top in EXTRAS:
            extra = EXTRAS[top]
            if extra not in extras or not (dists & extras[extra]):
                wrong.append(f"{where}: EXTRAS says [{extra}], which does not install it")
            elif not any(isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) for p in parents):
                wrong.append(f"{where}: an optional module imported at module level")
            elif f'require("{top}"' not in path.read_text():
                wrong.append(f'{where}: imported without require("{top}", ...) in its module')
            continue
        if _under_import_guard(parents, node):
            continue
        wrong.append(f"{where}: not a base dependency, not in core.extras.EXTRAS, not guarded")
    assert not wrong, "\n".join(wrong)


def test_the_base_dependencies_are_only_what_the_daemons_and_commands_use() -> None:
    imported = {top for _path, top, _node, _parents in _third_party_imports()}
    used = set().union(*(_dists_of(top) for top in imported))
    assert BASE <= used, f"base dependencies nothing imports: {sorted(BASE - used)}"
    for heavy in ("matplotlib", "pytest", "torch", "submitit", "psycopg", "hypothesis"):
        assert canonicalize_name(heavy) not in BASE, f"{heavy} belongs in an extra"


def test_every_extra_in_the_table_exists_in_pyproject() -> None:
    assert set(EXTRAS.values()) <= set(PYPROJECT["optional-dependencies"])
    assert {"plot", "pg", "test", "clients"} <= set(PYPROJECT["optional-dependencies"])


def _closure(names: set[str]) -> set[str]:
    """Base distributions and what they need (markers evaluated, no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


# Run in a child Python: block every import outside the lean install, import all of muster.
CHILD = r"""
import importlib, json, pkgutil, sys
allowed = set(json.loads(sys.argv[1]))

class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top == "muster" or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"{name} is not part of the runtime install", name=name)

sys.meta_path.insert(0, Block())
import muster
failed = []
for info in pkgutil.walk_packages(muster.__path__, "muster."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed.append(f"{info.name}: {exc}")
print("\n".join(failed))
"""


def test_every_module_imports_with_only_the_runtime_install() -> None:
    dists = _closure(BASE)
    allowed = sorted(m for m, owners in md.packages_distributions().items() if dists & _names(owners))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(allowed)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout
