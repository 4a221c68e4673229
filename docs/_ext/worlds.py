"""A Sphinx directive that draws which method each world sees, as a text diagram the build
computes from the ranges given (so the picture cannot disagree with its own numbers).

    ```{world-diagram}
    scale(x: Array[floating]) | 2 | *
    scale(x: Array[float32])  | 3 | *
    offset (adds 10)          | 4 | 5
    offset (adds 100)         | 6 | *
    ```

Each line: a definition, the first world it is visible in, and the last ("*": still valid).
"""

from __future__ import annotations

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


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


class WorldDiagram(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        text = draw(parse("\n".join(self.content)))
        return [nodes.literal_block(text, text)]


def setup(app):
    app.add_directive("world-diagram", WorldDiagram)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
