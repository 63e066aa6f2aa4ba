"""Import kio, the protocol codec, without its hypothesis hook (imported first by the package).

When the hypothesis package is importable, kio imports it and registers strategies for its
types: about 0.2 s, more than the rest of kio. Spark starts a fresh Python process for a
streaming query's driver-side reader at every query start, so that cost lands on every
query of a user who happens to have hypothesis installed (and on every benchmark run).

Invariant: unless this process imported hypothesis already (a test run, which may want
kio's strategies), kio is imported as if hypothesis were absent; hypothesis itself stays
importable afterwards.
"""

from __future__ import annotations

import importlib
import sys


def import_kio() -> None:
    blocked = "hypothesis" not in sys.modules
    if blocked:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # "import" raises ImportError
    try:
        importlib.import_module("kio.static.primitive")  # imports the hook's module
    finally:
        if blocked:
            del sys.modules["hypothesis"]


import_kio()
