"""The house rules, checked: layers point one way and only core/clock.py reads time."""

from __future__ import annotations

import ast
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "muster"

# package -> muster packages it must not import
FORBIDDEN = {
    "core": {"sched", "ctld", "agent", "cli", "sim", "protocol", "cluster", "client", "slurm", "rest"},
    "sched": {"ctld", "agent", "cli", "sim", "protocol", "cluster", "client", "slurm", "rest"},
    "protocol": {"ctld", "agent", "cli", "sched", "sim", "cluster", "client", "slurm", "rest"},
    # the client side of the wire (settings, credentials, failover) and Slurm's surface
    # (formats, field tables, the job options, Slurm JSON): shared by cli/ and rest/, below both
    "client": {"ctld", "agent", "cli", "sched", "sim", "cluster", "slurm", "rest"},
    "slurm": {"ctld", "agent", "cli", "sched", "sim", "cluster", "rest"},
    "cli": {"ctld", "sched", "agent", "rest"},
    "sim": {"ctld", "agent", "cli"},
    "agent": {"ctld", "sched", "cli", "sim"},
    "ctld": {"agent", "cli", "sim", "rest"},
    "rest": {"ctld", "sched", "agent", "sim", "cluster", "cli"},
}
IMPURE_MODULES = {"asyncio", "sqlite3", "socket", "subprocess", "threading"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layers_point_one_way() -> None:
    broken = []
    for package, banned in FORBIDDEN.items():
        for path in (SRC / package).rglob("*.py"):
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] == "muster" and len(parts) > 1 and parts[1] in banned:
                    broken.append(f"{path.relative_to(SRC)} imports {name}")
    assert not broken, "\n".join(broken)


