"""Kafka's change notifications in ZooKeeper: one watcher per session and path, one writer,
one purge policy (the role of Kafka's ZkNodeChangeNotificationListener).

Layout: an entity's config is ``/config/<entity path>`` = ``{"version":1,"config":{...}}``;
each change adds ``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":
"<entity path>"}``. Entity paths: ``topics/<t>``, ``users/<user>``, ``clients/<client-id>``,
``users/<user>/clients/<client-id>`` (the entity type ``users/clients``),
``client-metrics/<name>``, ``brokers/<id>``; names URL-encoded where Kafka encodes them,
``<default>`` naming a default entity. ACL changes use the same machinery on their own
paths (``security_store``).

Invariants:
- ``notifications(zk, path)`` is THE watcher of ``path`` on that ZooKeeper session (one
  kazoo ``ChildrenWatch``, made when the first listener comes): each pass reads every
  notification some listener has not handled yet once, in sequence order, and hands it to
  those listeners; what one pass gives a listener twice it hears once (a listener re-reads
  what a notification names, so replayed or coalesced notifications are harmless).
- A listener hears the notifications above the ``since`` it is added with: ``latest()``
  taken before it loaded its state, so a change written while it loaded is heard after the
  load (a pass runs as it is added), never lost; -1 replays every notification still there.
  Passes run one at a time (on kazoo's threads, or the thread adding a listener), and a
  listener's handler must not block on anything but ZooKeeper reads. A handler's failure
  is logged and does not stop the others; a failed read leaves that notification and the
  later ones to the next pass (kazoo's watch passes again after a reconnection).
- ``ConfigChanges(zk)`` dispatches ``/config/changes`` by entity type: a listener names
  the types it wants and hears each entity path of theirs.
- Purge (Kafka's ``changeExpirationMs``): notifications older than ``NOTIFICATION_EXPIRY_MS``
  (15 minutes) are deleted by the readers: a watcher's pass looks at every notification's
  age at most once every ``PURGE_INTERVAL_MS``. Writers do not purge.
- ``alter`` is the one writer: a read-modify-write whose new content and notification go in
  one transaction comparing-and-setting the version read (or creating the znode); a race
  with another writer reads again and retries (a missing notification path is made then);
  a change that changes nothing writes nothing. ``alter_config`` is it for an entity's config.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from sparklog.cluster.layout import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES

log = logging.getLogger(__name__)

NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000
"""Notifications older than this are deleted (Kafka's ``changeExpirationMs``)."""
PURGE_INTERVAL_MS = 60 * 1000
"""How often a watcher looks for expired notifications among those it already handled."""


def dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode_config(data: bytes) -> dict[str, str]:
    """The ``config`` of an entity's znode (one created empty, as the parent of a user's
    client entity, has none)."""
    if not data:
        return {}
    return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}


def entity_type(entity_path: str) -> str:
    """``users/u/clients/c`` -> ``users/clients``; ``topics/t`` -> ``topics``."""
    return "/".join(entity_path.split("/")[::2])


def sequence(child: str) -> int:
    digits = child.rpartition("_")[2]
    return int(digits) if digits.isdigit() else -1


@dataclass(eq=False)
class Listener:
    notifications: ChangeNotifications
    handle: Callable[[bytes], None]
    seen: int
    """The highest sequence handled (or skipped as older than the listener)."""

    def leave(self) -> None:
        """Hear nothing more; the watch ends with the last listener."""
        self.notifications.leave(self)


