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
from worlddiagram import draw, parse


class WorldDiagram(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        text = draw(parse("\n".join(self.content)))
        return [nodes.literal_block(text, text)]


def setup(app):
    app.add_directive("world-diagram", WorldDiagram)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
