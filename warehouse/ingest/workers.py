"""The worker processes of an ingest run: discovery hashes new logs on them, then the batches
run on them (DuckDB runs each batch's statements on one core, so one process per core).

One pool serves both: its processes start on its first task, so a run with little to hash
and one batch starts none, and a large first ingest pays for their start (~0.5 s each:
Python, DuckDB and pyarrow) while it would otherwise still be hashing.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import resource_tracker

# STRETTO_INGEST_WORKERS overrides the number of processes.
WORKERS = int(os.environ.get("STRETTO_INGEST_WORKERS") or min(4, os.cpu_count() or 1))


def _end_with_parent(parent: int) -> None:
    """In a worker: exit when the process that started it is gone (killed with -9, it
    cannot tell its workers), instead of finishing a batch nobody will commit. Ctrl-C, which
    a terminal sends to every process of the command, is the parent's to answer: it ends
    itself, and its workers with it, without a traceback from each."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            threading.Event().wait(0.5)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the pool would) with its warnings off: when
    Ctrl-C ends an ingest at once (stretto.cli.options.interruptible) it still removes the
    pool's semaphores, and would say so on the command's stderr, a warning per run."""
    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore::UserWarning"
    try:
        resource_tracker.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = saved


@contextmanager
def worker_pool(workers: int | None = None) -> Iterator[ProcessPoolExecutor | None]:
    """A pool of `workers` (default WORKERS) processes, started on first use and ended with
    the block; None when there is one worker (everything then runs in this process)."""
    workers = workers or WORKERS
    if workers <= 1:
        yield None
        return
    _start_resource_tracker()
    # spawn, not fork: the caller may hold threads (Dagster) or a DuckDB connection.
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_end_with_parent,
        initargs=(os.getpid(),),
    )
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)
