"""The three schema registry calls a writer makes on the driver, over Confluent's REST API:
register a schema under a subject, look one up, read a subject's latest version.

Invariants:
- Plain ``urllib`` (no client library): a streaming sink resolves its schema in the fresh
  Python process Spark starts for each micro-batch, where confluent-kafka's
  ``SchemaRegistryClient`` alone takes 1.7 s to import (httpx, authlib).
- HTTP basic auth from Confluent's ``basic.auth.user.info`` form (``user:password``).
- A registry error is a ``RegistryError`` carrying Confluent's ``error_code`` and the
  registry's own message (e.g. why a schema is incompatible); an unreachable registry is one
  too, naming the URL.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 30.0
SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40403


class RegistryError(RuntimeError):
    def __init__(self, message: str, error_code: int = 0) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema: str
    schema_type: str
    """AVRO, JSON or PROTOBUF."""
    version: int | None = None


class SchemaRegistry:
    def __init__(self, url: str, user_info: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Content-Type": "application/vnd.schemaregistry.v1+json",
                         "Accept": "application/vnd.schemaregistry.v1+json"}
        if user_info:
            token = base64.b64encode(user_info.encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            try:
                detail = json.loads(error.read())
                code, message = int(detail["error_code"]), str(detail["message"])
            except (ValueError, KeyError, TypeError):
                code, message = error.code, f"HTTP {error.code} {error.reason}"
            raise RegistryError(f"{message} (error {code})", code) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryError(f"schema registry {self.url} is unreachable: {reason}") from None

    @staticmethod
    def _subject(subject: str) -> str:
        return "/subjects/" + urllib.parse.quote(subject, safe="")

    @staticmethod
    def _body(schema: str, schema_type: str) -> dict[str, str]:
        return {"schema": schema, **({"schemaType": schema_type}
                                     if schema_type != "AVRO" else {})}

    def register(self, subject: str, schema: str, schema_type: str) -> int:
        """The id of ``schema`` under ``subject``, registered if it is not yet."""
        answer = self._call("POST", self._subject(subject) + "/versions",
                            self._body(schema, schema_type))
        return int(answer["id"])

    def lookup(self, subject: str, schema: str, schema_type: str) -> RegisteredSchema | None:
        """``schema`` as registered under ``subject``; None when it is not."""
        try:
            answer = self._call("POST", self._subject(subject), self._body(schema, schema_type))
        except RegistryError as error:
            if error.error_code in (SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND):
                return None
            raise
        return RegisteredSchema(int(answer["id"]), answer["schema"],
                                answer.get("schemaType", "AVRO"), answer.get("version"))

    def latest(self, subject: str) -> RegisteredSchema:
        answer = self._call("GET", self._subject(subject) + "/versions/latest")
        return RegisteredSchema(int(answer["id"]), answer["schema"],
                                answer.get("schemaType", "AVRO"), answer.get("version"))
