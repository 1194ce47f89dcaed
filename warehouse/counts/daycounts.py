"""A flow's counts, one file per partition (domain and day), kept so that learning again
counts only what changed: a nightly relearn after one new day counts that day and sums.

    warehouse/counts/<domain>/<day>/<key>.counts-<kinds>.json   the part's counts
    warehouse/counts/<domain>/<day>/<key>.listing.json          its latest tool listings
    warehouse/counts/<domain>/<day>/<key>.replays.json          its bindings' replays
    warehouse/counts/<domain>/<day>/<key>.alpha.json (+ .npz)   α's walk (the first part only)

`key` is a digest of the part's sessions (id and ingest run, so a log that grew or was replaced
makes a new key) and warehouse.counts.partcount.COUNTS_VERSION (bump it there, where the key is
built, when the SQL changes what a part's counts hold); the other inputs a file depends on are
in its name (the tool kinds, whether constants are learned) or in it (the rules a replay ran
under). A file is written whole (temporary name, rename) and only read back when its key
matches, so a stale or half-written part is never summed; a part counted again replaces its
older files.

What adds and what does not (docs/scaling.md):
- habit, reach, sites, steps, the bindings' `args`, `sources`, `lists` and constants' tallies
  are sums over sessions: the flow's are the sums of its parts'.
- the tool listing (kinds, docs, contracts) is "the latest listing wins": each part keeps the
  latest listing of each tool with its session's place in learning order; the merge takes the
  latest of those.
- the bindings' agreement and named-other picks replay the flow's rules over every session;
  the rules come from the summed counts, but a lookup's tally depends only on the rules that
  decide its own pick, so each part keeps its tally per lookup with the digest of those rules
  and only lookups whose rules changed (or new parts) are replayed (warehouse/counts/agreement.py).
- the fit of α is not a sum (each step is predicted from every step before it): it reads the
  first ALPHA_FIT_STEPS steps in learning order, a walk that is kept and continued over the
  sessions after it, or walked again from the start when the first sessions changed
  (warehouse/counts/alphafit.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.files import write_atomic
from warehouse.layout import Layout

Levels = dict[tuple[str, ...], dict[str, float]]


def part_key(domain: str, day: str) -> str:
    return f"{domain}/{day}"


def digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass
class PartCounts:
    """The counts of one part's sessions (see the module's account of what adds)."""

    habit: list[list] = field(default_factory=list)  # [level, h2, h1, action, n]
    reach: list[list] = field(default_factory=list)
    sites: list[list] = field(default_factory=list)  # [after, failed, lookup, n]
    steps: int = 0
    args: list[list] = field(default_factory=list)  # [tool, arg or None or "", n]
    sources: list[list] = field(default_factory=list)  # [tool, arg, values, [[src, path, n]]]
    lists: list[list] = field(default_factory=list)
    constants: list[list] = field(default_factory=list)  # [tool, arg, value, n, distinct]
    # [tool, arg, values, shortest, longest, every distinct character, the folders of a path
    # argument's values]: stretto.model.shape
    shapes: list[list] = field(default_factory=list)

    def to_json(self) -> dict:
        return self.__dict__

    @classmethod
    def from_json(cls, data: dict) -> PartCounts:
        return cls(**data)


def levels(rows: list[list]) -> Levels:
    out: Levels = {}
    for level, h2, h1, action, n in rows:
        history = () if level == 0 else (h1,) if level == 1 else (h2, h1)
        counts = out.setdefault(history, {})
        counts[action] = counts.get(action, 0.0) + float(n)
    return out


def _tally(rows_by_part: list[list[list]]) -> list[dict]:
    """`sources` or `lists` of many parts summed: per (tool, arg), how many values it took
    and where they were found (docs/formats.md §3)."""
    values: dict[tuple[str, str], int] = {}
    found: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
    for rows in rows_by_part:
        for tool, arg, n, hits in rows:
            values[(tool, arg)] = values.get((tool, arg), 0) + int(n)
            tally = found.setdefault((tool, arg), {})
            for source, path, count in hits:
                tally[(source, path)] = tally.get((source, path), 0) + int(count)
    return [
        {
            "tool": tool,
            "arg": arg,
            "values": values[(tool, arg)],
            "found": [
                {"source": s, "path": p, "count": n}
                for (s, p), n in sorted(found[(tool, arg)].items())
            ],
        }
        for tool, arg in sorted(values)
    ]


@dataclass
class Summed:
    habit: Levels
    reach: Levels
    sites: dict[tuple[str, bool], dict[str, int]]
    steps: int
    args: dict[str, dict]
    empty: dict[str, int]
    sources: list[dict]
    lists: list[dict]
    constants: list[tuple[str, str, object, int]]  # one value throughout: (tool, arg, value, n)
    shapes: list[tuple[str, str, int, int, int, str, list[str]]]  # PartCounts.shapes, summed


def add_up(parts: list[PartCounts]) -> Summed:
    """The sums of the parts' counts."""
    sites: dict[tuple[str, bool], dict[str, int]] = {}
    args: dict[str, dict] = {}
    empty: dict[str, int] = {}
    single: dict[tuple[str, str], list] = {}
    for part in parts:
        for after, failed, lookup, n in part.sites:
            cell = sites.setdefault((after, bool(failed)), {})
            cell[lookup] = cell.get(lookup, 0) + int(n)
        for tool, arg, n in part.args:
            entry = args.setdefault(tool, {"calls": 0, "passed": {}})
            if arg is None:
                entry["calls"] += int(n)
            elif arg == "":
                empty[tool] = empty.get(tool, 0) + int(n)
            else:
                entry["passed"][arg] = entry["passed"].get(arg, 0) + int(n)
        for tool, arg, value, n, distinct in part.constants:
            seen = single.setdefault((tool, arg), [value, 0, True])
            seen[1] += int(n)
            seen[2] = seen[2] and int(distinct) == 1 and seen[0] == value
    shapes: dict[tuple[str, str], list] = {}
    for part in parts:
        for tool, arg, n, shortest, longest, chars, *folders in part.shapes:
            seen = shapes.setdefault((tool, arg), [0, shortest, longest, set(), set()])
            seen[0] += int(n)
            seen[1], seen[2] = min(seen[1], shortest), max(seen[2], longest)
            seen[3].update(chars)
            seen[4].update(*folders)
    return Summed(
        habit=levels([row for p in parts for row in p.habit]),
        reach=levels([row for p in parts for row in p.reach]),
        sites=sites,
        steps=sum(p.steps for p in parts),
        args=args,
        empty=empty,
        sources=_tally([p.sources for p in parts]),
        lists=_tally([p.lists for p in parts]),
        constants=[
            (tool, arg, json.loads(value), n)
            for (tool, arg), (value, n, one) in sorted(single.items())
            if one
        ],
        shapes=[
            (tool, arg, n, shortest, longest, "".join(sorted(chars)), sorted(folders))
            for (tool, arg), (n, shortest, longest, chars, folders) in sorted(shapes.items())
        ],
    )


class PartStore:
    """The parts' files under warehouse/counts/<domain>/<day>/: `<sessions>.<what>.json`,
    where <sessions> is the digest of the part's sessions and <what> names the file and the
    other inputs it depends on (`listing`, `counts-<kinds>`, `replays`)."""

    def __init__(self, layout: Layout) -> None:
        self.root = layout.warehouse / "counts"

    def folder(self, part: str) -> Path:
        return self.root / part

    def load(self, part: str, sessions: str, what: str):
        try:
            return json.loads((self.folder(part) / f"{sessions}.{what}.json").read_text())
        except (OSError, ValueError):
            return None

    def save(self, part: str, sessions: str, what: str, data: object) -> None:
        """Write the file whole; drop the part's files of other sessions (an older count of
        this part, never read again) and older versions of this one."""
        folder = self.folder(part)
        name = f"{sessions}.{what}.json"
        text = json.dumps(data, separators=(",", ":"))
        write_atomic(folder / name, lambda temp: _write_text(temp, text))
        kind = what.split("-")[0]
        for old in folder.glob("*.json"):
            if not old.name.startswith(sessions + ".") or (
                old.name != name and old.name.startswith(f"{sessions}.{kind}")
            ):
                old.unlink(missing_ok=True)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)
