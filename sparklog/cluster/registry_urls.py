"""Each broker's schema registry URL in ZooKeeper (``/sparklog/schema_registry/<broker id>``,
ephemeral: it goes with the broker's session), so a broker that does not lead ``_schemas``
can forward a registry request to the one that does."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

URLS = "/sparklog/schema_registry"


def publish_url(zk: KazooClient, broker_id: int, url: str) -> None:
    path = f"{URLS}/{broker_id}"
    try:
        zk.create(path, url.encode(), ephemeral=True, makepath=True)
    except NodeExistsError:  # this broker's previous session's, not yet expired
        zk.set(path, url.encode())


def read_url(zk: KazooClient, broker_id: int) -> str | None:
    try:
        return zk.get(f"{URLS}/{broker_id}")[0].decode()
    except NoNodeError:
        return None
