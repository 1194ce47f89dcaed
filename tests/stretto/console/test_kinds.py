"""The kinds of job are listed once, in stretto.console.jobs.KINDS: each runs a command, and
the places that name them in prose or markup — README.md, docs/console.md's Jobs table and the
Jobs page's forms — name the same ones (this fails when either side changes alone)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stretto.console.jobs import KINDS, JobError, Jobs
from tests.conftest import ROOT


def test_the_readme_names_the_kinds_of_job():
    text = " ".join((ROOT / "README.md").read_text().split())
    (listed,) = re.findall(r"the jobs \(([^)]*)\)", text)
    assert {kind.strip() for kind in listed.split(",")} == set(KINDS)


def test_the_console_docs_have_a_row_for_each_kind_of_job():
    text = (ROOT / "docs" / "console.md").read_text()
    section = text.split("\n### Jobs\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE)
    assert sorted(rows) == sorted(KINDS)


def test_the_jobs_page_has_a_form_for_each_kind_of_job():
    script = (ROOT / "stretto" / "console" / "static" / "pages" / "jobs.js").read_text()
    forms = script.split("const FORMS = {", 1)[1].split("\n};", 1)[0]
    names = re.findall(r'^  "?([a-z-]+)"?: \[', forms, flags=re.MULTILINE)
    assert sorted(names) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_job_runs_a_command(kind: str, tmp_path: Path):
    """Asked without its parameters, a kind either has its command or names the field it
    lacks (422); never "unknown job" (404)."""
    jobs = Jobs(tmp_path, ["stretto"], lambda event, data: None)
    try:
        argv = jobs.command(kind, {}, tmp_path / "artifacts").argv
    except JobError as exc:
        assert exc.status == 422 and str(exc).startswith("field `"), exc
    else:
        assert argv[0] == kind


def test_a_kind_not_listed_is_unknown(tmp_path: Path):
    jobs = Jobs(tmp_path, ["stretto"], lambda event, data: None)
    with pytest.raises(JobError, match="unknown job 'paint': learn, .* or doctor") as raised:
        jobs.command("paint", {}, tmp_path / "artifacts")
    assert raised.value.status == 404
