"""One properties parser for the broker's config, the jobs' settings and Spark's settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparklog.properties import PropertiesError, parse_properties, read_properties


def test_java_properties_separators_and_comments() -> None:
    text = """
# a comment
! another comment
   log.dirs=/tmp/logs
num.partitions : 3
spark.master      local[2]
spark.driver.extraJavaOptions  -Dx=y -Dz=w
empty.value=
source.subscribePattern=events\\..*
url=http://host:80/path
num.partitions=4
"""
    assert parse_properties(text, "test") == {
        "log.dirs": "/tmp/logs",
        "num.partitions": "4",  # the later line wins
        "spark.master": "local[2]",
        "spark.driver.extraJavaOptions": "-Dx=y -Dz=w",
        "empty.value": "",
        "source.subscribePattern": "events\\..*",  # taken as written
        "url": "http://host:80/path",
    }


@pytest.mark.parametrize("line", ["lonely.key", "=value", ": value"])
def test_a_line_that_is_not_a_property_names_file_and_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(f"# header\na=1\n{line}\n")
    with pytest.raises(PropertiesError, match=rf"^{path}:3: expected key=value, .*{line!r}"):
        read_properties(path)


def test_the_broker_refuses_a_bad_config_file_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs\n")
    done = subprocess.run([sys.executable, "-m", "sparklog.cli", "broker", "--config", str(path),
                           "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{path}:2: expected key=value" in done.stderr
