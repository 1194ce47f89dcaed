"""What the report assets share: a domain's served flow and the folders of sessions they read
by default, and skipping with a reason when a home has none yet."""

from pathlib import Path

from warehouse.layout import Layout


def served_flow(layout: Layout, domain: str, given: str | None) -> Path:
    return Path(given) if given else layout.flow(domain)


def missing(needs: dict[str, Path]) -> str | None:
    """Why the asset is skipped, when a file or folder it needs is not there."""
    for what, path in needs.items():
        if not path.exists():
            return f"no {what} at {path} yet"
    return None
