"""A task prolog's output as srun(1) and slurm.conf(5) TaskProlog describe it."""

from __future__ import annotations

from muster.agent.taskprolog import apply


def test_export_sets_unset_removes_print_is_shown_and_the_rest_is_ignored() -> None:
    out = "export A=1\nexport B=two words=x\nunset GONE\nprint hello there\nnonsense line\nexport =bad\n"
    env, printed = apply(out, {"GONE": "x", "KEEP": "y", "A": "0"})
    assert env == {"A": "1", "B": "two words=x", "KEEP": "y"}
    assert printed == ["hello there"]


def test_no_output_leaves_the_environment_as_it_was() -> None:
    before = {"PATH": "/bin"}
    env, printed = apply("", before)
    assert env == before and env is not before and printed == []
