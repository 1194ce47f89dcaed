"""A job's artifact shown in the page: a Markdown report rendered to HTML (a small subset:
headings, pipe tables, lists, code blocks, paragraphs, `code`, **bold**), every character of
the file escaped first so no HTML of its own ever reaches the page; a Parquet table's first
rows."""

from __future__ import annotations

import html
import re
from pathlib import Path

PREVIEW_ROWS = 50
MARKDOWN_LIMIT = 2_000_000  # characters of a report rendered; past it, the file as a link only
CELL_LIMIT = 200  # characters of a Parquet cell shown


class NoPreview(ValueError):
    """An artifact the page cannot preview (not Markdown or Parquet, too large, unreadable)."""


def preview(path: Path) -> dict:
    """`{"kind": "markdown", "html"}` or `{"kind": "table", "columns", "rows", "rows_total"}`."""
    if path.suffix == ".md":
        text = path.read_text(errors="replace")
        if len(text) > MARKDOWN_LIMIT:
            raise NoPreview(f"{path.name}: too large to render ({len(text):,} characters)")
        return {"kind": "markdown", "html": markdown_html(text)}
    if path.suffix == ".parquet":
        return parquet_rows(path)
    raise NoPreview(f"{path.name}: only Markdown (.md) and Parquet (.parquet) are previewed")


def parquet_rows(path: Path, limit: int = PREVIEW_ROWS) -> dict:
    """The first `limit` rows of a Parquet file, each value as text (cut to CELL_LIMIT)."""
    # pyarrow serves this one rarely used view: the console does not load it otherwise
    import pyarrow.parquet as pq

    try:
        source = pq.ParquetFile(path)
        rows_total = source.metadata.num_rows
        batch = next(source.iter_batches(batch_size=limit), None)
    except Exception as exc:  # pyarrow's errors have no common base: an unreadable table
        raise NoPreview(f"{path.name}: not a readable Parquet file ({exc})") from None
    columns = source.schema_arrow.names
    rows = [] if batch is None else batch.to_pylist()
    return {
        "kind": "table",
        "columns": columns,
        "rows": [[_cell(row.get(c)) for c in columns] for row in rows],
        "rows_total": rows_total,
    }


def _cell(value) -> str | float | int | bool | None:
    if value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    return text if len(text) <= CELL_LIMIT else text[: CELL_LIMIT - 1] + "…"


# --- Markdown ---------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _inline(text: str) -> str:
    """Escape, then `code` and **bold** (inside code nothing else is read)."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if len(part) > 1 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            escaped = html.escape(part)
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped))
    return "".join(out)


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def markdown_html(text: str) -> str:
    """The report as HTML: the subset stretto's reports use, everything else as text."""
    lines = text.splitlines()
    out: list[str] = []
    paragraph: list[str] = []

    def close_paragraph() -> None:
        if paragraph:
            out.append(f"<p>{'<br>'.join(_inline(p) for p in paragraph)}</p>")
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            close_paragraph()
            end = i + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(lines[i + 1 : end]))}</code></pre>")
            i = end + 1
            continue
        if not line.strip():
            close_paragraph()
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            close_paragraph()
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _RULE.match(lines[i + 1]):
            close_paragraph()
            head = "".join(f'<th scope="col">{_inline(c)}</th>' for c in _cells(line))
            i += 2
            body = []
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                body.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(lines[i])))
                i += 1
            out.append(
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            )
            continue
        for pattern, tag in ((_BULLET, "ul"), (_NUMBERED, "ol")):
            if pattern.match(line):
                close_paragraph()
                items = []
                while i < len(lines) and (item := pattern.match(lines[i])):
                    items.append(f"<li>{_inline(item.group(1))}</li>")
                    i += 1
                out.append(f"<{tag}>{''.join(items)}</{tag}>")
                break
        else:
            paragraph.append(line)
            i += 1
    close_paragraph()
    return "\n".join(out)
