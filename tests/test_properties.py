"""One properties parser for the broker's config, the jobs' settings and Spark's settings, and
where the jobs find those files (the package's own, or a directory named instead)."""

from __future__ import annotations

import subprocess
import sys
from importlib.resources import as_file, files
from pathlib import Path

import pytest

from sparklog.broker.config import BROKER_DEFAULTS, BrokerConfig
from sparklog.jobs.settings import JobSettings
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


def test_the_configs_shipped_in_the_package_parse() -> None:
    conf = files("sparklog") / "conf"
    with as_file(conf / "server.properties") as server_properties:
        broker = BrokerConfig.load(server_properties)
    assert broker.unknown_keys() == []
    assert {k: broker.get(k) for k in ("num.partitions", "log.dirs")} == {
        k: BROKER_DEFAULTS[k] for k in ("num.partitions", "log.dirs")}  # Kafka's defaults
    settings = JobSettings.load()  # the package's jobs.properties and spark-local.conf
    assert settings["stream.trigger"] == "availableNow"
    assert settings.spark["spark.master"] == "local[2]"
    assert settings.spark["spark.sql.streaming.stopTimeout"] == "30s"


def test_jobs_read_their_settings_from_another_directory_when_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs.properties").write_text("stream.trigger=processingTime=5s\n")
    assert JobSettings.load(str(tmp_path)).values == {"stream.trigger": "processingTime=5s"}
    monkeypatch.setenv("SPARKLOG_CONF_DIR", str(tmp_path))
    settings = JobSettings.load(overrides=["stream.trigger=availableNow"])
    assert settings.values == {"stream.trigger": "availableNow"}  # --set wins
    assert settings.spark == {}  # no spark-local.conf there
    monkeypatch.setenv("SPARKLOG_CONF_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match=r"no jobs\.properties in .*nowhere"):
        JobSettings.load()


def test_set_refuses_a_setting_jobs_properties_does_not_have() -> None:
    with pytest.raises(SystemExit, match=r"--set strem\.trigger: no such setting \(did you "
                                         r"mean stream\.trigger\?\)"):
        JobSettings.load(overrides=["strem.trigger=availableNow"])
    # source.<option> is open: any source option may be passed through
    settings = JobSettings.load(overrides=["source.minPartitions=4"])
    assert settings.source_options()["minPartitions"] == "4"