class ChangeNotifications:
    """The notifications under ``path`` on one session (see the module invariants)."""

    def __init__(self, zk: KazooClient, path: str) -> None:
        self.zk = zk
        self.path = path
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._watching = False
        self._purged_at = 0.0

    def latest(self) -> int:
        """The highest sequence under the path now (-1: none)."""
        self.zk.ensure_path(self.path)
        return max(map(sequence, self.zk.get_children(self.path)), default=-1)

    def listen(self, handle: Callable[[bytes], None], since: int) -> Listener:
        """Hand ``handle`` each notification above ``since`` (blocking: a worker thread)."""
        self.zk.ensure_path(self.path)
        listener = Listener(self, handle, since)
        with self._lock:
            self._listeners.append(listener)
            watching, self._watching = self._watching, True
        if watching:
            self._changed(self.zk.get_children(self.path))
        else:  # its first pass runs now, on this thread
            self.zk.ChildrenWatch(self.path, self._changed)
        return listener

    def leave(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _changed(self, children: list[str]) -> bool:
        with self._lock:
            if not self._listeners:
                self._watching = False
                return False
            try:
                self._pass(children)
            except Exception:
                if self._listeners:  # a closing session's reads fail: nothing to report
                    log.exception("reading the change notifications of %s failed", self.path)
            return True

    def _pass(self, children: list[str]) -> None:
        now = time.time() * 1000
        purge = now - self._purged_at > PURGE_INTERVAL_MS
        if purge:
            self._purged_at = now
        heard: dict[Listener, list[bytes]] = {listener: [] for listener in self._listeners}
        try:
            self._read(children, heard, purge, now)
        finally:  # what was read is handled even when a later read failed
            for listener in self._listeners:
                for data in heard[listener]:
                    try:
                        listener.handle(data)
                    except Exception:
                        log.exception("handling the change notification %r of %s failed",
                                      data, self.path)

    def _read(self, children: list[str], heard: dict[Listener, list[bytes]], purge: bool,
              now: float) -> None:
        """Read the notifications some listener has not handled into ``heard`` (a listener's
        ``seen`` moves past each one read), deleting expired ones when ``purge``."""
        for number, child in sorted((sequence(c), c) for c in children):
            targets = [listener for listener in self._listeners if listener.seen < number]
            if not targets and not purge:
                continue
            try:
                data, stat = self.zk.get(f"{self.path}/{child}")
            except NoNodeError:  # purged meanwhile: a newer one follows it
                continue
            for listener in targets:
                listener.seen = number
                if data not in heard[listener]:
                    heard[listener].append(data)
            if purge and now - stat.ctime > NOTIFICATION_EXPIRY_MS:
                try:
                    self.zk.delete(f"{self.path}/{child}")
                except NoNodeError:  # another reader purged it first
                    pass

_WATCHERS: weakref.WeakKeyDictionary[KazooClient, dict[str, ChangeNotifications]] = \
    weakref.WeakKeyDictionary()
_WATCHERS_LOCK = threading.Lock()


def notifications(zk: KazooClient, path: str) -> ChangeNotifications:
    """The one watcher of ``path`` on the session of ``zk``."""
    with _WATCHERS_LOCK:
        paths = _WATCHERS.setdefault(zk, {})
        if path not in paths:
            paths[path] = ChangeNotifications(zk, path)
        return paths[path]


class ConfigChanges:
    """``/config/changes`` on one session, dispatched by entity type."""

    def __init__(self, zk: KazooClient) -> None:
        self.notifications = notifications(zk, CONFIG_CHANGES)

    def latest(self) -> int:
        return self.notifications.latest()

    def listen(self, types: Collection[str], on_change: Callable[[str], None],
               since: int) -> Listener:
        """Hand ``on_change`` the entity path of each notification above ``since`` naming
        an entity of ``types`` (``topics``, ``users``, ``users/clients``, ...)."""

        def handle(data: bytes) -> None:
            path = str(json.loads(data).get("entity_path", ""))
            if path.partition("/")[2] and entity_type(path) in types:
                on_change(path)

        return self.notifications.listen(handle, since)


def alter(zk: KazooClient, path: str, decode: Callable[[bytes], Any],
          change: Callable[[Any], Any], encode: Callable[[Any], bytes], notify_at: str,
          notification: bytes, delete_when_empty: bool) -> Any:
    """Apply ``change`` to what ``path`` holds (compare-and-set with its notification under
    ``notify_at``, retried; ``delete_when_empty``: an empty result deletes the znode); the
    new content (blocking: a worker thread)."""
    while True:
        try:
            raw, stat = zk.get(path)
            old, version = decode(raw or b"{}"), stat.version
        except NoNodeError:
            old, version = decode(b"{}"), None
        new = change(json.loads(json.dumps(old)))
        if new == old:
            return new
        if version is None:
            zk.ensure_path(path.rpartition("/")[0])
        transaction = zk.transaction()
        if version is None:
            transaction.create(path, encode(new))
        elif delete_when_empty and not new:
            transaction.delete(path, version)
        else:
            transaction.set_data(path, encode(new), version)
        transaction.create(notify_at, notification, sequence=True)
        failures = [r for r in transaction.commit() if isinstance(r, Exception)]
        if not failures:
            return new
        if not any(isinstance(f, (BadVersionError, NodeExistsError, NoNodeError,
                                  NotEmptyError)) for f in failures):
            raise failures[0]
        zk.ensure_path(notify_at.rpartition("/")[0])  # in case it was the one missing


def alter_config(zk: KazooClient, entity_path: str,
                 change: Callable[[dict[str, str]], dict[str, str]],
                 delete_when_empty: bool = False) -> dict[str, str]:
    """Apply ``change`` to the config of the entity at ``/config/<entity_path>`` and announce
    it under ``/config/changes`` (``alter``); the new config."""
    return alter(zk, f"/config/{entity_path}", decode_config, change,
                 lambda config: dump({"version": 1, "config": config}),
                 f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                 dump({"version": 2, "entity_path": entity_path}), delete_when_empty)
