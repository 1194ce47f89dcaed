"""The console in Chromium on a home with a long session: 30 shop sessions a flow is learned
from and one generated session of about 2,000 calls
(tests/stretto/offline/lifecycle/lifecycle.py). The drift series is computed in the background
and shown when done (bench/console_drift.py times it); past the console's limit it says "too
large" at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from stretto.console.state import Options
from tests.conftest import CHROMIUM
from tests.stretto.console.conftest import TOKEN, served

FLOW = "flows/shop.flow.json"
CALLS = 2_000
CALLS_PER_CUSTOMER = 4.55  # lifecycle.customer's calls on average (its usual habit)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (Debian's chromium)"),
]


def long_home(data: Path) -> Path:
    """A home: logs/shop with 30 sessions and one of about CALLS calls, and the flow learned
    from the 30 as flows/shop.flow.json."""
    from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions

    logs = data / "logs/shop"
    write_sessions(logs, ["usual"] * 30, seed=1)
    (data / "flows").mkdir(parents=True)
    learn_folder(logs, data / FLOW, data / "learn-home")
    customers = round(CALLS / CALLS_PER_CUSTOMER)
    write_sessions(logs, ["usual"], seed=3, customers=customers, start=9000)
    return data


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return long_home(tmp_path_factory.mktemp("long") / ".stretto")


@pytest.fixture(scope="module")
def console(home):
    with served(Options(data=home, token=TOKEN)) as (base, _):
        yield base


@pytest.fixture(scope="module")
def page(browser, console):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    assert page.goto(f"{console}/?token={TOKEN}").status == 200
    yield page
    context.close()
    assert not errors, errors


def test_the_long_session_is_there(page, console):
    page.goto(f"{console}/sessions?q=s-9000")
    row = page.locator("[data-testid=sessions] tr.clickable")
    row.first.wait_for()
    assert row.count() == 1
    assert int(row.first.get_attribute("data-calls")) >= 1_900


def test_drift_on_a_long_session_is_computed_in_the_background(page, console):
    page.goto(f"{console}/flows/{FLOW}")
    drift = page.get_by_test_id("drift")
    # the page is up (the versions answered) while the drift is computed or done
    page.get_by_text("No committed versions").wait_for()
    answer = page.request.get(f"{console}/api/flows/{FLOW}/drift")
    assert answer.status in (200, 202)
    if answer.status == 202:
        assert answer.json()["state"] == "computing"
    drift.wait_for()
    assert "every readable shop session (31)" in drift.inner_text()
    page.locator("canvas#drift-chart").wait_for()


def test_past_the_limit_drift_is_too_large(browser, home):
    with served(Options(data=home, token=TOKEN, drift_max_calls=1_000)) as (base, _):
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{base}/?token={TOKEN}")
        page.goto(f"{base}/flows/{FLOW}")
        said = page.get_by_test_id("drift-too-large")
        said.wait_for()
        assert "more than the console's limit of 1,000" in said.inner_text()
        assert "--drift-max-calls" in said.inner_text()
        context.close()


def test_jump_to_a_call_deep_in_a_long_session(page, console):
    """Call 1,500 is pages away: the pages up to it are loaded, it is scrolled to, marked
    and focused."""
    page.goto(f"{console}/sessions?q=s-9000")
    page.locator("[data-testid=sessions] tr.clickable").first.click()
    page.get_by_test_id("timeline").locator("li.call").first.wait_for()
    assert page.locator("li.call").count() < 100  # one page
    page.get_by_label("Jump to call").fill("1500")
    page.get_by_label("Jump to call").press("Enter")
    target = page.locator("li.call.target")
    target.wait_for()
    assert target.get_attribute("data-call") == "1500"
    assert target.evaluate("node => node === document.activeElement")
    inside = "node => { const r = node.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }"  # noqa: E501
    assert target.is_visible() and target.evaluate(inside)
    assert page.get_by_role("status").filter(has_text="call 1500, line").count() == 1
    assert page.title() == "Session s-9000 · stretto console"
