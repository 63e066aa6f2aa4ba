"""Reading Java ``.properties`` files: the broker's ``server.properties``, the jobs'
``jobs.properties`` and Spark's ``spark-defaults.conf`` format (``spark-local.conf``).

Invariants:
- A line is ``key=value``, ``key: value`` or ``key value``: the key ends at the first ``=``,
  ``:`` or whitespace, and one ``=`` or ``:`` (with whitespace around it) may separate it
  from the value, as in Java. Keys and values are stripped; the value is taken as written
  (no escape sequences, no continuation lines), so a regex such as ``events\\..*`` stays.
- Blank lines and lines starting with ``#`` or ``!`` are comments. A later key wins.
- A line with no value separator (a lone key) or an empty key raises ``PropertiesError``
  naming the file and the line number.
- Nothing of sparklog is imported here (a bottom-layer module).
"""

from __future__ import annotations

import re
from importlib.resources.abc import Traversable
from pathlib import Path

_LINE = re.compile(r"(?P<key>[^=:\s]+)(?:\s*[=:]\s*|\s+)(?P<value>.*)")


class PropertiesError(ValueError):
    """A line that is not a property; the message names the file and the line."""


def parse_properties(text: str, source: str) -> dict[str, str]:
    """The properties in ``text``, read from ``source`` (named in errors)."""
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise PropertiesError(f"{source}:{number}: expected key=value, key: value or "
                                  f"key value, got {line!r}")
        properties[match["key"]] = match["value"].strip()
    return properties


def read_properties(path: Path | Traversable) -> dict[str, str]:
    """The properties of a file (a path, or a resource of an installed package)."""
    return parse_properties(path.read_text(encoding="utf-8"), str(path))
