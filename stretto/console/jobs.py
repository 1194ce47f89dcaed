"""Jobs: the `stretto` commands the console runs for people (`KINDS`), one at a time, each as
a subprocess (the CLI runs the pipeline's Dagster assets in that process, as it does from a
terminal), with its output, its record and its artifacts under the data directory's
`console/jobs/<id>/`. A job whose output is a Markdown report keeps it as
`artifacts/report.md`. A job can be cancelled: its process group is stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from stretto.console import adapter, files
from stretto.console.threshold import threshold_problem
from stretto.logs.domain import RULE, is_valid_domain

OUTPUT_TAIL = 4000  # characters of output sent with each progress event
STOP_GRACE_S = 5.0
# Which Dagster assets each job materializes (the CLI runs them in-process).
ASSETS = {
    "ingest": ["sessions", "messages", "calls", "context", "tools", "quarantine", "steps"],
    "learn": ["sessions", "messages", "calls", "context", "tools", "quarantine", "steps", "flow"],
}
# The jobs whose standard output is a Markdown report: it is also kept as artifacts/report.md,
# which the Jobs page shows rendered (evaluate writes its own report.md in --out).
MARKDOWN_STDOUT = ("audit", "replay", "stage")
REPORT = "report.md"
READABLE = "sessions"  # a job's folder of links to the logs a replay reads
# The kinds of job, each the `stretto` command of its name: the one list the API (its check and
# description, /api/meta), stretto-console --help and the docs' test
# (tests/stretto/console/test_kinds.py) read.
KINDS = (
    "learn",
    "audit",
    "replay",
    "evaluate",
    "search",
    "promote",
    "stage",
    "flow-commit",
    "ingest",
    "doctor",
)
KINDS_SAID = f"{', '.join(KINDS[:-1])} or {KINDS[-1]}"  # as error messages name them


class JobError(ValueError):
    """Parameters a job cannot run with (422), or a job that cannot start now (409)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def _text(params: dict, name: str, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise JobError(f"field `{name}`: required")
        return None
    if not isinstance(value, str):
        raise JobError(f"field `{name}`: expected a string, got {value!r}")
    return value


def _threshold(params: dict) -> float | None:
    """The job's threshold: none (the flow's own, else 0.3), or a number from 0 to 1."""
    value = params.get("threshold")
    if value is None:
        return None
    if (problem := threshold_problem(value)) is not None:
        raise JobError(f"field `threshold`: {problem}")
    return value


def _named(rel: str, problem: str) -> str:
    """A log's problem, named with the log (the catalog's usually names it already)."""
    return problem if problem.startswith(rel) else f"{rel}: {problem}"


def _left_out_note(left_out: list[str]) -> str:
    lines = "".join(f"  {item}\n" for item in left_out)
    return (
        f"left out {len(left_out)} session log(s) with a line that cannot be read "
        f"(as the console's pages do):\n{lines}\n"
    )


def _keep_report(stdout, folder: Path) -> None:
    """Copy a job's standard output (a Markdown report) to its output log, as it comes, and
    to artifacts/report.md; both private, the report made at its first byte."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    report = None
    with stdout, os.fdopen(os.open(folder / "output.log", flags, 0o600), "wb", 0) as log:
        try:
            while chunk := stdout.read1(65536):
                log.write(chunk)
                if report is None:
                    report = os.fdopen(
                        os.open(folder / "artifacts" / REPORT, flags | os.O_TRUNC, 0o600), "wb", 0
                    )
                report.write(chunk)
        finally:
            if report is not None:
                report.close()


class Command(NamedTuple):
    """What a job runs: the `stretto` arguments, the flows it writes, and for a replay of a
    folder with logs the console cannot read, links (name -> log) to the readable ones and
    the logs left out, each with its problem."""

    argv: list[str]
    writes: list[Path]
    links: dict[Path, Path]
    left_out: list[str]


class Jobs:
    def __init__(
        self,
        data: Path,
        stretto: list[str],
        publish: Callable[[str, dict], None],
        catalog=None,
    ) -> None:
        self.data = data
        self.folder = data / "console" / "jobs"
        self.stretto = stretto
        self.publish = publish
        self.catalog = catalog
        self.lock = threading.RLock()
        self.running: dict | None = None
        self.process: subprocess.Popen | None = None

    # what each job runs --------------------------------------------------------------------

    def _folder_param(self, params: dict, name: str) -> Path:
        path = self._inside(_text(params, name), name)
        if not path.is_dir():
            raise JobError(
                f"field `{name}`: {params[name]!r} is not a folder of the data directory"
            )
        return path

    def _flow_param(self, params: dict, name: str = "flow") -> Path:
        path = self._inside(_text(params, name), name)
        if not path.is_file():
            raise JobError(f"field `{name}`: no flow {params[name]!r}", 404)
        return path

    def _out_param(self, params: dict, writes: list[Path]) -> Path:
        out = self._inside(_text(params, "out"), "out")
        if not out.name.endswith(".flow.json"):
            raise JobError("field `out`: a flow's name ends with .flow.json")
        if out.exists() and not params.get("replace"):
            raise JobError(
                f'field `out`: {params["out"]} exists; pass "replace": true to replace it '
                "(the old one is kept in the console's trash)",
                409,
            )
        writes.append(out)
        return out

    def _served_flow_param(self, params: dict) -> Path:
        """A flow that is served, not one staged beside it (stage and commit act on both)."""
        path = self._flow_param(params)
        if adapter.staged_beside(path) is not None:
            raise JobError(
                f"field `flow`: {params['flow']!r} is a staged flow; give the flow it is "
                "staged beside"
            )
        return path

    def _unreadable(self, sessions: Path) -> tuple[dict[Path, Path], list[str]]:
        """The logs of `sessions` the console cannot read, each named with its problem, and
        links to the others: `stretto replay` fails on a line it cannot read, where the rest
        of the console skips that session and says so. No links when every log reads."""
        bad: dict[Path, str] = {}
        for entry in self.catalog.sessions() if self.catalog is not None else []:
            problem = entry.summary.get("problem")
            for rel in [entry.rel, *entry.copies] if problem else []:
                bad[self.data / rel] = problem
        logs = adapter.list_session_logs(sessions)
        if not any(log in bad for log in logs):
            return {}, []
        left_out = [_named(str(log.relative_to(self.data)), bad[log]) for log in logs if log in bad]
        return {Path(log.name): log for log in logs if log not in bad}, left_out

    def _inside(self, relative: str | None, name: str) -> Path:
        try:
            return files.inside(self.data, relative or "")
        except files.Refused as exc:
            raise JobError(f"field `{name}`: {exc}") from None

    def command(self, kind: str, params: dict, artifacts: Path) -> Command:
        """The stretto arguments a job runs, the flows it will write, and for a replay the
        logs it leaves out."""
        if kind not in KINDS:
            raise JobError(f"unknown job {kind!r}: {KINDS_SAID}", 404)
        links: dict[Path, Path] = {}
        left_out: list[str] = []
        if kind == "replay":  # the catalogue and the folder looked at once
            links, left_out = self._unreadable(self._folder_param(params, "sessions"))
        argv, writes = self._argv(kind, params, artifacts, readable_only=bool(links))
        return Command(argv, writes, links, left_out)

    def _argv(
        self, kind: str, params: dict, artifacts: Path, readable_only: bool = False
    ) -> tuple[list[str], list[Path]]:
        home = str(self.data)
        writes: list[Path] = []
        if kind == "ingest":
            return ["ingest", "--home", home], writes
        if kind == "doctor":
            return ["doctor", "--home", home], writes
        if kind == "learn":
            domain = _text(params, "domain")
            if domain is None or not is_valid_domain(domain):  # "--help" is read as an option
                raise JobError(f"field `domain`: {domain!r}: {RULE}")
            sessions = self._folder_param(params, "sessions")
            params.setdefault(
                "out", str(adapter.default_flow(self.data, domain).relative_to(self.data))
            )
            out = self._out_param(params, writes)
            # a value the user gave is joined to its option: never read as an option itself
            argv = ["learn", f"--sessions={sessions}", f"--domain={domain}", "--habit-only"]
            return [*argv, "--out", str(out), "--home", home], writes
        if kind in ("audit", "replay", "search", "evaluate"):
            flow = self._flow_param(params)
            sessions = self._folder_param(params, "sessions")
            if kind == "replay" and readable_only:  # replay what reads
                sessions = artifacts.parent / READABLE
            argv = [kind, "--flow", str(flow), "--sessions", str(sessions)]
            if kind == "audit":
                return [*argv, "--out", str(artifacts), "--home", home], writes
            if kind in ("replay", "evaluate"):
                threshold = _threshold(params)  # none: the flow's own, else 0.3
                if threshold is not None:
                    argv.append(f"--threshold={threshold}")
                if kind == "evaluate":
                    return [*argv, "--out", str(artifacts), "--home", home], writes
                return [*argv, "--out", str(artifacts)], writes
            if params.get("dry_run"):
                return [*argv, "--dry-run"], writes
            return [*argv, "--out", str(self._out_param(params, writes))], writes
        if kind == "promote":
            flow = self._flow_param(params)
            shadow = self._folder_param(params, "shadow")
            out = self._out_param(params, writes)
            return [
                "promote",
                "--flow",
                str(flow),
                "--shadow",
                str(shadow),
                "--out",
                str(out),
            ], writes
        if kind == "stage":
            flow = self._served_flow_param(params)
            sessions = self._folder_param(params, "sessions")
            writes.append(adapter.staged_of(flow))  # `stretto stage` replaces it
            return [
                "stage",
                "--flow",
                str(flow),
                "--sessions",
                str(sessions),
                "--home",
                home,
            ], writes
        if kind == "flow-commit":
            flow = self._served_flow_param(params)
            note = _text(params, "note")
            writes.append(flow)  # the staged version (or the file as it is) is served
            return ["flow-commit", "--flow", str(flow), f"--note={note}"], writes
        raise AssertionError(f"job kind {kind!r} is in KINDS but runs no command")

    # running -------------------------------------------------------------------------------

    def start(self, kind: str, params: dict) -> dict:
        if not isinstance(params, dict):
            raise JobError("field `params`: expected an object")
        with self.lock:
            if self.running is not None:
                raise JobError(
                    f"job {self.running['id']} ({self.running['kind']}) is running; one at a time",
                    409,
                )
            job_id = f"{files.stamp()}-{kind}"
            folder = self.folder / job_id
            artifacts = folder / "artifacts"
            plan = self.command(kind, dict(params), artifacts)
            files.private_dir(artifacts)
            if plan.links:
                files.private_dir(folder / READABLE)
                for name, log in plan.links.items():
                    (folder / READABLE / name).symlink_to(log)
            for existing in plan.writes:
                if existing.exists():  # a copy in the trash before the job replaces it
                    files.copy_to_trash(self.data, existing)
            job = {
                "id": job_id,
                "kind": kind,
                "params": params,
                "argv": ["stretto", *plan.argv],
                "state": "running",
                "exit_code": None,
                "started_unix_ms": int(time.time() * 1000),
                "finished_unix_ms": None,
                "writes": [str(p.relative_to(self.data)) for p in plan.writes],
                "assets": ASSETS.get(kind, []),
                "left_out": plan.left_out,
            }
            files.write_json(folder / "job.json", job)
            # appended to by the job and, for a Markdown report, by the thread copying it
            output = os.open(folder / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            if plan.left_out:
                os.write(output, _left_out_note(plan.left_out).encode())
            env = dict(os.environ, STRETTO_HOME=str(self.data), PYTHONUNBUFFERED="1")
            report = kind in MARKDOWN_STDOUT
            try:
                self.process = subprocess.Popen(
                    [*self.stretto, *plan.argv],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if report else output,
                    stderr=output if report else subprocess.STDOUT,
                    cwd=folder,
                    env=env,
                    umask=0o077,  # what the job writes is private too
                    start_new_session=True,  # cancel stops the whole group
                )
            finally:
                os.close(output)
            self.running = job
        copier = None
        if report:
            copier = threading.Thread(
                target=_keep_report, args=(self.process.stdout, folder), daemon=True
            )
            copier.start()
        threading.Thread(target=self._watch, args=(job, self.process, copier), daemon=True).start()
        self.publish("job", self._progress(job))
        return job

    def _watch(self, job: dict, process: subprocess.Popen, copier: threading.Thread | None) -> None:
        while process.poll() is None:
            time.sleep(0.5)
            self.publish("job", self._progress(job))
        if copier is not None:
            copier.join()  # the report is whole before the job is said to end
        with self.lock:
            job["exit_code"] = process.returncode
            if job["state"] == "cancelling":
                job["state"] = "cancelled"
            else:
                job["state"] = "succeeded" if process.returncode == 0 else "failed"
            job["finished_unix_ms"] = int(time.time() * 1000)
            files.write_json(self.folder / job["id"] / "job.json", job)
            self.running, self.process = None, None
        self.publish("job", self._progress(job))
        if job["writes"] or job["kind"] == "ingest":
            self.publish("changed", {"what": "flows" if job["writes"] else "warehouse"})

    def cancel(self, job_id: str) -> dict:
        with self.lock:
            job = self.running
            if job is None or job["id"] != job_id:
                known = self.get(job_id)
                raise JobError(f"job {job_id} is {known['state']}: nothing to cancel", 409)
            job["state"] = "cancelling"
            process = self.process
        assert process is not None
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        threading.Thread(target=self._kill_later, args=(process,), daemon=True).start()
        return job

    @staticmethod
    def _kill_later(process: subprocess.Popen) -> None:
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # reading -------------------------------------------------------------------------------

    def _progress(self, job: dict) -> dict:
        return {
            "id": job["id"],
            "kind": job["kind"],
            "state": job["state"],
            "exit_code": job["exit_code"],
            "output_tail": self.output(job["id"])[-OUTPUT_TAIL:],
        }

    def get(self, job_id: str) -> dict:
        with self.lock:
            if self.running is not None and self.running["id"] == job_id:
                return dict(self.running, artifacts=self.artifacts(job_id))
        if "/" in job_id or job_id.startswith("."):
            raise JobError(f"no job {job_id!r}", 404)
        record = self.folder / job_id / "job.json"
        try:
            job = json.loads(record.read_text())
        except (OSError, ValueError):
            raise JobError(f"no job {job_id!r}", 404) from None
        if job.get("state") in ("running", "cancelling"):
            job["state"] = "interrupted"  # the console that ran it stopped first
        return dict(job, artifacts=self.artifacts(job_id))

    def all(self) -> list[dict]:
        if not self.folder.is_dir():
            return []
        out = []
        for folder in sorted(self.folder.iterdir(), reverse=True):
            try:
                out.append(self.get(folder.name))
            except JobError:
                continue
        return out

    def output(self, job_id: str) -> str:
        try:
            return (self.folder / job_id / "output.log").read_text(errors="replace")
        except OSError:
            return ""

    def artifacts(self, job_id: str) -> list[dict]:
        folder = self.folder / job_id / "artifacts"
        if not folder.is_dir():
            return []
        return [
            {"path": str(p.relative_to(folder)), "size": p.stat().st_size}
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        ]

    def artifact(self, job_id: str, path: str) -> Path:
        self.get(job_id)
        folder = (self.folder / job_id / "artifacts").resolve()
        try:
            found = files.inside(folder, path)
        except files.Refused as exc:
            raise JobError(str(exc), 404) from None
        if not found.is_file():
            raise JobError(f"job {job_id} has no artifact {path!r}", 404)
        return found


def default_stretto() -> list[str]:
    """How to run the `stretto` CLI: this interpreter's, so the jobs run the same code."""
    return [sys.executable, "-m", "stretto"]
