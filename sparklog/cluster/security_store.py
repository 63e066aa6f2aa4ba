"""SCRAM credentials and ACLs of a cluster in ZooKeeper, in Kafka's ZooKeeper-era layout.

Paths and JSON (Kafka 2.x's, so ``zkCli`` and Kafka's tools read them as a Kafka cluster's):
- ``/config/users/<user, URL-encoded>``: ``{"version":1,"config":{"SCRAM-SHA-256":
  "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>", ...}}``; each change adds
  ``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":"users/<user>"}``.
- Client quotas in the same config znodes (a user's beside its credentials):
  ``/config/users/<user>``, ``/config/clients/<client-id>``,
  ``/config/users/<user>/clients/<client-id>``, ``<default>`` naming a default entity,
  ``{"version":1,"config":{"producer_byte_rate":"1024"}}``; each change adds a
  ``config_change_<seq>`` naming the entity's path (``users/<user>/clients/<client-id>``).
- ``/kafka-acl/<ResourceType>/<name>`` (LITERAL) and
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (PREFIXED): ``{"version":1,"acls":
  [{"principal":..,"permissionType":..,"operation":..,"host":..}]}``; each change adds
  ``/kafka-acl-changes/acl_changes_<seq>`` = ``<ResourceType>:<name>`` (LITERAL) or
  ``/kafka-acl-extended-changes/acl_changes_<seq>`` = ``{"version":1,"resourceType":..,
  "name":..,"patternType":"PREFIXED"}``.

Invariants:
- This module speaks plain strings and dicts (resource type names such as ``Topic``, ACL
  entries as Kafka's JSON objects); the broker maps them to its own types.
- A write is a read-modify-write: the new content and its change notification go in one
  ZooKeeper transaction that compares-and-sets the znode version it read (or creates the
  znode); a conflict (someone wrote first) reads again and retries. A change that changes
  nothing writes nothing. Keys of a user's config other than SCRAM's (quotas) are kept.
- Writes go through ``config_changes.alter`` (the one writer of configs and ACLs).
- ``start`` loads every user and ACL (the listener hears each), then listens to the
  session's watchers (``config_changes``) of ``/config/changes`` (entity types ``users``,
  ``clients``, ``users/clients``) and of the two ACL notification paths, from the sequence
  each had before the load: each new notification makes the listener hear the current
  content of the entity it names, read again (so a replayed or coalesced notification is
  harmless). After a lost session, everything is loaded again. Expired notifications are
  purged by those watchers (``config_changes``: Kafka's 15 minutes). ``close`` stops
  listening.
- The listener's callbacks run on kazoo's threads and must not block.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.cluster.config_changes import (
    CONFIG_CHANGES,
    ConfigChanges,
    Listener,
    alter,
    alter_config,
    decode_config,
    dump,
    notifications,
)
from sparklog.cluster.session import ClusterError, split_connect

log = logging.getLogger(__name__)

USERS = "/config/users"
CLIENTS = "/config/clients"
DEFAULT_ENTITY = "<default>"
ACL_CHANGE_PREFIX = "acl_changes_"
LITERAL_ACLS = "/kafka-acl"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_ROOTS = {"LITERAL": LITERAL_ACLS, "PREFIXED": PREFIXED_ACLS}
QUOTA_ENTITY_TYPES = ("users", "clients", "users/clients")

AclResource = tuple[str, str, str]
"""(pattern type LITERAL or PREFIXED, Kafka's resource type name such as ``Topic``, name)."""
AclEntry = dict[str, str]
"""One ACL as Kafka's JSON holds it: principal, permissionType, operation, host."""


class SecurityListener(Protocol):
    def user(self, name: str, config: dict[str, str]) -> None: ...
    def entity_config(self, path: str, config: dict[str, str]) -> None:
        """The config of a quota entity other than a named user: ``users/<default>``,
        ``clients/<client-id>``, ``users/<user>/clients/<client-id>`` (names as in the
        path: URL-encoded, ``<default>``)."""
    def acls(self, resource: AclResource, entries: list[AclEntry]) -> None: ...


def sanitize(user: str) -> str:
    """A user name as Kafka writes it in a znode path (URL encoding, ``*`` as %2A)."""
    return urllib.parse.quote(user, safe="-_.")


def user_path(user: str) -> str:
    return f"{USERS}/{sanitize(user)}"


def acl_path(resource: AclResource) -> str:
    pattern, kind, name = resource
    return f"{ACL_ROOTS[pattern]}/{kind}/{name}"


def _encode_notification(resource: AclResource) -> tuple[str, bytes]:
    pattern, kind, name = resource
    if pattern == "LITERAL":
        return f"{LITERAL_CHANGES}/{ACL_CHANGE_PREFIX}", f"{kind}:{name}".encode()
    return f"{EXTENDED_CHANGES}/{ACL_CHANGE_PREFIX}", dump(
        {"version": 1, "resourceType": kind, "name": name, "patternType": pattern})


def _decode_notification(path: str, data: bytes) -> AclResource:
    if path == LITERAL_CHANGES:
        kind, _, name = data.decode().partition(":")
        return "LITERAL", kind, name
    value = json.loads(data)
    return str(value["patternType"]).upper(), value["resourceType"], value["name"]


@contextmanager
def open_security_store(connect: str, timeout_s: float = 30) -> Iterator[SecurityStore]:
    """A store on its own ZooKeeper session (``zookeeper.connect``'s form, chroot included),
    for tools that change users without a broker (as ``kafka-configs.sh --zookeeper``): it
    reads and writes, and hears nothing. ``ClusterError`` when ZooKeeper is out of reach."""
    hosts, chroot = split_connect(connect)
    zk = KazooClient(hosts=hosts)
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        raise ClusterError(f"cannot reach ZooKeeper at {hosts} within {timeout_s:.0f} s"
                           ) from None
    try:
        if chroot:
            zk.ensure_path(chroot)
            zk.chroot = chroot
        zk.ensure_path(USERS)
        zk.ensure_path(CLIENTS)
        zk.ensure_path(CONFIG_CHANGES)
        yield SecurityStore(zk, None)
    finally:
        zk.stop()
        zk.close()


class SecurityStore:
    """Users and ACLs in ZooKeeper over ``zk`` (a started client, chroot applied); with no
    ``listener`` it only reads and writes (``start`` is for brokers)."""

    def __init__(self, zk: KazooClient, listener: SecurityListener | None) -> None:
        self.zk = zk
        self.listener = listener
        self._listening: list[Listener] = []
        self._closed = False
        self._lost = False

    # -- reading -------------------------------------------------------------------------
    def users(self) -> dict[str, dict[str, str]]:
        """Every user's config, read now (blocking)."""
        found = {}
        for child in self.zk.get_children(USERS):
            try:
                data = self.zk.get(f"{USERS}/{child}")[0]
            except NoNodeError:
                continue
            found[urllib.parse.unquote(child)] = decode_config(data)
        return found

    def start(self) -> None:
        assert self.listener is not None, "a store that hears nothing cannot watch"
        for path in (USERS, CLIENTS, CONFIG_CHANGES, LITERAL_CHANGES, EXTENDED_CHANGES,
                     *(f"{root}/{kind}" for root in ACL_ROOTS.values()
                       for kind in ("Topic", "Group", "Cluster", "TransactionalId"))):
            self.zk.ensure_path(path)
        configs = ConfigChanges(self.zk)
        acls = [notifications(self.zk, path) for path in (LITERAL_CHANGES, EXTENDED_CHANGES)]
        since = [configs.latest(), *(watcher.latest() for watcher in acls)]
        self._load()
        self.zk.add_listener(self._on_session)
        self._listening.append(configs.listen(QUOTA_ENTITY_TYPES, self._read_config, since[0]))
        for watcher, seen in zip(acls, since[1:], strict=True):
            def handle(data: bytes, path: str = watcher.path) -> None:
                self._read_acls(_decode_notification(path, data))

            self._listening.append(watcher.listen(handle, seen))

    def close(self) -> None:
        self._closed = True
        for listener in self._listening:
            listener.leave()

    def entity_paths(self) -> list[str]:
        """Every quota entity's path below ``/config`` (``users/<default>``, ``clients/c``,
        ``users/u/clients/c``) except named users (``users()`` has those)."""
        paths = [f"clients/{c}" for c in self.zk.get_children(CLIENTS)]
        for user in self.zk.get_children(USERS):
            if user == DEFAULT_ENTITY:
                paths.append(f"users/{user}")
            try:
                clients = self.zk.get_children(f"{USERS}/{user}/clients")
            except NoNodeError:
                continue
            paths.extend(f"users/{user}/clients/{c}" for c in clients)
        return paths

    def entity_config(self, path: str) -> dict[str, str]:
        """The config of the entity at ``/config/<path>`` (empty: none), read now."""
        try:
            return decode_config(self.zk.get(f"/config/{path}")[0])
        except NoNodeError:
            return {}

    def _load(self) -> None:
        for user in self.zk.get_children(USERS):
            if user != DEFAULT_ENTITY:
                self._read_user(urllib.parse.unquote(user))
        for path in self.entity_paths():
            self._read_entity(path)
        for pattern, root in ACL_ROOTS.items():
            for kind in self.zk.get_children(root):
                for name in self.zk.get_children(f"{root}/{kind}"):
                    self._read_acls((pattern, kind, name))

    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost and not self._closed:
            self._lost = False
            self.zk.handler.spawn(self._reload)

    def _reload(self) -> None:
        try:
            self._load()
        except Exception:
            log.exception("reloading users and ACLs from ZooKeeper failed")

    def _read_user(self, user: str) -> None:
        try:
            config = decode_config(self.zk.get(user_path(user))[0])
        except NoNodeError:
            config = {}
        assert self.listener is not None
        self.listener.user(user, config)

    def _read_entity(self, path: str) -> None:
        assert self.listener is not None
        self.listener.entity_config(path, self.entity_config(path))

    def _read_acls(self, resource: AclResource) -> None:
        try:
            entries = json.loads(self.zk.get(acl_path(resource))[0]).get("acls", [])
        except NoNodeError:
            entries = []
        assert self.listener is not None
        self.listener.acls(resource, entries)

    def _read_config(self, entity: str) -> None:
        """Hear the entity a ``/config/changes`` notification names."""
        kind, _, name = entity.partition("/")
        if kind == "users" and "/" not in name and name != DEFAULT_ENTITY:
            self._read_user(urllib.parse.unquote(name))
        else:
            self._read_entity(entity)

    # -- writing (blocking: call from a worker thread) -----------------------------------
    def alter_user(self, user: str, change: Callable[[dict[str, str]], dict[str, str]]
                   ) -> dict[str, str]:
        """Apply ``change`` to the user's config (compare-and-set, retried); the new config."""
        return self.alter_entity(f"users/{sanitize(user)}", change)

    def alter_entity(self, path: str, change: Callable[[dict[str, str]], dict[str, str]]
                     ) -> dict[str, str]:
        """Apply ``change`` to the config of the entity at ``/config/<path>`` (a user's, a
        client's, a user's client's: compare-and-set, retried); the new config."""
        return alter_config(self.zk, path, change)

    def alter_acls(self, resource: AclResource,
                   change: Callable[[list[AclEntry]], list[AclEntry]]) -> list[AclEntry]:
        """Apply ``change`` to the resource's ACLs (compare-and-set, retried; the znode goes
        when none is left); the new ACLs."""
        notify_at, notification = _encode_notification(resource)
        return alter(self.zk, acl_path(resource), lambda raw: json.loads(raw).get("acls", []),
                     change, lambda acls: dump({"version": 1, "acls": acls}), notify_at,
                     notification, delete_when_empty=True)