def test_rest_and_the_shared_packages_never_import_the_commands() -> None:
    """rest/, slurm/ and client/ reach no module of cli/, however spelled: ``import
    muster.cli.x``, ``from muster.cli.x import y``, ``from muster.cli import x``, ``from
    muster import cli``, at module level or inside a function (issue 39, item 3)."""
    broken = []
    for package in ("rest", "slurm", "client"):
        for path in sorted((SRC / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                for name in names:
                    if name == "muster.cli" or name.startswith("muster.cli."):
                        broken.append(f"{path.relative_to(SRC)}:{node.lineno} imports {name}")
    assert not broken, "\n".join(broken)


# Routes as small handler modules (issue 39, item 3): the controller's and musterrestd's
# route modules (ctld/routes/, rest/routes/, and every module of ctld/ or rest/ that builds
# routes: a ``*_routes`` or ``build_app`` function) hold no function over 100 lines, closures
# counted as the functions they are (``ast`` end_lineno).
ROUTE_FUNCTION_LINES = 100


def _route_modules() -> list[pathlib.Path]:
    found = []
    for package in ("ctld", "rest"):
        for path in sorted((SRC / package).rglob("*.py")):
            if "routes" in path.relative_to(SRC / package).parts[:-1]:
                found.append(path)
                continue
            tree = ast.parse(path.read_text(), str(path))
            if any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and (n.name.endswith("_routes") or n.name in ("build_routes", "build_app"))
                for n in tree.body
            ):
                found.append(path)
    return found


def test_route_modules_hold_no_function_over_100_lines() -> None:
    modules = _route_modules()
    names = {p.relative_to(SRC).as_posix() for p in modules}
    assert {"ctld/api.py", "rest/app.py", "ctld/routes/jobs.py", "rest/routes/jobs.py"} <= names
    offenders = []
    for path in modules:
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > ROUTE_FUNCTION_LINES:
                    offenders.append(f"{rel}:{node.lineno}: {node.name} has {length} lines")
    assert not offenders, "split route functions into handler modules or methods:\n" + "\n".join(offenders)


def test_core_and_sched_do_no_io() -> None:
    broken = []
    for package in ("core", "sched"):
        for path in (SRC / package).rglob("*.py"):
            for name in _imports(path):
                if name.split(".")[0] in IMPURE_MODULES:
                    broken.append(f"{path.relative_to(SRC)} imports {name}")
    assert not broken, "\n".join(broken)


def test_only_the_clock_module_reads_wall_time() -> None:
    pattern = re.compile(r"\btime\.(time|monotonic|perf_counter)\(|datetime\.now\(|datetime\.utcnow\(")
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("core/clock.py", "progress.py") or rel.startswith(("cluster/", "cli/", "client/")):
            # the local-cluster tool, commands and their client time their own waits, not the domain;
            # muster.progress runs inside jobs and stamps their reports
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _muster_imports(path: pathlib.Path, known: set[str]) -> set[str]:
    """The muster modules ``path`` imports, wherever the import stands (a function body or
    an ``if TYPE_CHECKING:`` block counts: a circle hidden there is still a circle)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out.update(n for n in names if n in known)
    return out


def test_no_module_imports_itself_back_through_a_circle() -> None:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    known = set(paths)
    graph = {m: _muster_imports(p, known) - {m} for m, p in paths.items()}
    # A package's __init__ is not an edge: importing muster.ctld.x runs muster.ctld first.
    circles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                circles.append(" -> ".join(stack[stack.index(n) :] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, "\n".join(circles)


# A module is split when it owns two things, not when it crosses a line count (docs/architecture.md,
# "Responsibilities"): what each module owns is said in the first line of its docstring and listed
# in its package's README, where a review reads it. Generated files carry no such line.
GENERATED = {"_version.py"}


def _modules() -> list[pathlib.Path]:
    return [path for path in sorted(SRC.rglob("*.py")) if path.name != "__init__.py" and path.name not in GENERATED]


def test_every_module_says_in_one_line_what_it_owns() -> None:
    missing = []
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
        first = doc.strip().splitlines()[0].strip() if doc else ""
        if not first:
            missing.append(f"{path.relative_to(SRC)}: no docstring saying what it owns")
    assert not missing, "\n".join(missing)


def test_every_module_is_listed_in_its_packages_readme() -> None:
    unlisted = []
    for path in _modules():
        if len(path.relative_to(SRC).parts) == 1:
            continue  # muster.progress, the jobs' own API: documented in docs/training.md
        package = path.relative_to(SRC).parts[0]
        readme = (SRC / package / "README.md").read_text()
        name = path.relative_to(SRC / package).with_suffix("").as_posix()
        if f"`{name}`" not in readme and f"`{name}.py`" not in readme:
            unlisted.append(f"{path.relative_to(SRC)} (in src/muster/{package}/README.md)")
    assert not unlisted, "say what these modules own in their package's README:\n" + "\n".join(unlisted)


# The agent's run states (issue 39 item 2): a run's state, and the facts that belong to its moves
# (the reason of TERMINATING, the SIGKILL time), are assigned only by the run-state owners, through
# the runs' transitions (Tracked.begin/stop/exited, Step.advance/stop), which check the invariants.
RUN_FACTS = {"state", "terminated_by", "kill_at", "terminated"}
RUN_STATE_OWNERS = {"agent/runstate.py", "agent/jobrecord.py", "agent/localstep.py"}


def _attribute_targets(node: ast.AST) -> list[ast.Attribute]:
    if isinstance(node, ast.Attribute):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [a for elt in node.elts for a in _attribute_targets(elt)]
    if isinstance(node, ast.Starred):
        return _attribute_targets(node.value)
    return []


def _run_fact_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Assignments to a run fact; an object's own ``self.state`` set in its ``__init__`` (the
    daemon's StateDir, not a run) is not one."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for attr in _attribute_targets(target):
                own = isinstance(attr.value, ast.Name) and attr.value.id == "self" and function == "__init__"
                if attr.attr in RUN_FACTS and not own:
                    found.append((attr.lineno, ast.unparse(attr)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def test_only_the_run_state_owners_assign_a_runs_state() -> None:
    offenders = []
    for path in sorted((SRC / "agent").rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name in RUN_STATE_OWNERS:
            continue
        for line, target in _run_fact_writes(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{name}:{line}: assigns {target}")
    assert not offenders, "move a run through its transitions (agent/jobrecord.py, agent/localstep.py):\n" + "\n".join(
        offenders
    )


def test_the_run_state_check_sees_a_write_outside_the_owners() -> None:
    tree = ast.parse(
        "class R:\n    def __init__(self):\n        self.state = 1\n"
        "def f(t, s):\n    t.state = 2\n    s.pid, t.terminated_by = 1, 'x'\n    t.kill_at += 1\n"
    )
    assert [target for _, target in _run_fact_writes(tree)] == ["t.state", "t.terminated_by", "t.kill_at"]


# One parser per syntax (issue 39): each syntax has one owner, and the pattern a second reader
# or writer would have to spell is found nowhere else.
ONE_OWNER = [
    # Slurm's compact counts, 2(x2),1: written only by core.counts.format_counts
    ("core/counts.py", re.compile(r"\(x\{"), "a compact count writer (use core.counts.format_counts)"),
    # GRES text's TRES prefixes: read only by core.resources.parse_gres
    ("core/resources.py", re.compile(r"""["']gres[/:]["']"""), "a GRES parser (use core.resources.parse_gres)"),
]


def test_each_syntax_has_one_owner() -> None:
    offenders = []
    for owner, pattern, what in ONE_OWNER:
        for path in SRC.rglob("*.py"):
            name = path.relative_to(SRC).as_posix()
            if name == owner:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{name}:{number}: {what}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_enforce_part_limits_is_read_by_one_function() -> None:
    """Whoever names the key hands its value to sched.config.part_limits_mode."""
    key = re.compile(r"""(?i)["']enforcepartlimits["']""")
    keep = {"sched/config.py", "core/confkeys.py", "cli/showconfig.py"}  # the owner, the key list, a sample
    offenders = []
    for path in SRC.rglob("*.py"):
        name = path.relative_to(SRC).as_posix()
        if name in keep:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if key.search(line) and "part_limits_mode(" not in line:
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "read EnforcePartLimits with sched.config.part_limits_mode:\n" + "\n".join(offenders)


# A configuration key whose value two modules computed drifted (issue 39 item 4): the agents beat
# at HeartbeatInterval while the controller's grace periods assumed SlurmdTimeout/5. Such a key
# has one reader, named here, that every other module calls; the key list (core/confkeys.py)
# only spells it.
ONE_READER_KEYS = {"HeartbeatInterval": "core/conftypes.py"}


def test_a_key_with_one_reader_is_read_nowhere_else() -> None:
    offenders = []
    for key, owner in ONE_READER_KEYS.items():
        spelled = re.compile(rf"""(?i)["']{key}["']""")
        for path in SRC.rglob("*.py"):
            name = path.relative_to(SRC).as_posix()
            if name in (owner, "core/confkeys.py"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if spelled.search(line):
                    offenders.append(f"{name}:{number}: reads {key} (its reader: {owner}): {line.strip()}")
    assert not offenders, "\n".join(offenders)


# Tests wait on conditions (tests/waiting.py's wait_for and, in an event loop, wait_until;
# Harness.wait_job, Harness.wait_passes), never with a fixed sleep: time.sleep or asyncio.sleep
# (asyncio.sleep(0), a bare yield to the loop, lets no time pass). A sleep that is the behaviour
# under test (letting time pass to show that something does NOT happen, a client that reads at
# its own pace, a request kept in flight) carries "# sleep: <why>" on its line. The files below
# still hold bare sleeps (issue 39 item 4): the count of each may only go down.
TESTS = SRC.parents[1] / "tests"
BARE_SLEEPS_LEFT = {
    "e2e/test_clients.py": 1,
    "e2e/test_failure_resume.py": 1,
    "e2e/test_netns.py": 4,
    "e2e/test_operations_netns.py": 3,
    "e2e/test_torchx.py": 1,
    "integration/test_dashboard.py": 1,
    "integration/test_ha.py": 8,
    "integration/test_login_munge.py": 1,
    "integration/test_metrics.py": 1,
    "netns.py": 2,
    "oldrelease.py": 1,
}


def _yields_only(call: ast.Call) -> bool:
    """``asyncio.sleep(0)``: a turn of the event loop, no time let pass."""
    return (
        isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "asyncio"
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value == 0
    )


def _bare_sleeps(path: pathlib.Path) -> list[int]:
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sleep"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("time", "asyncio")
            and not _yields_only(node)
            and "# sleep:" not in lines[node.lineno - 1]
        ):
            found.append(node.lineno)
    return sorted(found)


def test_the_sleep_check_sees_both_sleeps_but_not_a_yield_or_a_marked_one(tmp_path: pathlib.Path) -> None:
    test = tmp_path / "test_x.py"
    test.write_text(
        "import asyncio, time\nasync def f():\n    await asyncio.sleep(0.1)\n    await asyncio.sleep(0)\n"
        "    time.sleep(1)\n    time.sleep(1)  # sleep: the thing must NOT happen meanwhile\n"
    )
    assert _bare_sleeps(test) == [3, 5]


def test_tests_wait_on_conditions_not_fixed_sleeps() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        found = _bare_sleeps(path)
        if len(found) > BARE_SLEEPS_LEFT.get(name, 0):
            offenders.append(f"tests/{name}: time.sleep at lines {found}")
    assert not offenders, (
        "wait on a condition (waiting.wait_for/wait_until, Harness.wait_job/wait_passes), or mark a sleep that "
        "is the behaviour under test with '# sleep: <why>' on its line:\n" + "\n".join(offenders)
    )


# One writer per job change (issue 39 item 1): a job's state, reason, plan, holds and held nodes
# are assigned only by core/lifecycle.py, the owner, through ``apply``; every other module asks
# it (``lifecycle.apply``, ``start``, ``wait``, ``plan``, ``hold_nodes``...). Job's own dataclass
# (core/job.py: its constructor, ``take``, ``from_dict``) builds jobs and is not a writer.
JOB_CHANGES = {"state", "reason", "planned_start", "planned_nodes", "held_nodes", "hold_until", "hold", "expedited"}
JOB_CHANGE_OWNERS = {"core/lifecycle.py", "core/job.py"}
# ``state`` and ``reason`` are also attributes of objects that are not jobs; in these modules,
# assigning them through these names writes one of those (a node's drain reason, a step's
# state, a partition's state), never a job's. Any other name is taken for a job.
NOT_JOBS = {
    "ctld/agents.py": {"node"},  # NodeRuntime.reason: why a node is drained/down
    "ctld/liveness.py": {"node"},  # NodeRuntime.reason
    "ctld/state.py": {"node"},  # NodeRuntime.reason
    "ctld/steps.py": {"step", "s"},  # StepRecord.state (core.steps' StepState)
    "core/config.py": {"part"},  # PartitionConf.state (UP, DOWN, DRAIN, INACTIVE)
}
# The agent's objects are runs and steps, never the controller's jobs (item 2 checks them).
NOT_JOB_PACKAGES = ("agent/",)
# ctld.state.ClusterState.launching (job id -> when its launch was sent) has one writer too:
# ClusterState's launch_sent, launch_answered and launches_shifted.
LAUNCHING_OWNER = "ctld/state.py"
_MUTATORS = {"append", "extend", "insert", "remove", "pop", "clear", "update", "setdefault", "sort"}


def _receiver(attr: ast.Attribute) -> str:
    return attr.value.id if isinstance(attr.value, ast.Name) else ast.unparse(attr.value)


def _job_change_writes(tree: ast.AST, not_jobs: set[str]) -> list[tuple[int, str]]:
    """Writes of a job's changes (``JOB_CHANGES``) and of the ``launching`` map: assignments
    (plain, tuple, augmented, annotated), ``del``, ``setattr`` with the name spelled out and
    in-place mutations of a field's list. An object's own ``self.<field>`` set in its
    ``__init__`` (a room keeping ``self.state``, the ClusterState) is not one; nor a name
    in ``not_jobs`` assigned ``state`` or ``reason``."""
    found: list[tuple[int, str]] = []

    def is_job_field(attr: ast.Attribute, function: str) -> bool:
        if attr.attr not in JOB_CHANGES:
            return False
        if isinstance(attr.value, ast.Name) and attr.value.id == "self" and function == "__init__":
            return False
        return not (attr.attr in ("state", "reason") and _receiver(attr) in not_jobs)

    def launching(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "launching"

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            for attr in _attribute_targets(target):
                if is_job_field(attr, function):
                    found.append((attr.lineno, ast.unparse(attr)))
            for sub in ast.walk(target):
                if isinstance(sub, ast.Subscript) and launching(sub.value):
                    found.append((sub.lineno, ast.unparse(sub)))
        if isinstance(node, ast.Call):
            f = node.func
            if (
                isinstance(f, ast.Name)
                and f.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in JOB_CHANGES
            ):
                found.append((node.lineno, ast.unparse(node)))
            if isinstance(f, ast.Attribute) and f.attr in _MUTATORS and isinstance(f.value, ast.Attribute):
                if launching(f.value) or is_job_field(f.value, ""):
                    found.append((node.lineno, ast.unparse(f)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def test_only_the_lifecycle_writes_a_jobs_state_reason_plan_and_holds() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name in JOB_CHANGE_OWNERS or name.startswith(NOT_JOB_PACKAGES):
            continue
        for line, target in _job_change_writes(ast.parse(path.read_text(), str(path)), NOT_JOBS.get(name, set())):
            if name == LAUNCHING_OWNER and "launching" in target:
                continue
            offenders.append(f"{name}:{line}: writes {target}")
    assert not offenders, (
        "ask core.lifecycle (apply, start, wait, plan, hold_nodes, hold...) and "
        "ClusterState (launch_sent, launch_answered) instead:\n" + "\n".join(offenders)
    )


def test_the_job_change_check_sees_every_kind_of_write() -> None:
    tree = ast.parse(
        "class Room:\n    def __init__(self, state):\n        self.state = state\n"
        "def f(job, node, ctl):\n"
        "    job.reason = 1\n    node.reason = 'drained'\n    job.held_nodes, job.hold_until = [], None\n"
        "    job.planned_nodes.append('n1')\n    setattr(job, 'state', 2)\n    job.priority = 3\n"
        "    ctl.launching[7] = 1.0\n    ctl.launching.pop(7, None)\n    x = ctl.launching.get(7)\n"
    )
    assert [target for _, target in _job_change_writes(tree, {"node"})] == [
        "job.reason",
        "job.held_nodes",
        "job.hold_until",
        "job.planned_nodes.append",
        "setattr(job, 'state', 2)",
        "ctl.launching[7]",
        "ctl.launching.pop",
    ]
