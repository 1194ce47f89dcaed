"""Shared by the tests of a flow's life after the first learn (drift, the surprise gate,
staging): synthetic shop sessions from an agent whose habits can change, written as session
logs, and a learner that learns with the real command in this process."""

from __future__ import annotations

import json
import random
from pathlib import Path

from stretto.logs.episode import Episode
from stretto.model.flow import load_flow
from tests.builders import HEADER, LogBuilder, learn


def _tool(name: str, arg: str, read: bool) -> dict:
    return {
        "name": name,
        "annotations": {"readOnlyHint": read},
        "inputSchema": {
            "type": "object",
            "properties": {arg: {"type": "string"}},
            "required": [arg],
        },
    }


TOOLS = {
    "tools": [
        _tool("find_account", "email", True),
        _tool("get_account", "account", True),
        _tool("get_order", "order", True),
        _tool("get_returns", "account", True),
        _tool("close_order", "order", False),
    ]
}


DESK_TOOLS = {
    "tools": [
        _tool("get_ticket", "ticket", True),
        _tool("get_user", "user", True),
        _tool("search_kb", "query", True),
        _tool("update_ticket", "ticket", False),
    ]
}


class Session:
    """One session log being written: the agent's calls a turn each, 600 ms apart."""

    def __init__(
        self, session: str, start_ms: int, domain: str = "shop", tools: dict = TOOLS
    ) -> None:
        self.log = LogBuilder()
        self.log.lines[0] = {
            **HEADER,
            "session": session,
            "started_unix_ms": start_ms,
            "domain": domain,
        }
        self.log._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        self.log._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": tools})
        self.t, self.next_id = 2, 1

    def say(self, role: str, text: str) -> Session:
        self.t += 1
        self.log.say(self.t, role, text)
        return self

    def call(self, tool: str, result: str, error: bool = False, **arguments: str) -> Session:
        self.t += 600
        self.log.client_call(self.t, self.next_id, tool, **arguments)
        self.log.result(self.t + 1, self.next_id, result, error)
        self.next_id += 1
        return self

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.log.lines[0]['session']}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in self.log.lines))
        return path


def customer(session: Session, index: int, rng: random.Random, habit: str) -> None:
    """One customer served. Habit `usual`: find the account, read it, read each of its orders,
    answer, and sometimes close an order. Habit `changed`: after reading the account the agent
    reads the returns (a tool it never used before) and closes an order without reading it."""
    email, account = f"c{index}@example.com", f"acct_{index}"
    orders = [f"#W{index}{k}" for k in range(rng.randint(1, 3))]
    session.say("user", f"Hi, I'm {email}.")
    session.call("find_account", account, email=email)
    session.call("get_account", json.dumps({"account": account, "orders": orders}), account=account)
    if habit == "usual":
        for order in orders:
            session.call("get_order", json.dumps({"order": order, "status": "open"}), order=order)
        session.say("assistant", f"You have {len(orders)} open orders.")
        if rng.random() < 0.5:
            session.say("user", "Close the first one.")
            session.call("close_order", "closed", order=orders[0])
            session.say("assistant", "Done.")
    else:
        session.call("get_returns", json.dumps({"returns": []}), account=account)
        session.call("close_order", "closed", order=orders[0])
        if rng.random() < 0.5:
            session.call(
                "get_order", json.dumps({"order": orders[0], "status": "closed"}), order=orders[0]
            )
        session.say("assistant", "Done.")


def write_sessions(
    folder: Path, habits: list[str], seed: int = 0, customers: int = 1, start: int = 0
) -> list[Path]:
    """One session per habit given, in start order, each serving `customers` customers."""
    rng = random.Random(seed)
    paths = []
    for i, habit in enumerate(habits):
        session = Session(f"s-{start + i:04d}", 1_000_000 + (start + i) * 1000)
        for k in range(customers):
            customer(session, (start + i) * 10 + k, rng, habit)
        paths.append(session.write(folder))
    return paths


def ticket(session: Session, index: int, rng: random.Random, habit: str) -> None:
    """One help-desk ticket handled. Habit `requester`: read the ticket, then look up its
    requester, sometimes search the knowledge base, answer and sometimes update the ticket.
    Habit `no-requester`: the same without the requester's lookup after the ticket; `half`:
    without it on half the tickets."""
    number, user = f"T-{index}", f"u_{index % 97}"
    session.say("user", f"Please look at ticket {number}.")
    subject = rng.choice(["login", "billing", "export", "invite"])
    ticket_json = json.dumps({"ticket": number, "requester": user, "subject": subject})
    session.call("get_ticket", ticket_json, ticket=number)
    if habit == "requester" or (habit == "half" and rng.random() < 0.5):
        session.call("get_user", json.dumps({"user": user, "plan": "pro"}), user=user)
    if rng.random() < 0.5:
        session.call("search_kb", json.dumps({"articles": [f"kb-{subject}"]}), query=subject)
    session.say("assistant", f"Ticket {number}: here is what I found.")
    if rng.random() < 0.4:
        session.say("user", "Please mark it solved.")
        session.call("update_ticket", "updated", ticket=number)
        session.say("assistant", "Done.")


def write_tickets(
    folder: Path, habits: list[str], seed: int = 0, tickets: int = 4, start: int = 0
) -> list[Path]:
    """One help-desk session (domain `desk`) per habit given, in start order, each handling
    `tickets` tickets (±1, at random)."""
    rng = random.Random(seed)
    paths = []
    for i, habit in enumerate(habits):
        session = Session(f"d-{start + i:04d}", 1_000_000 + (start + i) * 1000, "desk", DESK_TOOLS)
        for k in range(max(1, tickets + rng.randint(-1, 1))):
            ticket(session, (start + i) * 10 + k, rng, habit)
        paths.append(session.write(folder))
    return paths


def learn_folder(folder: Path, out: Path, home: Path, *extra: str, domain: str = "shop") -> dict:
    """Learn with the real command, in this process (tests.builders.learn); the flow."""
    mkdir = ["--mkdir"] if not out.parent.exists() else []  # e.g. another home's flows/
    done = learn(folder, out, home, *mkdir, *extra, domain=domain)
    assert done.returncode == 0, done.stderr
    return load_flow(out)


def learner(base: Path):
    """episodes -> the flow the real command learns from their logs (each call its own
    folder of links to the episodes' files)."""
    calls = [0]

    def learn(episodes: list[Episode]) -> dict:
        calls[0] += 1
        folder = base / f"learn-{calls[0]}"
        folder.mkdir(parents=True)
        for episode in episodes:
            source = Path(episode.source)
            (folder / source.name).symlink_to(source)
        return learn_folder(folder, base / f"learn-{calls[0]}.flow.json", base / "home")

    learn.calls = calls  # type: ignore[attr-defined]
    return learn
