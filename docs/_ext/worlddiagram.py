"""The world diagram's text, computed from the ranges given (see worlds.py, the directive
that draws it): plain Python, so the tests check it without Sphinx installed."""

from __future__ import annotations


def draw(rows: list[tuple[str, int, int | None]]) -> str:
    """The diagram: one column per world, a bar over the worlds each definition is valid in."""
    last = max(max(lo, hi or lo) for _, lo, hi in rows) + 1
    width = max(len(label) for label, _, _ in rows)
    head = " " * width + " | " + "".join(f"{w:<4}" for w in range(1, last + 1))
    lines = [head.rstrip(), "-" * len(head.rstrip())]
    for label, lo, hi in rows:
        cells = []
        for w in range(1, last + 1):
            inside = lo <= w and (hi is None or w <= hi)
            cells.append("====" if inside else "    ")
        bar = "".join(cells).rstrip()
        if hi is None:
            bar += ">"
        lines.append(f"{label:<{width}} | {bar}")
    lines.append("")
    lines.append(f"{'world':<{width}} | each definition moves the latest world up by one")
    return "\n".join(lines)


def parse(text: str) -> list[tuple[str, int, int | None]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        label, lo, hi = (p.strip() for p in line.split("|"))
        rows.append((label, int(lo), None if hi == "*" else int(hi)))
    return rows
