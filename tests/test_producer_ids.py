"""Producer ids: blocks persisted on a single node, taken from ZooKeeper in a cluster.

What a user relies on: no producer id is handed out twice, across restarts and between
brokers. On a single node the blocks are persisted in the data directory. In a cluster of
three broker processes every broker takes its blocks from ZooKeeper's
``/latest_producer_id_block`` by compare-and-set: idempotent producers (InitProducerId,
pipelined on several connections to every broker, in rounds that make all brokers run out
of ids and ask ZooKeeper for a block at the same moment) and transactional ones (through
the project's client, at their coordinator) never get the same id, also after a broker
was SIGKILLed and restarted. A broker waiting for ZooKeeper's next block still answers
other requests (the block is fetched off its event loop), and takes one block for all the
producers that ran out of ids together.
"""
from __future__ import annotations

import asyncio
import select
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    RawConnection,
    init_producer_id_request,
    init_producer_ids,
    metadata_v12_request,
    paused,
    read_producer_id,
    running_cluster,
    zk_client,
    zookeeper,
)
from kafka.protocol.metadata import MetadataResponse

from sparklog.broker.replication.local_store import PRODUCER_ID_FILE, next_producer_id_block
from sparklog.broker.state import PRODUCER_ID_BLOCK, ProducerIdManager
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import abort_by_id
from sparklog.cluster.layout import PRODUCER_ID_BLOCK as BLOCK_ZNODE
from sparklog.cluster.layout import decode_producer_id_block_end
from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]  # fixtures, imported for pytest

CONNECTIONS_PER_BROKER = 2
"""Idempotent producers' connections to each broker, all asking at once."""
ROUNDS = 3
"""Blocks every broker uses up before one of them is restarted."""
TRANSACTIONAL_IDS = 20
"""New transactional ids initialised (each takes a producer id) before and after it."""


def test_ids_are_not_reused_after_a_restart(tmp_path: Path) -> None:
    async def take(count: int) -> list[int]:
        async def allocate(size: int) -> tuple[int, int]:
            return next_producer_id_block(tmp_path / PRODUCER_ID_FILE, size)

        ids = ProducerIdManager(allocate)
        return [await ids.next_id() for _ in range(count)]

    first = asyncio.run(take(3))
    second = asyncio.run(take(3))
    assert first == [0, 1, 2]
    assert second == [PRODUCER_ID_BLOCK, PRODUCER_ID_BLOCK + 1, PRODUCER_ID_BLOCK + 2]


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path, request.node.name) as running:
        yield running


def _in_step(cluster: Cluster, rounds: int) -> dict[int, list[int]]:
    """Idempotent producers' ids in ``rounds`` rounds: each round every broker hands out
    one block's worth (``CONNECTIONS_PER_BROKER`` connections each pipelining their share
    of InitProducerIds), all starting together, so the brokers run out of ids and ask
    ZooKeeper for their next block at the same moment. Answers broker id -> its ids."""
    per_connection, left = divmod(PRODUCER_ID_BLOCK, CONNECTIONS_PER_BROKER)
    assert left == 0
    connections = [(broker_id, RawConnection(broker.bootstrap, timeout=TIMEOUT))
                   for broker_id, broker in enumerate(cluster.brokers)
                   for _ in range(CONNECTIONS_PER_BROKER)]
    start = threading.Barrier(len(connections))

    def take(conn: RawConnection) -> list[int]:
        ids = []
        for _ in range(rounds):
            start.wait(TIMEOUT)
            ids += init_producer_ids(conn, per_connection)
        return ids

    try:
        with ThreadPoolExecutor(len(connections)) as pool:
            asked = [(broker_id, pool.submit(take, conn)) for broker_id, conn in connections]
            by_broker: dict[int, list[int]] = {i: [] for i in range(len(cluster.brokers))}
            for broker_id, future in asked:
                by_broker[broker_id] += future.result(rounds * 4 * TIMEOUT)
            return by_broker
    finally:
        for _, conn in connections:
            conn.close()


