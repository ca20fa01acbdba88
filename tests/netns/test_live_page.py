"""The live page in a real browser (Debian's chromium, headless, driven by Selenium through
chromium-driver): ``testbed run --live`` on the host's kernel, two viewers at once, one closing its
tab mid-run, the series growing during the run, the fidelity checks appearing, a wrong token refused;
then ``testbed watch`` replaying the finished session with the same records."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pexpect
import pytest
import yaml

from tests.clusterhosts import wait_until
from tests.conftest import PROJECT, leftovers
from tests.shelldialogue import command, spawned

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: headless, as root; no background connections to Google's hosts (a closed network refuses them, many
#: at a time); a window the size of a projector's
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in requirements.lock: make setup")
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).is_file() and Path(DRIVER).is_file()):
        pytest.fail("chromium and chromium-driver are installed by make setup (playbooks/roles/tools): run it")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def _state(browser) -> dict:
    return browser.execute_script("return JSON.parse(JSON.stringify(window.live || {}))")


def _wait(predicate, timeout_s: float, what: str):
    value = wait_until(predicate, timeout_s)
    assert value, f"timed out waiting for {what}"
    return value


def _url_in(log: Path) -> str:
    found = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", log.read_text())
    return found.group(1) if found else ""


def _status(url: str) -> int:
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """Two runs of a dumbbell (10 Mbit/s HTB, 8 s each) with --live, watched by two headless chromiums;
    what each saw, and the session."""
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 missing")
    folder = tmp_path_factory.mktemp("live")
    scenario = folder / "live.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100}},
                "flows": [{"cc": ["reno", "cubic"], "rtt_ms": 0}],
                "duration_s": 8,
            }
        )
    )
    log = folder / "cli.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "run",
                str(scenario),
                "--backend",
                "local",
                "--live",
                "--results",
                str(folder / "results"),
            ],
            cwd=PROJECT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    seen: dict = {"viewers": []}
    browsers = []
    try:
        url = _wait(lambda: _url_in(log), 60, "the live page's URL")
        seen["refused"] = [
            _status(url.split("?")[0]),
            _status(url.split("?")[0] + "?token=wrong"),
            _status(url.split("?")[0] + "events?token=wrong"),
        ]
        browsers = [_browser(), _browser()]
        for browser in browsers:
            browser.get(url)
        first = _wait(lambda: (s := _state(browsers[0])).get("flowPoints", 0) > 5 and s, 60, "a flow's first points")
        time.sleep(2)
        seen["growing"] = (first, _state(browsers[0]))
        browsers.pop(1).quit()  # a tab closed mid-run
        proc.wait(timeout=120)
        # the session's end reaches a viewer still open: every record, then the stream's end
        seen["after"] = _wait(lambda: (s := _state(browsers[0])).get("ended") and s, 20, "the stream's end")
        seen["errors"] = [e for e in browsers[0].get_log("browser") if e["level"] == "SEVERE"]
        browsers[0].save_screenshot(str(folder / "live.png"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for browser in browsers:
            browser.quit()
    seen["code"], seen["log"] = proc.returncode, log.read_text()
    seen["session"] = next((folder / "results").rglob("plan.json")).parent
    return seen


def test_a_wrong_or_missing_token_is_refused(live_run):
    assert live_run["refused"] == [403, 403, 403]


def test_the_series_grow_while_the_run_goes_on(live_run):
    first, later = live_run["growing"]
    assert later["flowPoints"] > first["flowPoints"] and later["queuePoints"] > 0, (first, later)
    assert first["run"] == "cc=reno/seed=1" or first["run"] == "cc=cubic/seed=1"


def test_a_closed_tab_harms_neither_the_session_nor_the_other_viewer(live_run):
    assert live_run["code"] == 0, live_run["log"]
    assert live_run["errors"] == []  # the page's script threw nothing, nothing it asked for failed
    assert "live page closed" in live_run["log"]
    after = live_run["after"]
    assert after["checks"] >= 3 and after["flowPoints"] > live_run["growing"][1]["flowPoints"]
    runs = after["runs"]
    assert sorted(runs) == ["cc=cubic/seed=1", "cc=reno/seed=1"]
    assert all(r.get("status") == "complete" for r in runs.values()), runs
    # the page's goodput is the run's flows.csv: the report's number
    for run, shown in runs.items():
        flows = (live_run["session"] / run / "flows.csv").read_text().splitlines()
        goodput = float(flows[1].split(",")[flows[0].split(",").index("goodput_mbit")])
        assert shown["goodput_mbit"]["c0"] == pytest.approx(goodput)


def test_a_finished_session_replays_with_the_same_records(live_run, tmp_path):
    log = tmp_path / "watch.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.cli", "watch", str(live_run["session"]), "--speed", "4"],
            cwd=PROJECT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    browser = None
    try:
        url = _wait(lambda: _url_in(log), 30, "the watch page's URL")
        assert "replayed at 4x" in log.read_text()
        browser = _browser()
        browser.get(url)
        early = _wait(lambda: (s := _state(browser)).get("flowPoints", 0) > 0 and s, 20, "the replay's first points")
        done = _wait(lambda: (s := _state(browser)).get("ended") and s, 30, "the replay's end")
    finally:
        if browser is not None:
            browser.quit()
        proc.terminate()
        proc.wait(timeout=10)
    assert early["flowPoints"] < done["flowPoints"]  # paced, not all at once
    live = live_run["after"]
    assert done["flowPoints"] == live["flowPoints"] and done["queuePoints"] == live["queuePoints"]
    assert done["checks"] == live["checks"]
    assert json.dumps(done["runs"], sort_keys=True) == json.dumps(live["runs"], sort_keys=True)


def test_the_shells_live_command_serves_the_flows_it_starts(tmp_path, clean_kernel):
    """``live`` in ``testbed shell`` (the host kernel): the URL it prints shows the flow ``start`` starts,
    its points and the bottleneck's growing; leaving the shell leaves nothing."""
    with spawned(tmp_path, "local", rtt_ms=0, boot_timeout_s=60) as child:
        said = command(child, "live")
        found = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", said)
        assert found and "ssh -N -L" in said, said
        browser = _browser()
        try:
            browser.get(found.group(1))
            assert "c0: cubic" in command(child, "start")
            grown = _wait(
                lambda: (s := _state(browser)).get("flowPoints", 0) > 5 and s.get("queuePoints", 0) > 5 and s,
                30,
                "the shell's flow on the page",
            )
            assert grown["conns"] == {"shell": {"c0": "cubic"}} and grown["runs"]["shell"]["status"] == "running"
            assert "already" not in command(child, "live")  # a second 'live' prints the same page
            command(child, "stop")
            child.sendline("exit")
            child.expect_exact("the network is torn down", timeout=60)
            child.expect(pexpect.EOF, timeout=120)
            assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
        finally:
            browser.quit()
    assert leftovers() == []


