"""The web dashboard (issue 16, item 3) in a real headless Chromium, against real daemons.

A user signs in with the link ``muster dashboard`` prints, watches a job of theirs go from
pending to running, requeued, running again and completed without reloading the page, and sees only what squeue would
show them (``PrivateData=jobs,usage``). The sign-in link works once; no dashboard route
changes anything. Chromium and chromedriver come from Debian's packages (``.ci/chromium.sh``
installs them in CI); without them only the browser tests skip.
"""

from __future__ import annotations

import http.client
import os
import pwd
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from harness import Harness, ensure_user
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("MUSTER_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MUSTER_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
USER = "musterdash-user"


@pytest.fixture(scope="module")
def user() -> int | None:
    """An unprivileged user to sign in as (root creates one); None: this process's user."""
    if os.geteuid() != 0:
        return None
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("signing in as a user other than root needs useradd and setpriv")
    return ensure_user(USER)


@pytest.fixture(scope="module")
def dash() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=2, gpus_per_node=2, cpus_per_node=4, mem_per_node=4000),
        settings={"PrivateData": "jobs,usage"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        if os.environ.get("MUSTER_TEST_REQUIRE_CHROMIUM"):  # CI installed it (.ci/chromium.sh)
            pytest.fail(f"no Chromium at {CHROMIUM} and {CHROMEDRIVER}, though CI requires it")
        pytest.skip(f"no Chromium here ({CHROMIUM}, {CHROMEDRIVER}): apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def sign_in_link(h: Harness, uid: int | None) -> str:
    out = h.run(["muster", "dashboard"], uid=uid)
    assert out.returncode == 0, out.stderr
    assert "within a minute" in out.stderr
    url = out.stdout.strip()
    assert url.startswith("http://127.0.0.1:") and "/dash/login?token=" in url
    return url


def fetch(
    url: str, path: str | None = None, cookie: str | None = None, method: str = "GET"
) -> http.client.HTTPResponse:
    """One request, redirects not followed."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    target = path if path is not None else f"{parts.path}?{parts.query}"
    conn.request(method, target, headers={"Cookie": f"muster_dash={cookie}"} if cookie else {})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


def session(url: str) -> str:
    resp = fetch(url)
    assert resp.status == 303, resp.status
    cookie = resp.headers["set-cookie"]
    return cookie.split(";")[0].split("=", 1)[1]


def api(url: str, path: str, cookie: str) -> Any:
    import json

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", path, headers={"Cookie": f"muster_dash={cookie}"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    return resp.status, body


def until(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception:  # an element replaced under us by the next redraw
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"the dashboard did not show {what} within {timeout:.0f} s")
        time.sleep(0.1)


def texts(driver: Any, selector: str) -> list[str]:
    """The text of every element ``selector`` matches, read at one instant (the page
    redraws every 2 s: an element found earlier may be gone by the time it is read)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent);", selector
    )


