"""The console's pages in a real browser (Debian's chromium driven by Playwright) on the
walkthrough's data, served by uvicorn: every page opens, the threshold slider changes the
lookups, a session's timeline shows the appended block, an audit job runs to the end, a wrong
token gets 401 and a change without the header 403; and with a corrupt log and an invalid flow
thrown in, the pages say what is wrong and the rest works.

Each page's screenshot goes to a temporary folder, or to $STRETTO_SCREENSHOTS when it is set:
`STRETTO_SCREENSHOTS=docs/console .venv/bin/pytest tests/stretto/console/test_browser.py`
refreshes the ones docs/console.md shows."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from stretto.console.state import Options
from tests.conftest import CHROMIUM, Walked
from tests.stretto.console.conftest import TOKEN, served

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
    # the job has its own address; its Markdown report is rendered; no Cancel once it ended
    job_id = page.locator("h2", has_text="-audit").inner_text().removeprefix("Job ")
    assert page.url == f"{console}/jobs/{job_id}"
    assert page.get_by_test_id("cancel-job").count() == 0
    report = page.get_by_test_id("report")
    report.locator("table thead th").first.wait_for()
    assert "|" not in report.locator("table").first.inner_text()  # a table, not its source
    shot(page, "jobs")


def test_a_job_page_reloads_and_previews_a_parquet_table(page, console):
    page.goto(f"{console}/jobs")
    row = page.get_by_test_id("jobs").locator("tbody tr", has_text="-audit").first
    job_id = row.locator("td").first.inner_text()
    row.click()
    assert page.url == f"{console}/jobs/{job_id}"
    page.reload()
    page.locator("h2", has_text=f"Job {job_id}").wait_for()
    assert page.title() == f"Job {job_id} · stretto console"
    assert page.get_by_test_id("job-state").inner_text() == "succeeded"
    item = page.locator(".artifacts li", has_text=".parquet").first
    item.get_by_role("button", name="Preview").click()
    table = item.get_by_test_id("parquet-preview")
    table.locator("tbody tr").first.wait_for()
    assert table.locator("thead th").count() > 0
    assert "rows" in item.locator("p.muted").inner_text()


def test_the_threshold_field_refuses_values_outside_0_to_1(page, console):
    page.goto(f"{console}/jobs")
    page.get_by_test_id("jobs").locator("thead th").first.wait_for()
    before = page.get_by_test_id("jobs").locator("tbody tr").count()
    page.locator("#job-kind").select_option("replay")
    threshold = page.locator("input[name=threshold]")
    for value in ("7", "-0.1"):
        threshold.fill(value)
        page.get_by_test_id("start-job").click()
        page.get_by_role("alert").get_by_text("threshold: a number from 0 to 1").wait_for()
        assert threshold.get_attribute("aria-invalid") == "true"
    assert page.get_by_test_id("jobs").locator("tbody tr").count() == before  # none started


def test_a_learn_job_picks_its_domain(page, console):
    page.goto(f"{console}/jobs")
    page.locator("#job-kind").select_option("learn")
    picker = page.get_by_test_id("domain-picker")
    assert picker.locator("option").all_inner_texts() == ["notes", "another…"]
    page.locator("select[name=sessions]").select_option("logs/notes")
    assert picker.input_value() == "notes"
    other = page.get_by_label("another domain")
    assert other.is_hidden()
    picker.select_option("")
    other.fill("-x")  # not a domain: the API names the rule
    page.locator("input[name=out]").fill("flows/x.flow.json")
    page.get_by_test_id("start-job").click()
    page.get_by_role("alert").get_by_text("field `domain`").wait_for()


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


# --- the overview as one source of truth (issue 43, items 2, 3 and 7) -----------------------


def test_the_overview_explains_each_card(page, console):
    """Lookups made are answered (not asked again) or asked again, each card saying what it
    counts: the served session's 3 lookups were all answered."""
    page.goto(f"{console}/")
    answered = page.get_by_test_id("card-answered")
    answered.wait_for()
    assert answered.locator(".n").inner_text() == "3"
    assert "did not ask for again" in answered.locator(".why").inner_text()
    asked = page.get_by_test_id("card-asked-again")
    assert asked.locator(".n").inner_text() == "0"
    assert "made itself" in asked.locator(".why").inner_text()
    assert page.get_by_test_id("card-lookups").locator(".n").inner_text() == "3"
    whys = page.get_by_test_id("totals").locator(".card .why").all_inner_texts()
    assert len(whys) == 7 and all(why.strip() for why in whys)
    assert "served flow at 0.3" in page.get_by_test_id("card-saved").inner_text()


