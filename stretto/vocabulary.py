"""The words and numbers that the proxy, the log reader, the model, the offline tools and the
warehouse's SQL must agree on, each defined here once.

Imports nothing, so that stretto-proxy reads it at start-up for free (tests/proxy/test_startup.py)
and every layer may use it. The warehouse's SQL gets these values from `warehouse.sql.statements`,
which puts them in place of `{NAME}` placeholders (warehouse/sql/__init__.py), never as literals.
"""

from __future__ import annotations

# --- steps: how a flow names what the agent did (docs/formats.md §3) -----------------------------
RESPOND = "respond"  # a reply the user answered (and the decision to hand back to the agent)
RESPOND_END = "respond (end)"  # a reply that ended the session

# --- session logs --------------------------------------------------------------------------------
LOG_VERSION = 2  # the `stretto_mcp_log` that the proxy and the importers write
LOG_VERSIONS_READ = (1, 2)  # ... and those the reader and the warehouse's ingest accept
LOG_VERSIONS_SAID = " and ".join(map(str, LOG_VERSIONS_READ))  # "1 and 2", in their errors
PROTOCOL_VERSION = "2025-06-18"  # the MCP version of the logs we make up and of our stdio client

# A client call this soon after its turn's last result may share the turn (stretto/logs/turns.py;
# warehouse/sql/ingest.sql, `candidates`); the importers space a new turn's first call further.
SAME_TURN_MS = 500

# --- probabilities -------------------------------------------------------------------------------
FLOOR = 1e-6  # the least probability whose logarithm is taken: −ln never exceeds −ln(1e-6)

# --- task folds (../shared/spec/algorithms.md §0) ------------------------------------------------
FOLDS = 5  # the folds of cross-fitting: the arbiter's, calibration's and the surprise gate's

_MASK = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """FNV-1a (64 bits) of `text`'s UTF-8 bytes with the offset ../shared/spec/algorithms.md §0
    gives (1469598103934665603; FNV's published one has one digit more): the stable hash that
    tasks' folds and the seeded draws are keyed on (Python's own `hash` changes between runs)."""
    h = 1469598103934665603
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & _MASK
    return h


def fold_of(task: str, folds: int = FOLDS) -> int:
    """A task's fold: FNV-1a of its id modulo the folds, so every part of stretto that
    cross-fits by task puts a task in the same fold."""
    return fnv1a64(task) % folds
