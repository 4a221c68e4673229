"""Draw the benchmarks' figure, ``docs/benchmarks.png``, from the benchmarks' own output.

The first panel is the whole-program benchmark, the JSON that ``tools/bench_workload.py --json``
writes: host instructions per iteration of each variant relative to typed pyopencl, one
horizontal bar each on a log scale, labelled with the ratio, the instructions and the wall-time
ratio (wall time alone where the run measured no instructions, as ``--quick`` does). The
second panel, drawn only when ``--gpu`` names one, is the GPU launch rows: host time per launch
relative to a raw ``cuLaunchKernel``, from a JSON of figures that docs/benchmarks.md's CUDA
section reports (``docs/benchmarks_gpu.json`` names their run).

Run: ``python tools/plot_benchmarks.py docs/benchmarks_workload.json --gpu
docs/benchmarks_gpu.json`` (writes ``docs/benchmarks.png``; ``--out`` elsewhere). Needs
matplotlib (``pip install matplotlib``), which specializer itself does not.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a file, no display
import matplotlib.pyplot as plt

_CHECKOUT = Path(__file__).resolve().parent.parent
OURS, BASE, OTHER = "#1f6fb4", "#4d4d4d", "#c8c8c8"  # specializer, the baseline, the rest
WIDTH_IN, DPI = 10, 100  # 1,000 pixels wide: README width


def _color(key: str, baseline: str) -> str:
    return OURS if key in ("launch", "hostkernel") else BASE if key == baseline else OTHER


def _bars(ax, names, ratios, labels, colors, scale: str) -> None:
    """One horizontal bar per row, top to bottom, a label at its end (inside a long bar), a
    line at 1.0."""
    ys = range(len(names))[::-1]
    left = 0.25 if scale == "log" else 0
    right = max(ratios) * (5 if scale == "log" else 1.6)
    ax.barh(ys, [r - left for r in ratios], left=left, color=colors, height=0.62)
    ax.set_xscale(scale)
    ax.set_xlim(left, right)
    ax.set_yticks(list(ys), names)
    ax.axvline(1, color=BASE, lw=0.8, ls="--")
    for y, r, label in zip(ys, ratios, labels):
        reach = math.log(r / left) / math.log(right / left) if scale == "log" else r / right
        if reach > 0.5:  # no room after the bar: the label inside it, at its end
            x, ha = (r / 1.06 if scale == "log" else r - 0.04), "right"
        else:
            x, ha = (r * 1.06 if scale == "log" else r + 0.04), "left"
        ax.text(x, y, label, va="center", ha=ha, fontsize=9.5)
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(axis="y", length=0)


def _workload_panel(ax, w: dict) -> str:
    """The whole-program rows; returns the caption's line for them."""
    rows = w["rows"]
    insns = all(r["insns"] is not None for r in rows)
    ratios = [r["insns_ratio"] if insns else r["wall_ratio"] for r in rows]
    if insns:
        labels = [
            f"{r['insns_ratio']:.2f}x  ({r['insns']:,.0f} instructions; "
            f"wall {r['wall_ratio']:.2f}x)"
            for r in rows
        ]
    else:
        labels = [f"{r['wall_ratio']:.2f}x  ({r['wall_us']:,.1f} µs)" for r in rows]
    colors = [_color(r["key"], w["baseline"]) for r in rows]
    _bars(ax, [r["name"] for r in rows], ratios, labels, colors, "log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
    what = "host-thread instructions" if insns else "wall time"
    ax.set_title(
        f"An iterative program, {w['iterations']:,} Jacobi iterations of 3 small kernels on "
        f"PoCL:\n{what} per iteration, relative to typed pyopencl (lower is better)",
        loc="left",
        fontsize=11.5,
    )
    how = (
        "callgrind, main thread only (PoCL's workers, which run the kernels, left out)"
        if insns
        else "no instruction counts in this run"
    )
    return (
        f"`{w['command']}`, {w['date']}: {w['python']}, pyopencl {w['pyopencl']}, "
        f"{w['device']}, {w['machine']}; {how}; less an empty loop; wall: median of "
        f"{w['rounds']} rounds."
    )


def _gpu_panel(ax, g: dict) -> str:
    rows = g["rows"]
    base = next(r["ns"] for r in rows if r["key"] == g["baseline"])
    ratios = [r["ns"] / base for r in rows]
    labels = [f"{x:.2f}x  ({r['ns']:,} ns)" for x, r in zip(ratios, rows)]
    colors = [_color(r["key"], g["baseline"]) for r in rows]
    _bars(ax, [r["name"] for r in rows], ratios, labels, colors, "linear")
    ax.set_title(
        "A CUDA launch on a GPU: host time per launch,\nrelative to raw cuLaunchKernel "
        "(lower is better)",
        loc="left",
        fontsize=11.5,
    )
    return f"{g['machine']}, {g['date']}; {g['what']} ({g['source']})."


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", help="the JSON of tools/bench_workload.py --json")
    p.add_argument("--gpu", metavar="JSON", help="the GPU launch rows (docs/benchmarks_gpu.json)")
    p.add_argument("--out", default=str(_CHECKOUT / "docs" / "benchmarks.png"))
    args = p.parse_args()
    workload = json.loads(Path(args.workload).read_text(encoding="utf-8"))
    gpu = json.loads(Path(args.gpu).read_text(encoding="utf-8")) if args.gpu else None

    plt.rcParams.update({"font.size": 10.5, "font.family": "DejaVu Sans"})
    fig, axes = plt.subplots(
        2 if gpu else 1,
        1,
        figsize=(WIDTH_IN, 7.4 if gpu else 3.9),
        gridspec_kw={"height_ratios": [5, 6]} if gpu else None,
        squeeze=False,
    )
    caption = _workload_panel(axes[0][0], workload)
    if gpu:
        caption = f"Top: {caption}\nBottom: {_gpu_panel(axes[1][0], gpu)}"
    fig.text(0.01, 0.005, caption, fontsize=7.5, color="#444444", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07 if gpu else 0.13, 1, 1), h_pad=2.0)
    fig.savefig(args.out, dpi=DPI, metadata={"Software": None})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
