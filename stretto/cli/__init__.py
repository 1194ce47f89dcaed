"""The `stretto` command, one module per command family: warehouse (sessions, ingest, sql),
learning (learn, import-tau2, compile), review (flow-show, flow-diff), offline (audit,
evaluate, replay, search, promote), setup (init, doctor); options holds what they share."""

from stretto.cli.main import main

__all__ = ["main"]
