"""The benchmarks' harness tested on the few τ²-bench files tests/data carries."""

from __future__ import annotations

import pytest

from bench import quality as q
from bench import tau2data
from tests.conftest import TAU2


@pytest.fixture(scope="module")
def retail() -> q.Domain:
    """Retail from tests/data/tau2: ToolOrchestra's gpt-4.1-mini-2025-04-14 (training and test
    tasks), the trace file's gpt-4.1-mini (one task) and gpt-4.1 (test tasks): one agent ran
    the training tasks."""
    chosen = tau2data._chosen
    tau2data._chosen = TAU2
    try:
        return q.load_domain("retail")
    finally:
        tau2data._chosen = chosen
