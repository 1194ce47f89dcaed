"""A synthetic archive of session logs (format version 2) for the benchmarks.

Each session: a header, initialize and tools/list, a user question, then calls of a small
read/write tool set with results of realistic, skewed sizes (a log-normal around 1 KB, up to
~64 KB), parallel calls now and then, a few failures, and assistant replies. Deterministic
for a seed.

    .venv/bin/python bench/synth_logs.py OUT_DIR --sessions 50000 --calls 1000000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

TOOLS = [
    ("find_user", True),
    ("get_user", True),
    ("get_order", True),
    ("list_orders", True),
    ("search_products", True),
    ("get_product", True),
    ("cancel_order", False),
    ("update_address", False),
    ("calc", None),
]
TOOL_LIST = json.dumps(
    {
        "tools": [
            {
                "name": name,
                "description": f"The {name.replace('_', ' ')} tool.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}},
                    "required": ["id"],
                },
                **({"annotations": {"readOnlyHint": hint}} if hint is not None else {}),
            }
            for name, hint in TOOLS
        ]
    },
    separators=(",", ":"),
)
WORDS = "alpha beta gamma delta order user item ship paid pending desk lamp chair blue".split()


def result_text(rng: random.Random, size: int) -> str:
    # formatted by hand: the same text json.dumps gives (plain words and digits, nothing to
    # escape), at a fraction of its cost, which is most of a large archive's generation
    items = []
    total = 0
    while total < size:
        ident = rng.randrange(10**6)
        status = rng.choice(WORDS)
        note = " ".join(rng.choices(WORDS, k=8))
        price = rng.randrange(10**5) / 100
        items.append(f'{{"id":"#W{ident}","status":"{status}","note":"{note}","price":{price!r}}}')
        total += 90
    return f'{{"items":[{",".join(items)}],"count":{len(items)}}}'


def session_lines(
    rng: random.Random, index: int, calls: int, day: int, result_scale: float = 1.0
) -> list[str]:
    """A session's lines; `result_scale` multiplies every result's size (1: the default)."""
    clock = f"{index // 3600 % 24:02d}{index // 60 % 60:02d}{index % 60:02d}"
    session = f"202611{day:02d}T{clock}.{index % 1000:03d}Z-{index}"
    header = {
        "stretto_mcp_log": 2,
        "session": session,
        "started_unix_ms": 1795000000000 + index * 1000,
        "server_command": ["shop-server"],
        "domain": rng.choice(["shop", "shop", "notes"]),
        "agent_model": rng.choice(["model-a", "model-b", None]),
    }
    out = [json.dumps(header, separators=(",", ":"))]
    t = 0

    def line(sender: str, message: str) -> None:
        out.append(f'{{"t_ms":{t},"from":"{sender}","message":{message}}}')

    line(
        "client",
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"synth-host","version":"1"}}}',
    )
    line(
        "server",
        '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"shop","version":"1"}}}',
    )
    line("client", '{"jsonrpc":"2.0","method":"notifications/initialized"}')
    line("client", '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}')
    line("server", f'{{"jsonrpc":"2.0","id":1,"result":{TOOL_LIST}}}')
    line("context", json.dumps({"role": "user", "content": f"Help with order #W{index}"}))
    next_id = 2
    made = 0
    while made < calls:
        batch = min(calls - made, 2 if rng.random() < 0.15 else 1)
        ids = []
        for _ in range(batch):
            name = rng.choice(TOOLS)[0]
            args = json.dumps({"id": f"#W{rng.randrange(10**6)}"})
            t += rng.randrange(200, 3000)
            line(
                "client",
                f'{{"jsonrpc":"2.0","id":{next_id},"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}',
            )
            ids.append(next_id)
            next_id += 1
        for call_id in ids:
            t += rng.randrange(1, 400)
            if rng.random() < 0.03:
                text, failed = "Error: not found", "true"
            else:
                size = min(int(result_scale * rng.lognormvariate(6.7, 1.0)), 65536)
                text, failed = result_text(rng, size), "false"
            content = json.dumps([{"type": "text", "text": text}], separators=(",", ":"))
            line(
                "server",
                f'{{"jsonrpc":"2.0","id":{call_id},"result":{{"content":{content},"isError":{failed}}}}}',
            )
        made += batch
        if rng.random() < 0.1:
            t += 500
            line("context", json.dumps({"role": "assistant", "content": "Here is what I found."}))
            line("context", json.dumps({"role": "user", "content": "Thanks, go on."}))
    line("context", json.dumps({"role": "assistant", "content": "Done."}))
    return out


def generate(out: Path, sessions: int, calls: int, seed: int = 7, days: int = 5) -> int:
    """Write the archive under out/<domain>/; the number of bytes written."""
    rng = random.Random(seed)
    per_session = max(1, calls // sessions)
    written = 0
    for index in range(sessions):
        day = 20 + index % days
        lines = session_lines(rng, index, per_session, day)
        domain = json.loads(lines[0])["domain"]
        folder = out / domain
        folder.mkdir(parents=True, exist_ok=True)
        data = ("\n".join(lines) + "\n").encode()
        (folder / f"{json.loads(lines[0])['session']}.jsonl").write_bytes(data)
        written += len(data)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    size = generate(args.out, args.sessions, args.calls, args.seed)
    print(f"wrote {args.sessions} sessions, {size / 1e6:.0f} MB, to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
