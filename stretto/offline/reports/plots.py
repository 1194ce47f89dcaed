"""The reports' plots, drawn with matplotlib (Agg: no display) and written as PNG.

- `reliability_diagram`: a calibration table (stretto.offline.reports.reliability.reliability) as
  how often the outcome was yes against the mean score per bin, with the diagonal (perfect
  calibration), the bins' edges and how many scores fell in each.
- `threshold_sweep`: turns saved, detours and utility against the threshold, one line per
  sweep, beside a Pareto front of turns saved against detours.
- `learning_curve`: measures against the number of sessions a flow was learned from, the
  mean of the draws at each size as a line, each draw as a dot.

matplotlib is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from stretto.home import write_private

OFF_AT = 1.05  # where a threshold above 1 (the site switched off) is drawn


def _pyplot():
    import matplotlib  # heavy: only a plot needs matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # once its backend is chosen: files, no display

    return plt


def _save(fig, path: str | Path, title: str | None = None) -> Path:
    """Lay the figure out (under `title`, if given) and write it as a PNG."""
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    return write_private(Path(path), lambda temp: fig.savefig(temp, format="png"))


def reliability_diagram(
    rows: Sequence[dict], path: str | Path, *, title: str, what: str = "used"
) -> Path:
    """`rows`: {from, to, count, mean_score, used} per non-empty bin; `what` names the yes
    outcome on the y axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 5.2), dpi=100)
    try:
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect")
        for number, row in enumerate(rows):  # the non-empty bins, shaded in turn
            shade = "#e3eaf6" if number % 2 == 0 else "#f1f4fa"
            ax.axvspan(row["from"], min(row["to"], 1.0), color=shade, zorder=0)
        if rows:
            x = [r["mean_score"] for r in rows]
            y = [r["used"] for r in rows]
            ax.plot(x, y, marker="o", color="#3c6ec8", label="observed")
            for r in rows:
                ax.annotate(
                    f"{r['count']}",
                    (r["mean_score"], r["used"]),
                    textcoords="offset points",
                    xytext=(0, 7),
                    ha="center",
                    fontsize=8,
                )
        else:
            ax.text(0.5, 0.5, "nothing scored", ha="center", va="center", color="grey")
        total = sum(r["count"] for r in rows)
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1.05),
            xlabel="mean score in the bin (shaded: the bins that hold scores)",
            ylabel=f"share {what}",
            title=f"{title}\n{total} scores; numbers: scores per bin",
        )
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
        out = _save(fig, path)
    finally:
        plt.close(fig)
    return out


def threshold_sweep(
    sweeps: Mapping[str, Sequence[dict]],
    path: str | Path,
    *,
    title: str,
    points: Sequence[dict] = (),
    front: Sequence[dict] = (),
    marks: Mapping[str, dict] | None = None,
) -> Path:
    """Left: per sweep (name -> rows {threshold, turns_saved, detours, utility}, thresholds
    above 1 drawn as "off"), utility against the threshold. Middle: turns saved and detours
    against the threshold. Right, when `points` are given (rows {turns_saved, detours}):
    every setting scored, its Pareto front as a line, and `marks` (name -> a row) labelled."""
    plt = _pyplot()
    panels = 3 if points else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.0 * panels, 4.4), dpi=100)
    try:
        utility_ax, counts_ax = axes[0], axes[1]
        for name, rows in sweeps.items():
            ordered = sorted(rows, key=lambda r: r["threshold"])
            x = [min(r["threshold"], OFF_AT) for r in ordered]
            (line,) = utility_ax.plot(x, [r["utility"] for r in ordered], marker=".", label=name)
            color = line.get_color()
            counts_ax.plot(x, [r["turns_saved"] for r in ordered], color=color, marker=".")
            counts_ax.plot(
                x, [r["detours"] for r in ordered], color=color, marker="x", linestyle=":"
            )
        for ax, label in ((utility_ax, "utility"), (counts_ax, "count")):
            ax.set(xlabel="threshold θ (1.05: off)", ylabel=label)
            ax.grid(alpha=0.3)
        utility_ax.set_title("utility against θ")
        counts_ax.set_title("turns saved (solid) and detours (dotted)")
        if sweeps:
            utility_ax.legend(fontsize=7, loc="best")
        if points:
            ax = axes[2]
            ax.scatter(
                [p["detours"] for p in points],
                [p["turns_saved"] for p in points],
                s=10,
                color="#bbbbbb",
                label="settings scored",
            )
            ordered = sorted(front, key=lambda p: p["detours"])
            ax.plot(
                [p["detours"] for p in ordered],
                [p["turns_saved"] for p in ordered],
                marker="o",
                color="#c8503c",
                label="Pareto front",
            )
            for name, p in (marks or {}).items():
                ax.annotate(
                    name,
                    (p["detours"], p["turns_saved"]),
                    textcoords="offset points",
                    xytext=(5, -12),
                    fontsize=8,
                )
                ax.scatter([p["detours"]], [p["turns_saved"]], s=30, color="black", zorder=3)
            ax.set(xlabel="detours", ylabel="turns saved", title="turns saved against detours")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
        out = _save(fig, path, title)
    finally:
        plt.close(fig)
    return out


def learning_curve(
    curves: Mapping[str, Sequence[dict]],
    path: str | Path,
    *,
    title: str,
    measures: Sequence[tuple[str, str]] = (("saved %", "turns saved %"), ("detours/ep", "detours")),
) -> Path:
    """One panel per measure (key, label): per curve (name -> rows {n, <key>, ...}, several
    rows per n for several draws), the mean at each n as a line and each draw as a dot,
    against the number of sessions learned from (log scale)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(measures), figsize=(5.0 * len(measures), 4.2), dpi=100)
    try:
        for ax, (key, label) in zip(axes, measures, strict=True):
            for name, rows in curves.items():
                sizes = sorted({r["n"] for r in rows})
                means = [
                    sum(r[key] for r in rows if r["n"] == n) / sum(r["n"] == n for r in rows)
                    for n in sizes
                ]
                (line,) = ax.plot(sizes, means, marker="o", label=name)
                ax.scatter(
                    [r["n"] for r in rows],
                    [r[key] for r in rows],
                    s=12,
                    alpha=0.4,
                    color=line.get_color(),
                )
            ax.set_xscale("log")
            ax.set(xlabel="successful sessions learned from", ylabel=label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="best")
        out = _save(fig, path, title)
    finally:
        plt.close(fig)
    return out
