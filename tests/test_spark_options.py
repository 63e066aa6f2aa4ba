"""The source's options checked where Spark's Kafka source checks them, at ``load()`` in the
driver, and ``register(spark)``: no warning about replacing an auto-registered format, and a
first error that names the cause when Spark's Python workers cannot import sparklog.

No broker is needed: every check here happens before a connection is made.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import DataSourceRegistration

from sparklog.datasource import register
from sparklog.datasource.workers import WorkerPythonError, check_worker_python
from sparklog.dlq.parse import ParseSpec, SchemaError

pytestmark = pytest.mark.spark

BOOTSTRAP = "127.0.0.1:1"  # nothing listens there: a connection would fail the test


def _reader(spark: Any, stream: bool, **options: str) -> Any:
    reader = (spark.readStream if stream else spark.read).format("sparklog")
    return reader.option("kafka.bootstrap.servers", BOOTSTRAP).options(**options)


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
@pytest.mark.parametrize(("options", "message"), [
    ({"subscibe": "t"}, "unknown source option 'subscibe' (did you mean 'subscribe'?)"),
    ({"subscribe": "t", "startingOffset": "earliest"},
     "unknown source option 'startingoffset' (did you mean 'startingOffsets'?)"),
    ({"subscribe": "t", "assign": '{"t":[0]}'},
     "exactly one of the options subscribe, subscribePattern, assign must be specified, "
     "got subscribe and assign"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "lots"},
     "option maxOffsetsPerTrigger must be an integer, got 'lots'"),
    ({"subscribe": "t", "startingOffsets": "{not json"}, "option startingOffsets: expected"),
])
def test_option_errors_surface_at_load(spark: Any, stream: bool, options: dict[str, str],
                                       message: str) -> None:
    with pytest.raises(Exception, match="(?s)" + re.escape(message)):
        _reader(spark, stream, **options).load()


def test_register_keeps_the_auto_registered_format(spark: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(DataSourceRegistration, "register",
                        lambda self, source: calls.append(source))
    register(spark)
    register(spark)
    assert calls == []  # Spark found pyspark_sparklog itself: nothing to replace, no warning


def test_register_names_a_worker_python_without_sparklog(spark: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    monkeypatch.setenv("PYSPARK_PYTHON", python)
    with pytest.raises(WorkerPythonError) as caught:
        register(spark)
    message = str(caught.value)
    assert f"Spark's Python workers run '{python}', which cannot import sparklog" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message and "How Spark finds sparklog" in message
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    check_worker_python(spark)  # the interpreter that has sparklog passes


@pytest.mark.parametrize("ddl", ["id BIGNT", "id BIGINT,, user STRING", "id"])
def test_a_bad_schema_is_one_line(spark: Any, ddl: str) -> None:
    with pytest.raises(SchemaError) as caught:
        ParseSpec.from_ddl(ddl)
    message = str(caught.value)
    assert message.startswith(f"--schema {ddl!r} is not a DDL schema: ") and "\n" not in message