@pytest.fixture
def own_console(walked: Walked, tmp_path: Path, browser):
    """(base URL, data directory, a page signed in) of the console on a copy of the
    walkthrough's home, for a test that changes it."""
    data = tmp_path / ".stretto"
    shutil.copytree(walked.home, data, symlinks=True)

    @contextmanager
    def serve():
        with served(Options(data=data, token=TOKEN)) as (base, _):
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.set_default_timeout(120_000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            assert page.goto(f"{base}/?token={TOKEN}").status == 200
            yield base, page
            context.close()
            assert not errors, errors

    return data, serve


def test_after_a_trash_the_overview_agrees_with_the_sessions_page(own_console):
    """The walkthrough's 12 logs/notes sessions are in the warehouse; one trashed from its
    page leaves 17 sessions on both pages (the overview counted the warehouse's 18), and the
    overview says the warehouse still holds it; a log not ingested makes it stale, and its
    Ingest button starts the ingest."""
    data, serve = own_console
    with serve() as (base, page):
        page.goto(f"{base}/sessions")
        rows = page.get_by_test_id("sessions").locator("tr")
        rows.nth(18).wait_for()
        assert rows.count() == 19  # the header and 18 sessions
        page.get_by_test_id("search").fill("recorded")
        page.get_by_test_id("search").press("Enter")
        page.wait_for_url("**/sessions?q=recorded")
        page.locator("[data-testid=sessions] tr.clickable").first.click()
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Move to trash").click()
        page.wait_for_url(f"{base}/sessions")
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=sessions] tr').length === 18"
        )
        page.goto(f"{base}/")
        sessions = page.get_by_test_id("card-sessions").locator(".n")
        sessions.wait_for()
        assert sessions.inner_text() == "17"
        notice = page.get_by_test_id("warehouse-notice")
        assert "still holds 1 session(s) whose logs are gone" in notice.inner_text()
        assert page.get_by_test_id("ingest").count() == 0  # an ingest would not change that
        logs = data / "logs/notes"
        log = min(logs.glob("*[0-9].jsonl")).read_text()
        header, rest = log.split("\n", 1)
        head = json.loads(header) | {"session": "20261201T000000.000Z-00002"}
        (logs / "new.jsonl").write_text(json.dumps(head) + "\n" + rest)
        page.get_by_text("The warehouse is stale:").wait_for()  # the watcher saw the new log
        assert sessions.inner_text() == "18"
        page.get_by_test_id("ingest").click()
        page.wait_for_url(f"{base}/jobs")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=job-state]')?.textContent === 'succeeded'"
        )
        page.goto(f"{base}/")
        page.get_by_test_id("card-sessions").wait_for()
        assert "stale" not in page.get_by_test_id("warehouse-notice").inner_text()


def test_a_staged_flow_is_labelled_and_the_overview_replays_the_served_one(own_console):
    """`stretto stage` writes flows/notes.staged.flow.json, the newest flow: the overview
    still replays flows/notes.flow.json, and the staged flow is labelled so."""
    from stretto.cli import main

    data, serve = own_console
    flow = data / "flows/notes.flow.json"
    args = ["stage", "--flow", str(flow), "--sessions", str(data / "logs/notes")]
    assert main([*args, "--home", str(data)]) == 0
    assert (data / "flows/notes.staged.flow.json").exists()
    with serve() as (base, page):
        page.goto(f"{base}/")
        by_domain = page.get_by_test_id("by-domain")
        by_domain.wait_for()
        assert by_domain.get_by_role("link").all_inner_texts() == ["flows/notes.flow.json"]
        assert "1 of them staged" in page.get_by_test_id("card-flows").inner_text()
        page.goto(f"{base}/flows")
        staged = page.get_by_test_id("flows").locator("tr", has_text="notes.staged.flow.json")
        staged.wait_for()
        assert staged.get_by_test_id("flow-status").inner_text() == "staged"
        served_row = page.get_by_test_id("flows").locator("tr", has_text="flows/notes.flow.json")
        assert served_row.get_by_test_id("flow-status").inner_text() == "served"
        staged.click()
        note = page.get_by_test_id("staged-note")
        note.wait_for()
        assert "Staged beside flows/notes.flow.json" in note.inner_text()
        assert "not served" in note.inner_text()


