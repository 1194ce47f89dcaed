"""The reports' plots: real PNGs drawn by matplotlib, which is imported only when drawing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stretto.offline.reports.plots import reliability_diagram, threshold_sweep


def _ink(path: Path) -> tuple[tuple[int, ...], float]:
    """The image's shape and its share of non-white pixels."""
    from matplotlib.image import imread

    image = imread(path)
    dark = (image[:, :, :3].min(axis=2) < 0.9).mean()
    return image.shape, float(dark)


def test_a_reliability_diagram_is_drawn(tmp_path: Path) -> None:
    rows = [
        {"from": 0.2, "to": 0.3, "count": 4, "mean_score": 0.25, "used": 0.5},
        {"from": 0.8, "to": 0.9, "count": 9, "mean_score": 0.85, "used": 0.75},
    ]
    path = reliability_diagram(rows, tmp_path / "r.png", title="test")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    shape, ink = _ink(path)
    assert shape[:2] == (520, 520) and ink > 0.02  # axes, labels, the diagonal, the points
    empty = reliability_diagram([], tmp_path / "e.png", title="nothing")
    assert _ink(empty)[1] > 0.01  # still the axes and the diagonal


def test_a_threshold_sweep_with_its_front(tmp_path: Path) -> None:
    sweep = [
        {"threshold": t, "turns_saved": 10 - 10 * t, "detours": 6 - 6 * t, "utility": 4 - t}
        for t in (0.1, 0.3, 0.5, 2.0)
    ]
    points = [{"turns_saved": s["turns_saved"], "detours": s["detours"]} for s in sweep]
    path = threshold_sweep(
        {"a": sweep},
        tmp_path / "s.png",
        title="test",
        points=points,
        front=points,
        marks={"chosen": points[1]},
    )
    shape, ink = _ink(path)
    assert shape[:2] == (440, 1500) and ink > 0.02
    assert threshold_sweep({}, tmp_path / "n.png", title="none").exists()


def test_importing_the_plots_does_not_import_matplotlib() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, stretto.offline.reports.plots, stretto.offline.reports.audit, "
            "stretto.offline.reports.replay; "
            "sys.exit('matplotlib' in sys.modules or 'polars' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