def _records(url: str, timeout_s: float) -> list[dict]:
    """Every record of a page's stream (its ``events`` with the token) until the stream's end."""
    base, token = url.split("?")
    records = []
    with urllib.request.urlopen(f"{base}events?{token}", timeout=timeout_s) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line == "event: end":
                return records
            if line.startswith("data: "):
                records.append(json.loads(line.removeprefix("data: ")))
    raise AssertionError(f"the stream closed without its end after {len(records)} records")


def test_a_cluster_sessions_runs_reach_the_page_as_they_come_home(tmp_path, clean_kernel):
    """``--cluster local:2 --live``: the runs land when a worker ships them home; the page then has
    each run's traces, checks and goodput, and the stream ends with the session."""
    from tests import clusterhosts

    scenario = clusterhosts.scenario_file(tmp_path / "cluster.yaml", ["reno", "cubic"], duration_s=4)
    log = tmp_path / "cli.log"
    with open(log, "wb") as out:
        argv = [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(scenario),
            "--backend",
            "local",
            "--cluster",
            "local:2",
            "--live",
            "--results",
            str(tmp_path / "results"),
        ]
        proc = subprocess.Popen(argv, cwd=PROJECT, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = _wait(lambda: _url_in(log), 60, "the live page's URL")
        records = _records(url, 180)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    runs = {"cc=reno/seed=1", "cc=cubic/seed=1"}
    assert {r["run"] for r in records if r["kind"] == "flow"} == runs
    assert {r["run"] for r in records if r["kind"] == "check"} == runs
    goodput = {r["run"]: r["goodput_mbit"]["c0"] for r in records if r["kind"] == "result" and "goodput_mbit" in r}
    assert set(goodput) == runs and all(g > 1 for g in goodput.values()), goodput
    assert [r for r in records if r["kind"] == "progress"][-1]["finished"]
