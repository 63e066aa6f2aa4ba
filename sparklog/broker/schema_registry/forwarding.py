"""Forwarding a registry request to the broker that leads ``_schemas`` (the only one that
answers), on the request's own thread.

Invariants:
- The request goes as it came (method, path as sent, query, body, ``Authorization``), marked
  ``X-Sparklog-Forwarded`` so its receiver answers it or refuses it, never forwards it
  again; the leader's status and JSON body are relayed as they are.
- A leader that cannot be reached or answers something that is not JSON is Confluent's
  50003 (error while forwarding the request to the leader).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sparklog.broker.schema_registry import errors

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

Answer = tuple[int, Any]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    query_string: str
    forwarded: bool
    principal: str
    client_host: str
    authorization: str

    @property
    def parts(self) -> tuple[str, str, dict[str, str], bytes]:
        return self.method, self.path, self.query, self.body


def forward(leader_url: str, request: Request, timeout_s: float) -> Answer:
    """The leader's answer to the same request (marked forwarded: it is not sent on)."""
    target = leader_url + request.path + (f"?{request.query_string}"
                                          if request.query_string else "")
    headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE, "X-Sparklog-Forwarded": "1"}
    if request.authorization:
        headers["Authorization"] = request.authorization
    sent = urllib.request.Request(target, data=request.body or None, method=request.method,
                                  headers=headers)
    try:
        with urllib.request.urlopen(sent, timeout=timeout_s) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return errors.RegistryError(50003, f"Error while forwarding the request to the "
                                               f"leader: HTTP {exc.code}").answer
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return errors.RegistryError(50003, f"Error while forwarding the request to the "
                                           f"leader: {exc}").answer