def severe(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def test_the_dashboard_follows_a_job_from_pending_to_completed_without_a_reload(
    dash: Harness, browser: Any, user: int | None
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(sign_in_link(dash, user))
    assert driver.current_url.endswith("/dash/"), driver.current_url  # the token is gone from the bar
    cookie = driver.get_cookie("muster_dash")
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/dash"

    # The overview: both nodes and their GPUs, the totals, the charts.
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#nodes .node")) == 2, "two nodes")
    cells = driver.find_elements(By.CSS_SELECTOR, "#nodes .gpu")
    assert len(cells) == 4 and all("idle" in c.get_attribute("class") for c in cells)
    name = pwd.getpwuid(user if user is not None else os.getuid()).pw_name
    assert driver.find_element(By.ID, "me").text.startswith(name)
    until(lambda: int(driver.find_element(By.ID, "chart-util").get_attribute("data-points")) >= 1, "a chart")
    driver.execute_script("window.__notReloaded = 42;")  # gone if the page were loaded again

    # Submitted held: pending, with Slurm's reason, in the queue view.
    job_id = dash.sbatch("-H", "-J", "dashjob", "-G", "1", "-o", "dash-%j.out", "--wrap", "sleep 5", uid=user)
    driver.execute_script("location.hash = '#queue';")
    row = f"#queue tr[data-job='{job_id}']"
    until(lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "PENDING", "it pending")
    cells = texts(driver, f"{row} td")
    assert cells[1] == "dashjob" and cells[5:7] == ["PENDING", "JobHeldUser"], cells

    # Released: it starts, and the page says so by itself.
    out = dash.run(["scontrol", "release", str(job_id)], uid=user)
    assert out.returncode == 0, out.stderr
    until(lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "RUNNING", "it running")

    # Its detail: state, GPUs, the output path, the timeline; then it completes.
    driver.find_element(By.CSS_SELECTOR, f"{row} a").click()
    until(lambda: driver.find_element(By.ID, "job-id").text == str(job_id), "the job's page")
    until(lambda: driver.find_element(By.ID, "job-state").text == "RUNNING", "the job running")
    gpu_rows = until(lambda: texts(driver, "#job-gpus tbody td"), "its GPUs")
    assert gpu_rows[0].startswith("node") and gpu_rows[1].isdigit()  # the node, the GPU's index
    # Requeued by its user: the page counts the restart, and the job runs again to the end.
    out = dash.run(["scontrol", "requeue", str(job_id)], uid=user)
    assert out.returncode == 0, out.stderr
    restarts = "#job-fields dd[data-field='Restarts (requeues)']"
    until(lambda: texts(driver, restarts) == ["1"], "one restart")
    until(lambda: driver.find_element(By.ID, "job-state").text == "COMPLETED", "the job completed", timeout=60)
    output = texts(driver, "#job-fields dd[data-field='Output']")
    assert output == [os.path.join(dash.workdir, f"dash-{job_id}.out")]
    events = " ".join(texts(driver, "#job-timeline li"))
    for event in ("submit", "release", "start", "requeue", "completed"):
        assert event in events, events

    # Back to the overview: the GPU it used is idle again; the page was never reloaded.
    driver.execute_script("location.hash = '#overview';")
    until(
        lambda: all("idle" in c.get_attribute("class") for c in driver.find_elements(By.CSS_SELECTOR, "#nodes .gpu")),
        "the GPUs idle again",
    )
    # An administrator drains a node: its GPUs show drained, with the reason.
    out = dash.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=fan failure"])
    assert out.returncode == 0, out.stderr
    try:
        drained = "#nodes .node[data-node='node2']"
        until(lambda: texts(driver, f"{drained} .node-state") == ["DRAINED"], "node2 drained")
        classes = driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.className);", f"{drained} .gpu"
        )
        assert classes == ["gpu drain", "gpu drain"]
        assert texts(driver, f"{drained} .reason") == ["Reason: fan failure [root]"]
        assert "fan failure" in driver.find_element(By.CSS_SELECTOR, f"{drained} .gpu").get_attribute("title")
    finally:
        dash.run(["scontrol", "update", "nodename=node2", "state=resume"])
    until(lambda: texts(driver, f"{drained} .node-state") == ["IDLE"], "node2 back")
    assert driver.execute_script("return window.__notReloaded;") == 42
    driver.execute_script("location.hash = '#shares';")
    until(lambda: driver.find_elements(By.CSS_SELECTOR, "#shares tbody tr"), "the fair-share tree")
    assert severe(driver) == []