# --- time on the timeline and the server's tools (issue 43, item 4) ---------------------------


def test_a_session_shows_time_latency_a_waterfall_and_the_tools(page, console):
    """Each call says when it was sent (seconds since the session began, the clock time on
    hover), how long its answer took and its tool's kind; the turns stand on one time axis;
    the server's tools are listed with their kind and input schema."""
    page.goto(f"{console}/sessions?q=served")
    page.locator("[data-testid=sessions] tr.clickable").first.click()
    call = page.get_by_test_id("timeline").locator("li.call").first
    call.wait_for()
    stamp = call.get_by_test_id("at")
    assert stamp.inner_text().startswith("+") and stamp.inner_text().endswith(" s")
    assert stamp.get_attribute("title").endswith(" UTC")
    assert call.get_by_test_id("latency").inner_text().endswith(" ms")
    assert call.get_by_test_id("tool-kind").inner_text() in ("read", "write", "generic")
    waterfall = page.get_by_test_id("waterfall")
    waterfall.wait_for()
    bars = waterfall.locator("rect.turn-bar")
    assert bars.count() >= 2
    assert "turn(s) over" in waterfall.inner_text() and "median" in waterfall.inner_text()
    # the calls' latency is the agent's calls', the flow's lookups shown apart
    key = page.url.split("/sessions/", 1)[1]
    figures = page.request.get(f"{console}/api/sessions/{key}/waterfall").json()
    calls, lookups = figures["latency_ms"]["calls"], figures["lookup_latency_ms"]["lookups"]
    assert lookups > 0  # a served session: the flow looked things up
    assert f"latency of {calls} answered call(s)" in waterfall.inner_text()
    assert f"of {lookups} answered lookup(s)" in waterfall.inner_text()
    page.get_by_text("The server's tools").click()
    tools = page.get_by_test_id("tools")
    tools.wait_for()
    assert tools.locator("thead th").all_inner_texts() == ["tool", "kind", "description", "input"]
    rows = tools.locator("tbody tr")
    assert rows.count() >= 2
    kinds = set(rows.locator(".badge").all_inner_texts())
    assert "read" in kinds and kinds <= {"read", "write", "generic"}
    row = rows.first
    row.locator("summary").click()
    assert '"properties"' in row.locator("pre").inner_text()


# --- tables (issue 43, item 5) ----------------------------------------------------------------


def test_sessions_sort_search_and_say_when_nothing_matches(page, console):
    page.goto(f"{console}/sessions")
    table = page.get_by_test_id("sessions")
    table.locator("tbody tr").nth(17).wait_for()
    page.get_by_test_id("sort-calls").click()
    page.wait_for_url("**/sessions?sort=calls&order=asc")
    calls = [
        int(c)
        for c in table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.calls)")
    ]
    assert calls == sorted(calls) and len(calls) == 18
    assert table.locator("th[aria-sort=ascending]").inner_text().startswith("calls")
    page.get_by_test_id("sort-calls").click()
    page.wait_for_url("**/sessions?sort=calls&order=desc")
    table.locator("th[aria-sort=descending]").wait_for()
    calls = [
        int(c)
        for c in table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.calls)")
    ]
    assert calls == sorted(calls, reverse=True)
    # a search within the sorted results, then one that matches nothing
    page.get_by_label("Find a session").fill("shadow")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/sessions?sort=calls&order=desc&q=shadow")
    assert 0 < table.locator("tbody tr").count() < 18
    page.get_by_label("Find a session").fill("no-such-session")
    page.get_by_label("Find a session").press("Enter")
    empty = page.get_by_test_id("empty")
    empty.wait_for()
    assert "No session matches these filters." in empty.inner_text()
    empty.get_by_test_id("clear-filters").click()
    page.wait_for_url(f"{console}/sessions")
    page.get_by_test_id("sessions").locator("tbody tr").nth(17).wait_for()


