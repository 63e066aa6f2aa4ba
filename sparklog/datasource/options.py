"""Option parsing shared by the reader and the writer: Spark's Kafka option names.

Invariants:
- Option names are matched case-insensitively (Spark lower-cases them), values are strings.
- Every error is an ``OptionError`` whose message names the option and what is allowed; an
  unknown option also gets the nearest known name, in its documented spelling (Spark hands
  the data source its option names lower-cased, so an unknown one can only be quoted so).
- An option with a fixed set of values (``parse_choice``) refuses another value naming the
  option, the values allowed and the nearest one.
- ``kafka.*`` options are passed to the Kafka client with the prefix removed;
  ``kafka.bootstrap.servers`` (or plain ``bootstrap.servers``) is required.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence


class OptionError(ValueError):
    """A data source option is unknown, missing, conflicting or badly typed."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return raw.strip().lower() == "true"


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
                     "d": 86400.0}


def parse_duration_s(options: Mapping[str, str], name: str, default: str) -> float:
    """A duration option in Spark's form (``15m``, ``30s``, ``500ms``; a bare number is
    milliseconds), in seconds."""
    raw = _get(options, name) or default
    match = _DURATION.match(raw)
    if match is None:
        raise OptionError(f"option {name} must be a duration like 15m, 30s or 500ms (units: "
                          f"us, ms, s, m, min, h, d), got {raw!r}")
    return int(match[1]) * _DURATION_UNITS_S[(match[2] or "ms").lower()]


def parse_int(options: Mapping[str, str], name: str, default: int | None,
              minimum: int | None = None) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {value}")
    return value


def parse_choice(options: Mapping[str, str], name: str, choices: Sequence[str],
                 default: str) -> str:
    """One of ``choices`` (matched case-insensitively, returned as spelled there); a wrong
    value is refused naming the option, the allowed values and the nearest one."""
    raw = _get(options, name)
    if raw is None:
        return default
    spelled = {choice.lower(): choice for choice in choices}
    word = raw.strip().lower()
    if word in spelled:
        return spelled[word]
    near = difflib.get_close_matches(word, list(spelled), n=1)
    hint = f" (did you mean {spelled[near[0]]!r}?)" if near else ""
    raise OptionError(f"option {name} must be one of {', '.join(choices)}, got {raw!r}{hint}")


def get_option(options: Mapping[str, str], name: str) -> str | None:
    return _get(options, name)


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options without the prefix; the bootstrap servers are required."""
    params = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    plain = _get(options, "bootstrap.servers")
    if "bootstrap.servers" not in params and plain:
        params["bootstrap.servers"] = plain
    if not params.get("bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required (HOST:PORT[,HOST:PORT])")
    return params


def check_known(options: Mapping[str, str], known: set[str], what: str) -> None:
    """Refuse options that are neither ``kafka.*`` nor in ``known`` (case-insensitive)."""
    allowed = {k.lower() for k in known} | {"path", "bootstrap.servers"}
    spelled = {k.lower(): k for k in known}
    for key in options:
        lowered = key.lower()
        if lowered.startswith("kafka.") or lowered in allowed:
            continue
        near = difflib.get_close_matches(lowered, list(spelled), n=1)
        hint = f" (did you mean {spelled[near[0]]!r}?)" if near else ""
        raise OptionError(
            f"unknown {what} option {key!r}{hint}; allowed: kafka.*, " + ", ".join(sorted(known))
        )
