"""The tables the tools print, laid out as Kafka's tools lay them out.

Invariant: left-aligned columns as wide as their widest cell, one space apart, trailing
spaces stripped; a value that does not exist (None) is printed ``-``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [list(header)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(" ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())
