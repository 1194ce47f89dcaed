"""The arbiter decider offline: which System-One oracle answers (`--oracle`, default `replay`:
the cache only), and one judge per episode, shown the session its walk feeds
(stretto.offline.walk's SessionView, whose transcript is the judge's Conversation).

Audit, promote, replay and search decide with it as the proxy would; a decision the oracle
cannot answer (`replay` and a question not in the cache) hands back with
`Decision.unanswered`, and each tool leaves it out and counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stretto.logs.episode import Episode
from stretto.oracle.arbiter import Arbiter, arbiter_from_json
from stretto.oracle.judge import ArbiterJudge
from stretto.oracle.oracle import Oracle, open_oracle
from stretto.oracle.state import Conversation

REPLAY = "replay"


@dataclass(frozen=True)
class OracleOptions:
    """`--oracle`, `--oracle-cache`, `--oracle-base-url`, `--oracle-log` of an offline tool."""

    uri: str = REPLAY
    cache: str | Path | None = None
    base_url: str | None = None
    log: str | Path | None = None


def episode_task(episode: Episode) -> str:
    """The task a session is of (its fold): the header's task_id, else the session itself."""
    return episode.task_id or episode.id


class Judges:
    """The arbiter's judges for the episodes of one offline run, sharing one oracle."""

    def __init__(self, flow: dict, options: OracleOptions | None = None) -> None:
        options = options or OracleOptions()
        self.flow = flow
        self.arbiter: Arbiter = arbiter_from_json(flow["arbiter"])
        self.oracle: Oracle = open_oracle(
            options.uri,
            cache=options.cache,
            base_url=options.base_url,
            log=options.log,
            replayed=self.arbiter.model,
        )

    def judge(self, episode: Episode) -> ArbiterJudge:
        """A fresh judge for one walk of the episode (its decisions numbered from 0)."""
        return ArbiterJudge(
            self.flow,
            self.oracle,
            session=episode.id,
            task=episode_task(episode),
            arbiter=self.arbiter,
        )

    @staticmethod
    def transcript() -> Conversation:
        return Conversation()


def judges_for(flow: dict, kinds: list[str], options: OracleOptions | None) -> Judges | None:
    """Judges when one of the deciders `kinds` is the arbiter, else None (nothing to ask)."""
    return Judges(flow, options) if "arbiter" in kinds else None
