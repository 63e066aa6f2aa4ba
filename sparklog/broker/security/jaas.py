"""Reading a JAAS login module line as Kafka's ``sasl.jaas.config`` holds it.

``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";``

Invariants:
- Options are ``name=value`` pairs after the control flag; values are double-quoted (with
  backslash escapes) or bare words; the trailing ``;`` is optional.
- A malformed line raises ``InvalidConfigError`` naming the setting, never its text (it
  holds passwords).
"""

from __future__ import annotations

import re

from sparklog.errors import InvalidConfigError

_HEAD = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"\b", re.IGNORECASE)
_OPTION = re.compile(r'\s*(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|'
                     r'(?P<bare>[^\s;"]+))')


def jaas_options(value: str, setting: str = "sasl.jaas.config") -> dict[str, str]:
    """The options of one login module line."""
    head = _HEAD.match(value)
    if head is None:
        raise InvalidConfigError(f"{setting}: expected '<LoginModule class> required "
                                 "key=\"value\" ...;'")
    options: dict[str, str] = {}
    position = head.end()
    rest = value.rstrip().removesuffix(";")
    while position < len(rest.rstrip()):
        match = _OPTION.match(rest, position)
        if match is None:
            raise InvalidConfigError(f"{setting}: cannot read the login module options "
                                     f"after character {position}")
        quoted = match["quoted"]
        options[match["key"]] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                                 else match["bare"])
        position = match.end()
    return options


def plain_users(value: str, setting: str = "sasl.jaas.config") -> dict[str, str]:
    """The ``user_<name>="<password>"`` entries of a PlainLoginModule line: name -> password."""
    return {key.removeprefix("user_"): password
            for key, password in jaas_options(value, setting).items() if key.startswith("user_")}