def _transactional(cluster: Cluster, names: Sequence[str]) -> list[int]:
    """Initialise each new transactional id at its coordinator, as a transactional producer
    does: the producer ids they got (each with epoch 0: a new id)."""
    config = ClientConfig(parse_bootstrap(cluster.bootstrap))
    with KafkaClient(config, RetryPolicy(TIMEOUT, 0.1)) as client:
        taken = [abort_by_id(client, name) for name in names]
    assert all(epoch == 0 for _, epoch in taken)
    return [pid for pid, _ in taken]


def _blocks(ids: list[int]) -> set[int]:
    return {pid // PRODUCER_ID_BLOCK for pid in ids}


def _twice(ids: list[int]) -> list[int]:
    """The ids that occur more than once."""
    return sorted(pid for pid, count in Counter(ids).items() if count > 1)


def test_brokers_never_hand_out_the_same_id(cluster: Cluster) -> None:
    first = _in_step(cluster, ROUNDS)
    assert all(len(_blocks(ids)) == ROUNDS for ids in first.values()), \
        {b: sorted(_blocks(ids)) for b, ids in first.items()}
    handed = [pid for ids in first.values() for pid in ids]
    handed += _transactional(cluster, [f"first-{i}" for i in range(TRANSACTIONAL_IDS)])
    assert _twice(handed) == [], "producer ids handed out twice"

    # a broker killed and restarted takes its ids from a new block of ZooKeeper's
    restarted = cluster.brokers[1]
    restarted.kill()
    restarted.start()
    second = _in_step(cluster, 1)
    handed += [pid for ids in second.values() for pid in ids]
    handed += _transactional(cluster, [f"second-{i}" for i in range(TRANSACTIONAL_IDS)])
    assert _twice(handed) == [], "producer ids handed out twice"
    with zk_client(cluster) as zk:  # every id handed out lies in a block ZooKeeper gave out
        assert max(handed) < decode_producer_id_block_end(zk.get(BLOCK_ZNODE)[0])


def _answered(conn: RawConnection) -> bool:
    """Whether the broker has sent something on ``conn`` (an answer) that is not read yet."""
    return bool(select.select([conn.sock], [], [], 0)[0])


def test_a_block_is_fetched_once_off_the_event_loop(zookeeper: ZooKeeperServer,
                                                    tmp_path: Path) -> None:
    # sessions far longer than ZooKeeper's short pause below: nobody's session expires
    config = {"zookeeper.session.timeout.ms": "10000"}
    with running_cluster(zookeeper, tmp_path, "stalled-zookeeper", config) as cluster:
        broker = cluster.brokers[0]
        with RawConnection(broker.bootstrap) as conn:
            assert init_producer_ids(conn, PRODUCER_ID_BLOCK) == list(range(PRODUCER_ID_BLOCK))
        waiting = [RawConnection(broker.bootstrap, timeout=TIMEOUT) for _ in range(3)]
        try:
            with paused(zookeeper), RawConnection(broker.bootstrap) as other:
                for conn in waiting:  # three producers, and the broker's block is used up
                    conn.send_message(init_producer_id_request())
                for _ in range(2):  # the broker answers others while it waits for ZooKeeper
                    answer = other.call(metadata_v12_request(), MetadataResponse)
                    assert sorted(b.node_id for b in answer.brokers) == [0, 1, 2]
                assert not any(_answered(conn) for conn in waiting), \
                    "producer ids handed out while ZooKeeper could give no block"
            taken = sorted(read_producer_id(conn)[0] for conn in waiting)
        finally:
            for conn in waiting:
                conn.close()
        # one block for the three: the next after the first, and nothing more taken
        assert taken == [PRODUCER_ID_BLOCK, PRODUCER_ID_BLOCK + 1, PRODUCER_ID_BLOCK + 2]
        with zk_client(cluster) as zk:
            assert decode_producer_id_block_end(zk.get(BLOCK_ZNODE)[0]) == 2 * PRODUCER_ID_BLOCK
