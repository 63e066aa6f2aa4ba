"""``sparklog users``: the broker's SCRAM users, like ``kafka-configs.sh --entity-type users``.

    sparklog users add NAME [--password PW] [--mechanism M ...] [--iterations N]
    sparklog users delete NAME [--mechanism M ...]
    sparklog users list [NAME ...]

each with ``--bootstrap-server`` and the client settings every tool takes (``--command-config
FILE``, ``-X``): a SASL or TLS listener is reached with Kafka's client security settings.
Or, with ``--data-dir DIR`` instead, on a stopped broker's data directory (as Kafka's
``kafka-storage.sh format --add-scram``): how the first user of a broker whose listeners all
need a SCRAM login is made. Or, with ``--zookeeper CONNECT`` (a cluster's
``zookeeper.connect``, chroot included), in the cluster's ZooKeeper directly, as Kafka's
``kafka-configs.sh --zookeeper``: the first user of a cluster whose listeners all need a
SCRAM login, or the brokers' own inter-broker credentials, before any broker runs.

Invariants:
- ``add`` and ``delete`` send one AlterUserScramCredentials request (the client salts the
  password: it never crosses the wire); ``list`` one DescribeUserScramCredentials. With
  ``--data-dir`` the directory is locked as a broker locks it (a running broker's is
  refused, naming ``--bootstrap-server``) and its credential file changed in place, with
  the broker's own checks (iterations 4096-16384, deleting a missing credential fails);
  with ``--zookeeper`` the same checks, and each change is the brokers' compare-and-set
  write with its change notification (running brokers take it at once).
- Without ``--password`` the password is read from stdin (first line), so it need not be on
  the command line. It is never printed.
- ``--mechanism`` defaults to both SCRAM-SHA-256 and SCRAM-SHA-512.
- stdout: ``add``/``delete`` print one line per credential changed; ``list`` one line per
  user, Kafka's ``SCRAM credential configs for user-principal 'NAME' are
  SCRAM-SHA-256=iterations=8192, ...``. A refusal (unknown user, bad iterations, not
  authorized) is one stderr line and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from sparklog.broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramStore,
    credentials_of,
)
from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error
from sparklog.client.watch import connected_admin
from sparklog.cluster.security_store import SecurityStore, open_security_store
from sparklog.cluster.session import ClusterError
from sparklog.commands._client import USAGE, ToolError, client_config, client_parent, tool
from sparklog.storage.dir_lock import DataDirError, lock_data_dir

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
NAMES = {mechanism: name for name, mechanism in MECHANISMS.items()}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("users", help="add, delete and list the broker's SCRAM users")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    parent = client_parent(required=False)
    parent.add_argument("--data-dir", type=Path,
                        help="a stopped broker's data directory (instead of a broker)")
    parent.add_argument("--zookeeper", metavar="CONNECT",
                        help="a cluster's zookeeper.connect (instead of a broker)")
    add = actions.add_parser("add", parents=[parent], help="create or update a SCRAM user")
    add.add_argument("name")
    add.add_argument("--password", help="the password (default: read from stdin)")
    add.add_argument("--iterations", type=int, default=8192,
                     help="PBKDF2 iterations, 4096-16384 (default 8192)")
    delete = actions.add_parser("delete", parents=[parent], help="delete a SCRAM user")
    delete.add_argument("name")
    for each in (add, delete):
        each.add_argument("--mechanism", action="append", type=str.upper,
                          choices=sorted(MECHANISMS),
                          help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default both)")
    listing = actions.add_parser("list", parents=[parent], help="list SCRAM users")
    listing.add_argument("names", nargs="*", metavar="NAME", help="these users only")
    add.set_defaults(func=tool("users", add_user))
    delete.set_defaults(func=tool("users", delete_user))
    listing.set_defaults(func=tool("users", list_users))


def add_user(args: argparse.Namespace) -> int:
    password = args.password if args.password is not None else sys.stdin.readline().rstrip("\n")
    if not password:
        raise ToolError("the password is empty (give --password or a line on stdin)")
    if _offline(args):
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise ToolError(f"--iterations {args.iterations} is outside "
                            f"{MIN_ITERATIONS}-{MAX_ITERATIONS}")
        with _store(args) as store:
            for mechanism in args.mechanism or sorted(MECHANISMS):
                store.upsert(args.name, mechanism, ScramCredential.from_password(
                    mechanism, password, args.iterations))
                print(f"Added {mechanism} credentials for user '{args.name}'.")
        return 0
    _alter(args, [UserScramCredentialUpsertion(
        args.name, ScramCredentialInfo(MECHANISMS[m], args.iterations), password.encode())
        for m in args.mechanism or sorted(MECHANISMS)], "Added")
    return 0


def delete_user(args: argparse.Namespace) -> int:
    if _offline(args):
        with _store(args) as store:
            for mechanism in args.mechanism or sorted(MECHANISMS):
                if not store.delete(args.name, mechanism):
                    raise ToolError(f"user {args.name!r} has no {mechanism} credentials")
                print(f"Deleted {mechanism} credentials for user '{args.name}'.")
        return 0
    _alter(args, [UserScramCredentialDeletion(args.name, MECHANISMS[m])
                  for m in args.mechanism or sorted(MECHANISMS)], "Deleted")
    return 0


def _alter(args: argparse.Namespace, alterations: list[UserScramCredentialAlteration],
           done: str) -> None:
    admin = connected_admin(client_config(args))
    for user, future in admin.alter_user_scram_credentials(
            alterations, request_timeout=REQUEST_TIMEOUT_S).items():
        _raise_for(user, future.exception())
    for alteration in alterations:
        mechanism = getattr(alteration, "mechanism", None) or \
            alteration.scram_credential_info.mechanism  # type: ignore[attr-defined]
        print(f"{done} {NAMES[mechanism]} credentials for user '{alteration.user}'.")


def list_users(args: argparse.Namespace) -> int:
    if _offline(args):
        with _store(args) as store:
            found = store.users()
        for name in args.names or list(found):
            if name not in found:
                raise ToolError(f"user {name!r} has no SCRAM credentials")
            configs = ", ".join(f"{m}=iterations={c.iterations}"
                                for m, c in sorted(found[name].items()))
            print(f"SCRAM credential configs for user-principal '{name}' are {configs}")
        return 0
    admin = connected_admin(client_config(args))
    found = admin.describe_user_scram_credentials(args.names or None,
                                                  request_timeout=REQUEST_TIMEOUT_S)
    if not args.names:
        descriptions = found.result()
    else:
        descriptions = {}
        for user, future in found.items():
            _raise_for(user, future.exception())
            descriptions[user] = future.result()
    for user, description in sorted(descriptions.items()):
        configs = ", ".join(f"{NAMES[i.mechanism]}=iterations={i.iterations}"
                            for i in description.scram_credential_infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {configs}")
    return 0


def _raise_for(user: str, error: BaseException | None) -> None:
    if error is not None:
        raise ToolError(f"user {user!r}: {kafka_error(error).str()}")


def _offline(args: argparse.Namespace) -> bool:
    """Whether to work on a data directory (``--data-dir``) or a cluster's ZooKeeper
    (``--zookeeper``) rather than through a broker."""
    if [args.bootstrap, args.data_dir, args.zookeeper].count(None) != 2:
        raise ToolError("give one of --bootstrap-server (a running broker), --data-dir (a "
                        "stopped broker's data directory) or --zookeeper (a cluster's "
                        "zookeeper.connect)", USAGE)
    return args.bootstrap is None


class _ZooKeeperUsers:
    """``ScramStore``'s methods over a cluster's ZooKeeper."""

    def __init__(self, store: SecurityStore) -> None:
        self.store = store

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.store.alter_user(user, lambda config: {**config, mechanism: credential.to_kafka()})

    def delete(self, user: str, mechanism: str) -> bool:
        found = []

        def change(config: dict[str, str]) -> dict[str, str]:
            found.append(config.pop(mechanism, None) is not None)
            return config

        self.store.alter_user(user, change)
        return found[-1]

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: found for user, config in sorted(self.store.users().items())
                if (found := credentials_of(user, config))}


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[ScramStore | _ZooKeeperUsers]:
    """The SCRAM credentials of a stopped broker's data directory (locked meanwhile) or of
    a cluster's ZooKeeper."""
    if args.zookeeper is not None:
        try:
            with open_security_store(args.zookeeper) as store:
                yield _ZooKeeperUsers(store)
        except ClusterError as exc:
            raise ToolError(f"{exc} (--zookeeper)") from None
        return
    try:
        lock = lock_data_dir(args.data_dir)
    except DataDirError as exc:
        raise ToolError(f"{exc} (for a running broker, use --bootstrap-server)") from None
    try:
        yield ScramStore(args.data_dir)
    finally:
        lock.release()
