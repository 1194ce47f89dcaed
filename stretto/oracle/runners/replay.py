"""`replay`: answers only from the cache, as the flow's own model gave them; a question not in
the cache is unanswered (audit and promote leave the decision out; serving hands back)."""

from __future__ import annotations

from stretto.oracle.errors import Unanswered
from stretto.oracle.request import Request
from stretto.oracle.runners.base import Context, Reply, Runner, RunnerOptions


class ReplayRunner(Runner):
    scheme = "replay"

    def __init__(self, model: str, options: RunnerOptions | None, replayed: type[Runner]) -> None:
        super().__init__(model, options)
        self.replayed = replayed
        self.draws = replayed.draws  # the same cache keys as the model replayed

    @property
    def uri(self) -> str:
        return f"{self.replayed.scheme}://{self.model}"

    def ask(self, request: Request, context: Context) -> Reply:
        raise Unanswered(f"replay: no cached answer of {self.uri} to this question")

    def check(self) -> str:
        return f"answers from the cache only, as {self.uri} gave them"
