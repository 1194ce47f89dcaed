"""The console's pages in a real browser (Debian's chromium driven by Playwright) on the
walkthrough's data, served by uvicorn: every page opens, the threshold slider changes the
lookups, a session's timeline shows the appended block, an audit job runs to the end, a wrong
token gets 401 and a change without the header 403; and with a corrupt log and an invalid flow
thrown in, the pages say what is wrong and the rest works.

Each page's screenshot goes to a temporary folder, or to $STRETTO_SCREENSHOTS when it is set:
`STRETTO_SCREENSHOTS=docs/console .venv/bin/pytest tests/console/test_browser.py` refreshes the
ones docs/console.md shows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stretto.console.state import Options
from tests.conftest import CHROMIUM, Walked
from tests.console.conftest import TOKEN, served

FLOW = "flows/notes.flow.json"  # learned from the walkthrough's first 8 sessions
NEW_FLOW = "flows/notes.new.flow.json"  # learned again from all 12

pytestmark = [
    pytest.mark.slow,  # the console driven in Chromium on the walkthrough's home
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no /usr/bin/chromium (Debian's chromium; .ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
def console(walkthrough_home):
    with served(Options(data=walkthrough_home, token=TOKEN)) as (base, _):
        yield base


@pytest.fixture(scope="module")
def page(browser, console):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(120_000)  # a shared, busy machine: waits end on what they wait for
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    assert page.goto(f"{console}/?token={TOKEN}").status == 200  # the cookie is set
    yield page
    context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def shot(shots: Path):
    """shot(page, name): the whole page, as NAME.png."""

    def take(page, name: str) -> None:
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    return take


def test_a_wrong_token_is_401_and_a_change_without_the_header_403(browser, console, page):
    stranger = browser.new_context()
    answer = stranger.new_page().goto(f"{console}/?token=wrong")
    assert answer.status == 401
    stranger.close()
    refused = page.request.post(f"{console}/api/jobs", data={"kind": "doctor"})
    assert refused.status == 403
    assert refused.json() == {"error": "a change needs the header X-Stretto-Console: 1"}


def test_overview(page, console, shot):
    page.goto(f"{console}/")
    totals = page.get_by_test_id("totals")
    totals.wait_for()
    assert "sessions" in totals.inner_text()
    page.locator("canvas#days").wait_for()
    shot(page, "overview")


def test_sessions_and_a_served_timeline(page, console, shot):
    page.goto(f"{console}/sessions")
    table = page.get_by_test_id("sessions")
    table.wait_for()
    # the header and the walkthrough's 18 sessions: 12 in logs/notes, 3 in shadow/notes and
    # 3 in explore/notes
    assert table.locator("tr").count() == 19
    shot(page, "sessions")
    page.get_by_test_id("search").fill("served")
    page.get_by_test_id("search").press("Enter")
    page.wait_for_url("**/sessions?q=served")
    page.locator("[data-testid=sessions] tr.clickable").first.click()
    appended = page.get_by_test_id("appended")
    appended.wait_for()
    assert "Also looked up automatically" in appended.inner_text()
    assert page.get_by_test_id("lookup").count() == 3
    shot(page, "session")


def test_flows_and_the_diff(page, console, shot):
    page.goto(f"{console}/flows")
    page.locator("#diff-from").select_option(FLOW)
    page.locator("#diff-to").select_option(NEW_FLOW)
    page.get_by_test_id("compare").click()
    diff = page.get_by_test_id("diff")
    diff.get_by_text("Needs review (0)").wait_for()
    assert "learned from 8 -> 12 sessions" in diff.inner_text()
    shot(page, "flows")


def test_the_threshold_slider_changes_the_lookups(page, console, shot):
    page.goto(f"{console}/flows/{FLOW}")
    looked_up = page.get_by_test_id("looked-up")
    page.get_by_test_id("replay").wait_for()
    assert looked_up.locator("li").count() == 2
    saved_low = page.get_by_test_id("replay").locator(".n").first.inner_text()
    page.locator("#graph canvas").first.wait_for()
    shot(page, "flow")
    page.locator("#threshold").fill("0.6")
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=looked-up] li').length === 1"
    )
    assert looked_up.inner_text().strip() == "search_files → read_text_file"
    page.wait_for_function(
        f"() => document.querySelector('[data-testid=replay] .n').textContent !== '{saved_low}'"
    )
    assert page.get_by_test_id("threshold-value").inner_text() == "0.60"


def test_the_flow_page_shows_versions_the_staged_flow_and_drift(page, console, shot):
    page.goto(f"{console}/flows/{FLOW}")
    drift = page.get_by_test_id("drift")
    drift.wait_for()
    # the walkthrough's 18 notes sessions, none of them a change of habit
    assert "The alarm is not sounding after the last session." in drift.inner_text()
    assert "every readable notes session (18)" in drift.inner_text()
    page.locator("canvas#drift-chart").wait_for()
    page.get_by_text("No committed versions").wait_for()
    page.get_by_text("Nothing staged").wait_for()
    shot(page, "flow-life")


def test_an_audit_job_runs_to_the_end(page, console, shot):
    page.goto(f"{console}/jobs")
    page.locator("#job-kind").select_option("audit")
    page.locator("select[name=flow]").select_option(FLOW)
    # the held-out questions served in shadow mode: sessions the flow never learned from
    page.locator("select[name=sessions]").select_option("shadow/notes")
    page.get_by_test_id("start-job").click()
    state = page.get_by_test_id("job-state")
    page.locator("h2", has_text="-audit").wait_for()  # the job started shows
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-state]')?.textContent === 'succeeded'"
    )
    assert state.inner_text() == "succeeded"
    page.get_by_role("img", name="reliability.png").wait_for()
    assert "Agreement" in page.get_by_test_id("job-output").inner_text()
    shot(page, "jobs")


@pytest.fixture
def broken_console(walked: Walked, tmp_path: Path):
    """The console on a copy of the walkthrough's home with a corrupt log (a line in the
    middle that is not JSON), a file that is no log at all and a flow that fails validation."""
    data = tmp_path / ".stretto"
    shutil.copytree(walked.home, data, symlinks=True)
    logs = data / "logs/notes"
    lines = min(logs.glob("*[0-9].jsonl")).read_text().splitlines(keepends=True)
    header = json.loads(lines[0]) | {"session": "20261201T000000.000Z-00001"}
    corrupt = [json.dumps(header) + "\n", *lines[1:6], '{"t_ms": 1, "from": "client", "mess\n']
    (logs / "corrupt.jsonl").write_text("".join(corrupt + lines[6:]))
    (logs / "garbage.jsonl").write_text("this is not a session log\n")
    flow = json.loads((data / "flows/notes.flow.json").read_text())
    del flow["habit"]
    (data / "flows/broken.flow.json").write_text(json.dumps(flow))
    with served(Options(data=data, token=TOKEN)) as (base, _):
        yield base


def test_a_corrupt_log_and_an_invalid_flow_say_what_is_wrong(browser, broken_console, shot):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    assert page.goto(f"{broken_console}/?token={TOKEN}").status == 200
    problems = page.get_by_test_id("problems")
    problems.wait_for()
    listed = problems.locator("li").all_inner_texts()
    assert listed[0].startswith("logs/notes/corrupt.jsonl:7: not JSON")
    assert listed[0].endswith("; skipped the line")
    assert listed[1].startswith("logs/notes/garbage.jsonl:1: not JSON")
    assert (
        listed[2]
        == "flows/broken.flow.json: field `(the whole flow)`: 'habit' is a required property"
    )
    shot(page, "problems")

    page.goto(f"{broken_console}/sessions/20261201T000000.000Z-00001")
    page.get_by_role("alert").get_by_text("corrupt.jsonl:7: not JSON").wait_for()
    page.get_by_test_id("timeline").locator("li.call").first.wait_for()  # the rest is shown

    page.goto(f"{broken_console}/flows")
    row = page.get_by_test_id("flows").locator("tr", has_text="flows/broken.flow.json")
    assert "'habit' is a required property" in row.inner_text()
    row.click()
    page.get_by_role("alert").get_by_text("'habit' is a required property").wait_for()
    assert page.get_by_role("heading", name="Flow flows/broken.flow.json").is_visible()
    page.goto(f"{broken_console}/flows/flows/notes.flow.json")  # the valid flows still work
    page.get_by_test_id("replay").wait_for()
    context.close()
    assert not errors, errors