def test_a_user_sees_only_what_squeue_shows_them(dash: Harness, browser: Any, user: int | None) -> None:
    if user is None:
        pytest.skip("needs root, to act as a second user")
    from selenium.webdriver.common.by import By

    root_job = dash.sbatch("-J", "rootjob", "-G", "1", "-t", "2", "--wrap", "sleep 60")
    waiting = None
    try:
        dash.wait_state(root_job, "RUNNING")
        # The user's job needs every GPU: it waits for root's, and is planned to start when it ends.
        waiting = dash.sbatch("-J", "bigjob", "-N", "2", "--gpus-per-node", "2", "-t", "1", "--wrap", "true", uid=user)
        url = sign_in_link(dash, user)
        cookie = session(url)
        status, state = api(url, "/dash/api/state", cookie)
        assert status == 200 and state["me"] == {"user": USER, "uid": user, "admin": False}
        assert [j for j in state["queue"] if j["job_id"] == root_job] == []
        mine = until(
            lambda: [j for j in api(url, "/dash/api/state", cookie)[1]["queue"] if j.get("planned_start")],
            "a planned start",
        )
        assert [(j["job_id"], j["state"], j["reason"]) for j in mine] == [(waiting, "PENDING", "Resources")]
        assert mine[0]["planned_start"] >= dash.job(root_job)["start_time"] + 120 - 1
        # (the view is rebuilt at most once a second: wait for one that has root's job running)
        cells = until(
            lambda: [
                g for n in api(url, "/dash/api/state", cookie)[1]["nodes"] for g in n["gpus"] if g["state"] == "alloc"
            ],
            "root's GPU shown in use",
        )
        assert all("job_id" not in g for g in cells)  # in use, but not named
        status, body = api(url, f"/dash/api/jobs/{root_job}", cookie)
        assert status == 404 and body["error"] == "Invalid job id specified"
        status, shares = api(url, "/dash/api/shares", cookie)
        assert status == 200 and all(r["user"] in ("", USER) for r in shares["rows"])

        # root (an administrator) sees it all.
        admin_cookie = session(sign_in_link(dash, None))
        status, state = api(url, "/dash/api/state", admin_cookie)
        assert state["me"]["admin"] and [j["name"] for j in state["queue"] if j["job_id"] == root_job] == ["rootjob"]

        # ...and in the browser, the user's job page for root's job says there is none.
        driver = browser
        driver.get(url.split("/dash/")[0] + f"/dash/#job/{root_job}")
        until(lambda: driver.find_element(By.ID, "job-missing").is_displayed(), "no such job")
        driver.execute_script("location.hash = '#queue';")
        cells = until(lambda: texts(driver, f"#queue tr[data-job='{waiting}'] td"), "the big job")
        assert cells[5:7] == ["PENDING", "Resources"] and cells[9].startswith("20"), cells  # its planned start
        assert not driver.find_elements(By.CSS_SELECTOR, f"#queue tr[data-job='{root_job}']")
        # The browser logs the 404s of root's job page; nothing else went wrong.
        expected = f"/dash/api/jobs/{root_job} - Failed to load resource: the server responded with a status of 404"
        assert [e for e in severe(driver) if expected not in e["message"]] == []
    finally:
        dash.run(["scancel", str(root_job)])
        if waiting is not None:
            dash.run(["scancel", str(waiting)])


def test_a_sign_in_link_works_once_and_nothing_changes_state(dash: Harness) -> None:
    url = sign_in_link(dash, None)
    first = fetch(url)
    assert first.status == 303 and first.headers["location"] == "/dash/"
    set_cookie = first.headers["set-cookie"].lower()
    for attr in ("httponly", "samesite=strict", "path=/dash", "max-age="):
        assert attr in set_cookie, set_cookie
    cookie = first.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert fetch(url).status == 401  # used once: refused
    forged = url.replace("token=v1.0.", "token=v1.1.")
    assert fetch(forged).status == 401
    base = url.split("/dash/")[0]
    assert fetch(base, "/dash/api/state").status == 401  # no session
    assert fetch(base, "/v1/dashboard/token", method="POST").status == 401  # over TCP: a credential first
    assert fetch(base, "/dash/api/state", cookie="v1.0.0.1.0.00.00").status == 401
    assert api(base, "/dash/api/state", cookie)[0] == 200
    for path in ("/dash/api/state", "/dash/api/jobs/1", "/dash/api/shares", "/dash/"):
        assert fetch(base, path, cookie=cookie, method="POST").status == 405, path
    page = fetch(base, "/dash/")
    assert page.status == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert fetch(base, "/dash/static/app.js").status == 200
    assert fetch(base, "/dash/static/index.html").status == 404
    assert fetch(base, "/dash/static/..%2f..%2fdashboard.py").status == 404
