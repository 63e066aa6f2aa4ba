"""The streaming sink checks its cluster at the stream's start only
(``datasource/write/stream_start``): the writers Spark builds for later micro-batches, in
fresh processes under the same parent, skip the check; a check that failed is made again;
other settings or no checkpoint location are checked every time."""

from __future__ import annotations

import uuid

import pytest

from sparklog.datasource.write.stream_start import check_at_stream_start


class Checks:
    def __init__(self, fail: bool = False) -> None:
        self.count = 0
        self.fail = fail

    def __call__(self) -> None:
        self.count += 1
        if self.fail:
            raise ConnectionError("no broker answered")


def options(**more: str) -> dict[str, str]:
    return {"checkpointLocation": f"/tmp/ck-{uuid.uuid4().hex}",
            "kafka.bootstrap.servers": "127.0.0.1:9092", **more}


def test_later_writers_of_the_query_skip_the_check() -> None:
    query, checks = options(), Checks()
    for _ in range(3):
        check_at_stream_start(query, checks)
    assert checks.count == 1
    check_at_stream_start({**query, "kafka.bootstrap.servers": "127.0.0.1:9093"}, checks)
    assert checks.count == 2  # other servers: the stream's start again


def test_a_failed_check_is_made_again() -> None:
    query, failing = options(), Checks(fail=True)
    for _ in range(2):
        with pytest.raises(ConnectionError):
            check_at_stream_start(query, failing)
    assert failing.count == 2


def test_without_a_checkpoint_every_writer_checks() -> None:
    checks = Checks()
    query = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": uuid.uuid4().hex}
    for _ in range(2):
        check_at_stream_start(query, checks)
    assert checks.count == 2
