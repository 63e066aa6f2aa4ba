"""sparklog's schema registry client, over Confluent's REST API: a schema by id, a subject's
version or latest version, and a writer's registration and lookup.

Invariants:
- Plain ``urllib`` (no client library): the sink resolves its schema in the fresh Python
  process Spark starts for each micro-batch, and a read task fetches writer schemas in its
  worker, where confluent-kafka's ``SchemaRegistryClient`` alone takes 1.7 s to import
  (httpx, authlib).
- Settings in confluent-kafka's names (``from_settings``: ``url``, ``basic.auth.user.info``
  as ``user:password`` for HTTP basic auth, ``ssl.ca.location``,
  ``ssl.certificate.location``, ``ssl.key.location``).
- A registry error is a ``RegistryError`` carrying Confluent's ``error_code`` and the
  registry's own message (e.g. why a schema is incompatible); an unreachable registry is one
  too, naming the URL, and so are references that cannot be resolved.
- ``standalone`` is the text every reader of a schema takes: the schema with its
  references' types written in (``references``), each referenced version asked once.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.schemas.references import SchemaReference, SchemaReferenceError, standalone

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
    references: tuple[SchemaReference, ...] = ()

    @classmethod
    def of(cls, answer: Any, schema_id: int | None = None) -> RegisteredSchema:
        """From the registry's JSON answer (AVRO when it names no type, as Confluent's); an
        answer without a schema's fields is a ``RegistryError``."""
        try:
            schema, schema_type = answer["schema"], answer.get("schemaType", "AVRO")
            version = answer.get("version")
            if not isinstance(schema, str) or not isinstance(schema_type, str) or not (
                    version is None or isinstance(version, int)):
                raise TypeError("schema, schemaType or version of the wrong type")
            references = tuple(map(SchemaReference.of, answer.get("references") or ()))
            return cls(int(answer["id"]) if schema_id is None else schema_id, schema,
                       schema_type, version, references)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
            raise RegistryError(f"the schema registry's answer is not a schema: {error}"
                                ) from None


def parse_answer(url: str, raw: bytes) -> Any:
    """A registry's answer body as JSON; a ``RegistryError`` when it is not JSON or is
    nested past what the parser follows."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise RegistryError(f"schema registry {url} answered what is not JSON: "
                            f"{str(error)[:200]}") from None


class SchemaRegistry:
    def __init__(self, url: str, user_info: str | None = None,
                 context: ssl.SSLContext | None = None) -> None:
        self.url = url.rstrip("/")
        self._context = context
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
            with urllib.request.urlopen(request, timeout=TIMEOUT_S,
                                        context=self._context) as answer:
                raw = answer.read()
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
        return parse_answer(self.url, raw)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> SchemaRegistry:
        """A client of confluent-kafka's settings (see the module's docstring)."""
        context = None
        ca, certificate = settings.get("ssl.ca.location"), settings.get("ssl.certificate.location")
        if ca or certificate:
            try:
                context = ssl.create_default_context(cafile=ca)
                if certificate:
                    context.load_cert_chain(certificate, settings.get("ssl.key.location"))
            except (OSError, ssl.SSLError) as error:
                raise RegistryError(f"schema registry {settings['url']}: its TLS settings: "
                                    f"{error}") from None
        return cls(settings["url"], settings.get("basic.auth.user.info"), context)

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
        return RegisteredSchema.of(answer)

    def latest(self, subject: str) -> RegisteredSchema:
        return self.version(subject, None)

    def version(self, subject: str, version: int | None) -> RegisteredSchema:
        """A version of ``subject`` (None: its latest)."""
        return RegisteredSchema.of(self._call("GET", self._subject(subject) + "/versions/"
                                              + ("latest" if version is None else str(version))))

    def schema(self, schema_id: int) -> RegisteredSchema:
        return RegisteredSchema.of(self._call("GET", f"/schemas/ids/{schema_id}"), schema_id)

    def standalone(self, schema: RegisteredSchema) -> str:
        """``schema``'s text with its references' types written in."""
        def fetch(ref: SchemaReference) -> tuple[str, str, tuple[SchemaReference, ...]]:
            try:
                found = self.version(ref.subject, ref.version)
            except RegistryError as error:
                raise RegistryError(f"its reference {ref.name} (version {ref.version} of "
                                    f"subject {ref.subject!r}): {error}",
                                    error.error_code) from None
            return found.schema_type, found.schema, found.references

        try:
            return standalone(schema.schema_type, schema.schema, schema.references, fetch)
        except SchemaReferenceError as error:
            raise RegistryError(str(error)) from None
