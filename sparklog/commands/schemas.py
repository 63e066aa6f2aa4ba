"""``sparklog schemas``: a schema registry's subjects, versions, schemas and compatibility
levels over Confluent's REST API (the broker's own, ``schema.registry.listeners``, or any
Confluent-compatible registry).

    sparklog schemas register --subject S --schema-file F [--schema-type AVRO|JSON|PROTOBUF]
        [--reference NAME=SUBJECT:VERSION ...]
    sparklog schemas list [--subject S] [--deleted]
    sparklog schemas get (--subject S [--version V|latest] | --id N)
    sparklog schemas check --subject S --schema-file F [--version V|latest] [--schema-type T]
    sparklog schemas delete --subject S [--version V] [--permanent]
    sparklog schemas config [--subject S] [--level LEVEL | --delete]
  every one with [--schema-registry-url URL] (default http://127.0.0.1:8081)

Invariants:
- stdout is what a script reads: ``register`` prints the schema's id, ``list`` one subject
  or version per line, ``get`` the registered version (or schema) as one line of JSON,
  ``check`` ``compatible`` or ``incompatible`` and then each reason on its own line, ``delete``
  the versions deleted, ``config`` the level.
- Exit codes: 0 success, 1 a refusal of the registry (one stderr line with its
  ``error_code`` and message; ``check`` of an incompatible schema too), 2 a usage error
  (a missing or unreadable schema file, ``--id`` with ``--subject``).
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sparklog.commands._client import FAILED, USAGE, ToolError, tool

NAME = "schemas"
DEFAULT_URL = "http://127.0.0.1:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30.0
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(NAME, help="a schema registry's subjects and schemas",
                                   description=__doc__.split("Invariants:")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--schema-registry-url", default=DEFAULT_URL, metavar="URL",
                        help=f"the registry (default {DEFAULT_URL})")
    for name, body, text in (("register", _register, "register a schema under a subject"),
                             ("list", _list, "list subjects, or a subject's versions"),
                             ("get", _get, "show a version or a schema by id"),
                             ("check", _check, "test a schema's compatibility"),
                             ("delete", _delete, "delete a subject or a version"),
                             ("config", _config, "show or set a compatibility level")):
        sub = actions.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(func=tool(f"{NAME} {name}", body))
        if name in ("register", "check"):
            sub.add_argument("--schema-file", type=Path, required=True, metavar="FILE")
            sub.add_argument("--schema-type", default="AVRO",
                             choices=("AVRO", "JSON", "PROTOBUF"), type=str.upper)
            sub.add_argument("--reference", action="append", default=[],
                             metavar="NAME=SUBJECT:VERSION", help="a schema it references")
        sub.add_argument("--subject", required=name in ("register", "check", "delete"))
        if name in ("get", "check", "delete"):
            sub.add_argument("--version", help="a version number or latest")
        if name == "get":
            sub.add_argument("--id", type=int, help="the schema with this id")
        if name in ("list", "get"):
            sub.add_argument("--deleted", action="store_true",
                             help="include soft-deleted subjects and versions")
        if name == "delete":
            sub.add_argument("--permanent", action="store_true",
                             help="hard delete (after a soft delete)")
        if name == "config":
            sub.add_argument("--level", choices=LEVELS, type=str.upper)
            sub.add_argument("--delete", action="store_true",
                             help="remove the subject's level (or reset the global one)")


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(args.schema_registry_url.rstrip("/") + path, data=data,
                                     method=method, headers={"Content-Type": CONTENT_TYPE,
                                                             "Accept": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read())
            message = f"error {error['error_code']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code} {exc.reason}"
        raise ToolError(message, FAILED) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ToolError(f"cannot reach {args.schema_registry_url}: {exc}", FAILED) from None


def _subject(args: argparse.Namespace) -> str:
    return quote(args.subject, safe="")


def _schema_body(args: argparse.Namespace) -> dict[str, Any]:
    try:
        text = args.schema_file.read_text()
    except OSError as exc:
        raise ToolError(f"cannot read {args.schema_file}: {exc.strerror}", USAGE) from None
    body: dict[str, Any] = {"schema": text, "schemaType": args.schema_type}
    references = []
    for item in args.reference:
        name, _, where = item.partition("=")
        subject, _, version = where.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise ToolError(f"--reference {item!r}: expected NAME=SUBJECT:VERSION", USAGE)
        references.append({"name": name, "subject": subject, "version": int(version)})
    if references:
        body["references"] = references
    return body


def _register(args: argparse.Namespace) -> int:
    answer = _call(args, "POST", f"/subjects/{_subject(args)}/versions", _schema_body(args))
    print(answer["id"])
    return 0


def _deleted(args: argparse.Namespace) -> str:
    return "?deleted=true" if args.deleted else ""


def _list(args: argparse.Namespace) -> int:
    path = "/subjects" if args.subject is None else f"/subjects/{_subject(args)}/versions"
    for item in _call(args, "GET", path + _deleted(args)):
        print(item)
    return 0


def _get(args: argparse.Namespace) -> int:
    if args.id is not None:
        if args.subject is not None:
            raise ToolError("give --id or --subject, not both", USAGE)
        answer = _call(args, "GET", f"/schemas/ids/{args.id}")
    elif args.subject is None:
        raise ToolError("give --subject or --id", USAGE)
    else:
        answer = _call(args, "GET", f"/subjects/{_subject(args)}/versions/"
                                    f"{quote(args.version or 'latest')}{_deleted(args)}")
    print(json.dumps(answer))
    return 0


def _check(args: argparse.Namespace) -> int:
    versions = "versions" if args.version is None else f"versions/{quote(args.version)}"
    answer = _call(args, "POST", f"/compatibility/subjects/{_subject(args)}/{versions}"
                                 "?verbose=true", _schema_body(args))
    print("compatible" if answer["is_compatible"] else "incompatible")
    for message in answer.get("messages") or ():
        print(message)
    return 0 if answer["is_compatible"] else FAILED


def _delete(args: argparse.Namespace) -> int:
    path = f"/subjects/{_subject(args)}"
    if args.version is not None:
        path += f"/versions/{quote(args.version)}"
    answer = _call(args, "DELETE", path + ("?permanent=true" if args.permanent else ""))
    for version in answer if isinstance(answer, list) else [answer]:
        print(version)
    return 0


def _config(args: argparse.Namespace) -> int:
    path = "/config" if args.subject is None else f"/config/{_subject(args)}"
    if args.level is not None and args.delete:
        raise ToolError("give --level or --delete, not both", USAGE)
    if args.level is not None:
        answer = _call(args, "PUT", path, {"compatibility": args.level})
        print(answer["compatibility"])
    elif args.delete:
        print(_call(args, "DELETE", path)["compatibilityLevel"])
    else:
        print(_call(args, "GET", path)["compatibilityLevel"])
    return 0
