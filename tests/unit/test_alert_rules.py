"""The alerting rules shipped in deploy/prometheus: valid for promtool, tested against input
series (muster-alerts.test.yml), written with the metric names /metrics really exports
(docs/metrics.md), each pointing at a section of docs/runbook.md that exists."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus" / "muster-alerts.yml"
TESTS = ROOT / "deploy" / "prometheus" / "muster-alerts.test.yml"


def _rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("MUSTER_TEST_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required here (CI installs Debian's prometheus package) and is missing")
        pytest.skip("promtool is not installed (apt-get install prometheus); CI installs it and runs this test")
    return path


def test_promtool_checks_the_rules_and_their_tests_pass() -> None:
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [promtool, "test", "rules", TESTS.name], cwd=TESTS.parent, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_is_tested_firing() -> None:
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c.get("exp_alerts")}
    missing = [r["alert"] for r in _rules() if r["alert"] not in fired]
    # the critical expiry shares its expression with the warning one, ten times closer
    assert missing == ["MusterCertificateExpiresVerySoon"]


def test_the_rules_use_only_documented_metrics() -> None:
    docs = (ROOT / "docs" / "metrics.md").read_text()
    names = {n for r in _rules() for n in re.findall(r"\b((?:slurm|muster)_[a-z_]+)", str(r["expr"]))}
    bases = {re.sub(r"_(count|total)$", "", n) for n in names}
    assert len(bases) > 10
    assert not [b for b in sorted(bases) if f"`{b}" not in docs]


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    for rule in _rules():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = annotations["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/runbook.md" and anchor in anchors, (rule["alert"], url)
        assert annotations["summary"] and annotations["description"]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