def test_a_live_refresh_keeps_a_half_typed_search_and_the_focus(page, console):
    page.goto(f"{console}/sessions")
    table = page.get_by_test_id("sessions")
    table.wait_for()
    page.wait_for_function("() => document.getElementById('status').textContent.includes('live')")
    search = page.get_by_label("Find a session")
    search.click()
    search.press_sequentially("serv")  # not sent: no Enter
    page.evaluate("() => { window.before = document.querySelector('[data-testid=sessions]'); }")
    settings = page.request.get(f"{console}/api/settings").json()
    answer = page.request.put(
        f"{console}/api/settings",
        data={"threshold": settings["threshold"]},
        headers={"X-Stretto-Console": "1"},
    )
    assert answer.ok  # the console says `changed`: the page refreshes its results
    page.wait_for_function(
        "() => document.querySelector('[data-testid=sessions]') !== window.before"
    )
    assert page.url == f"{console}/sessions"  # nothing was submitted
    assert search.input_value() == "serv"
    assert page.evaluate("() => document.activeElement.id") == "session-search"
    assert table.locator("tbody tr").count() == 18


def test_flows_and_jobs_tables_sort_and_find_in_their_rows(page, console):
    page.goto(f"{console}/flows")
    flows = page.get_by_test_id("flows")
    flows.locator("tbody tr").first.wait_for()
    names = lambda: flows.locator("tbody tr td:first-child").all_inner_texts()  # noqa: E731
    every = names()
    assert FLOW in every and NEW_FLOW in every
    page.get_by_test_id("sort-flow").click()
    assert names() == sorted(every)
    page.get_by_test_id("sort-flow").click()
    assert names() == sorted(every, reverse=True)
    find = page.get_by_label("find in these flows")
    find.fill("new.flow")
    assert names() == [NEW_FLOW]
    find.fill("nothing like it")
    empty = flows.get_by_test_id("empty")
    assert "No flow holds “nothing like it”." in empty.inner_text()
    empty.get_by_role("button", name="Clear the search").click()
    assert sorted(names()) == sorted(every)
    page.goto(f"{console}/jobs")
    jobs = page.get_by_test_id("jobs")
    jobs.locator("thead th").first.wait_for()
    assert jobs.locator("thead th").all_inner_texts() == ["job", "state", "started", "finished"]


# --- polish and access (issue 43, item 8) ----------------------------------------------------

PAGES = {
    "/": "Overview · stretto console",
    "/sessions": "Sessions · stretto console",
    "/flows": "Flows · stretto console",
    f"/flows/{FLOW}": f"Flow {FLOW} · stretto console",
    "/jobs": "Jobs · stretto console",
}

UNLABELLED = """() => [...document.querySelectorAll('main input, main select, main textarea')]
  .filter((e) => e.type !== 'hidden' && !e.labels?.length && !e.getAttribute('aria-label'))
  .map((e) => e.outerHTML.slice(0, 80))"""


SETTLED = """() => document.querySelector('main h1')
  && !/Loading…|Reading the|Computing the/.test(document.getElementById('page').innerText)"""


WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter((e) => e.getBoundingClientRect().right > 420)
  .slice(-3).map((e) => e.outerHTML.slice(0, 90))"""


def _settled(page) -> None:
    """The page and its parts that come later are drawn."""
    page.wait_for_function(SETTLED)


def test_each_page_has_a_title_labelled_inputs_and_table_heads(page, console):
    for path, title in PAGES.items():
        page.goto(f"{console}{path}")
        _settled(page)
        assert page.title() == title
        assert page.evaluate(UNLABELLED) == [], path
        headless = page.evaluate(
            "() => [...document.querySelectorAll('main table')].filter((t) => !t.tHead).length"
        )
        assert headless == 0, path
        assert page.locator("nav a[aria-current=page]").count() == 1


def test_a_skip_link_and_keyboard_reachable_rows(page, console):
    page.goto(f"{console}/jobs")
    rows = page.get_by_test_id("jobs").locator("tbody tr.clickable")
    rows.first.wait_for()  # the audit job run above
    page.keyboard.press("Tab")  # the first stop on the page: the skip link
    skip = page.get_by_role("link", name="Skip to the content")
    assert skip.evaluate("node => node === document.activeElement") and skip.is_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "page"
    assert page.url == f"{console}/jobs#page"  # stayed on the page
    rows.first.focus()
    page.get_by_test_id("job-state").wait_for()
    page.evaluate("() => { document.querySelector('[data-testid=job-output]').remove(); }")
    page.keyboard.press("Enter")  # opens the job, as a click does
    page.get_by_test_id("job-output").wait_for()
    page.goto(f"{console}/sessions")
    first = page.get_by_test_id("sessions").locator("tbody tr.clickable").first
    first.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/sessions/*")
    assert page.title().startswith("Session ")


def test_appended_blocks_are_collapsed_to_their_first_line(page, console):
    page.goto(f"{console}/sessions?q=served")
    page.locator("[data-testid=sessions] tr.clickable").first.click()
    block = page.get_by_test_id("appended").first
    block.wait_for()
    body = block.locator("pre")
    assert not body.is_visible() and block.locator("summary").is_visible()
    page.get_by_test_id("expand-appended").click()
    assert body.is_visible()
    assert page.get_by_test_id("expand-appended").get_attribute("aria-pressed") == "true"
    page.get_by_test_id("expand-appended").click()
    assert not body.is_visible()


def test_the_dark_theme_follows_the_system(browser, console):
    context = browser.new_context(color_scheme="dark")
    page = context.new_page()
    page.goto(f"{console}/?token={TOKEN}")
    page.get_by_test_id("totals").wait_for()
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    card = page.evaluate("() => getComputedStyle(document.querySelector('.card')).backgroundColor")
    assert background == "rgb(20, 23, 30)" and card == "rgb(28, 32, 41)"
    page.emulate_media(color_scheme="light")
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == (
        "rgb(247, 248, 250)"
    )
    context.close()


def test_every_page_fits_a_420_pixel_window(browser, console, walked):
    context = browser.new_context(viewport={"width": 420, "height": 860})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{console}/?token={TOKEN}")
    session = page.request.get(f"{console}/api/sessions?q=served").json()["items"][0]["key"]
    for path in [*PAGES, f"/sessions/{session}"]:
        page.goto(f"{console}{path}")
        _settled(page)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        widest = page.evaluate(WIDEST)
        assert width <= 420, f"{path}: {width} px wide: {widest}"
    context.close()


def test_sign_out_forgets_the_cookie(browser, console):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{console}/?token={TOKEN}")
    page.get_by_test_id("totals").wait_for()
    page.get_by_role("button", name="Sign out").click()
    page.get_by_text("no token: sign in").wait_for()
    assert page.request.get(f"{console}/api/meta").status == 401
    context.close()


def test_no_cancel_button_is_left_once_a_short_job_ends(page, console):
    """A draw of the job while it ran, answered after the one of its end, put its Cancel
    back; a short job (doctor) ends while the page draws it."""
    page.goto(f"{console}/jobs")
    page.locator("#job-kind").select_option("doctor")
    page.get_by_test_id("start-job").click()
    page.locator("h2", has_text="-doctor").wait_for()
    page.wait_for_function(
        "() => ['succeeded', 'failed'].includes("
        "document.querySelector('[data-testid=job-state]')?.textContent)"
    )
    row = page.get_by_test_id("jobs").locator("tbody tr", has_text="-doctor").first
    # the table is redrawn with the job's end in the refresh that draws the job last
    row.locator(".badge", has_text="succeeded").or_(row.locator(".badge.failed")).wait_for()
    assert page.get_by_test_id("cancel-job").count() == 0


def test_a_finished_learn_links_to_its_flow_page(page, console):
    """Last in this module: it adds a flow to the home the other tests share."""
    page.goto(f"{console}/jobs")
    page.locator("#job-kind").select_option("learn")
    page.locator("select[name=sessions]").select_option("logs/notes")
    page.locator("input[name=out]").fill("flows/notes.again.flow.json")
    page.get_by_test_id("start-job").click()
    page.locator("h2", has_text="-learn").wait_for()
    page.wait_for_function(
        "() => ['succeeded', 'failed'].includes("
        "document.querySelector('[data-testid=job-state]')?.textContent)"
    )
    assert page.get_by_test_id("job-state").inner_text() == "succeeded"
    page.get_by_test_id("job-flows").get_by_role("link", name="flows/notes.again.flow.json").click()
    page.locator("h1", has_text="flows/notes.again.flow.json").wait_for()
    assert page.url == f"{console}/flows/flows/notes.again.flow.json"
