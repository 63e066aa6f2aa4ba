"""DescribeConfigs (key 32, v0-v4), AlterConfigs (33, v0-v2), IncrementalAlterConfigs (44,
v0-v1).

Versions, as Kafka's JSON: DescribeConfigs v1 adds ``include_synonyms`` and each config's
source (v0 has ``is_default`` instead), v2 is v1, v3 adds the config type and
``include_documentation``, v4 is the first flexible version; AlterConfigs v1 is v0 and v2
flexible; IncrementalAlterConfigs v1 is v0 flexible. Fields a version lacks are left out.

Behaviour:
- Topic resources (type 2): every topic config Kafka knows, with its effective value and
  source: DYNAMIC_TOPIC_CONFIG for an override, STATIC_BROKER_CONFIG when the broker's
  ``log.*`` synonym is set, else DEFAULT_CONFIG; synonyms (v1+) and the config type and
  documentation (v3) when asked for. ``configuration_keys`` filters.
- Broker resources (type 4, named by the node id, or "" for the cluster default): every
  broker config, read-only, with its source: STATIC_BROKER_CONFIG when set in
  ``server.properties`` or ``--set``, else DEFAULT_CONFIG; the topic defaults (``log.*``
  synonyms) included; ``broker.id`` not set is answered as the broker's id (``node.id``),
  not its unset default -1. Synonyms (v1+, when asked for) are the static value, then the
  default; the type (v3) is known for boolean, numeric, password and topic-default keys
  (UNKNOWN for the rest), documentation only for the topic defaults (their topic
  config's). Dynamic broker configs (``broker.dynamic_config``) come first:
  DYNAMIC_BROKER_CONFIG (this broker's), DYNAMIC_DEFAULT_BROKER_CONFIG (the cluster-wide
  default, the resource named ""), each listed among the synonyms; the configs that may
  change are not read-only. AlterConfigs and IncrementalAlterConfigs (SET, DELETE) change
  this broker's or the default's dynamic configs (APPEND and SUBTRACT are INVALID_CONFIG);
  another node id, or a config Kafka cannot change at run time, is INVALID_REQUEST.
  Secrets (passwords, JAAS lines) are answered sensitive, without their value.
- Client-metrics resources (type 16, KIP-714, named by the subscription): the settings
  set (``metrics``, ``interval.ms``, ``match``), each with source CLIENT_METRICS_CONFIG,
  not read-only, no synonyms, type UNKNOWN and no documentation (as Kafka's
  ``ConfigHelper``); a name without a subscription describes no configs; an empty name is
  INVALID_REQUEST. Both alterations apply (AlterConfigs replacing the settings, as Kafka
  3.7's ZooKeeper broker); the new settings are validated as Kafka's
  ``ClientMetricsConfigs.validate`` (``broker.client_metrics``: unknown settings and
  intervals out of 100-3600000 INVALID_REQUEST, a non-integer interval and bad ``match``
  entries INVALID_CONFIG), APPEND and SUBTRACT apply to the list settings ``metrics`` and
  ``match`` only, a null value in AlterConfigs is INVALID_REQUEST. A subscription whose
  every setting is deleted is gone. The store keeps them (``ClientMetricsManager.alter``:
  the data directory, or ZooKeeper's ``/config/client-metrics/<name>`` whence every
  broker applies them).
- With an authorizer: DESCRIBE_CONFIGS / ALTER_CONFIGS on the TOPIC, or on the CLUSTER for
  a broker or client-metrics resource (TOPIC_ / CLUSTER_AUTHORIZATION_FAILED per resource).
- AlterConfigs replaces a topic's overrides with the given set; IncrementalAlterConfigs
  applies SET, DELETE, APPEND and SUBTRACT (the last two on list configs such as
  ``cleanup.policy``). Bad keys or values are INVALID_CONFIG naming the key and what is
  allowed (Confluent's ``confluent.*.schema.validation`` on a broker without
  ``schema.registry.listeners`` too); ``validate_only`` changes nothing. Changes apply to
  the live logs at once.
- A topic's config lives in the replica manager's store: an alteration is validated here,
  then written there (``ReplicaManager.set_topic_config``; in a cluster ZooKeeper's
  ``/config/topics/<t>`` with a change notification), which every broker applies, so every
  broker describes and enforces the same config (the one answering at once, the others
  when the notification reaches them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.client_metrics import SETTINGS as CLIENT_METRICS_SETTINGS
from sparklog.broker.config import BROKER_DEFAULTS, TOPIC_DEFAULTS, config_type
from sparklog.broker.dynamic_config import DEFAULT, DYNAMIC
from sparklog.broker.registry import handles
from sparklog.broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.broker.security.settings import is_sensitive
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, InvalidConfigError, InvalidRequestError, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import TOPIC_CONFIG_SOURCES, ApiKey, ConfigSource
from sparklog.storage.config import CONFIG_KEYS, LogConfig, render

if TYPE_CHECKING:
    from kio.schema.alter_configs.v2.request import AlterConfigsRequest
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
    from kio.schema.incremental_alter_configs.v1.request import (
        IncrementalAlterConfigsRequest,
    )


TOPIC, BROKER, CLIENT_METRICS = 2, 4, 16
CLIENT_METRICS_LISTS = ("metrics", "match")
"""The client-metrics settings that are lists (APPEND and SUBTRACT apply)."""
SOURCE_TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER = ConfigSource.STATIC_BROKER_CONFIG
SOURCE_DEFAULT = ConfigSource.DEFAULT_CONFIG
_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@handles(ApiKey.DESCRIBE_CONFIGS, versions=(0, 4))
async def describe_configs(broker: Broker, header: RequestHeader,
                           request: DescribeConfigsRequest) -> Any:
    build = Build(header)
    synonyms = getattr(request, "include_synonyms", False)
    docs = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys
        try:
            _require(broker, Operation.DESCRIBE_CONFIGS, resource)
            if resource.resource_type == TOPIC:
                entries = _topic_entries(build, broker, resource.resource_name, synonyms, docs)
            elif resource.resource_type == BROKER:
                entries = _broker_entries(build, broker, resource.resource_name, synonyms,
                                           docs)
            elif resource.resource_type == CLIENT_METRICS:
                entries = _client_metrics_entries(build, broker, resource.resource_name)
            else:
                raise KafkaError(f"resource type {resource.resource_type} is not supported",
                                 ErrorCode.INVALID_REQUEST)
            configs = tuple(e for e in entries if keys is None or e.name in keys)
            code, message = ErrorCode.NONE, None
        except KafkaError as exc:
            configs, code, message = (), exc.code, str(exc)
        results.append(build("DescribeConfigsResult", error_code=code, error_message=message,
                             resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=configs))
    return build.response(results=tuple(results))


def _require(broker: Broker, operation: Operation, resource: Any) -> None:
    """The authorizer's check: ``operation`` on the TOPIC, or on the CLUSTER for a broker
    or client-metrics resource."""
    if resource.resource_type == TOPIC:
        broker.security.require(operation, ResourceType.TOPIC, resource.resource_name)
    elif resource.resource_type in (BROKER, CLIENT_METRICS):
        broker.security.require(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _topic_entries(build: Build, broker: Broker, name: str, synonyms: bool,
                   docs: bool) -> list[Any]:
    config = broker.logs.get_topic(name).config
    return [
        build("DescribeConfigsResourceResult", name=key.name, value=render(config.get(key.name)),
              read_only=False, config_source=(
                  _broker_layers(broker, config, key.name)[0][0]
                  if config.source_of(key.name) == "broker"
                  else TOPIC_CONFIG_SOURCES[config.source_of(key.name)]),
              is_default=config.source_of(key.name) == "default", is_sensitive=False,
              synonyms=tuple(_synonyms(build, broker, config, key.name)) if synonyms else (),
              config_type=_TYPES.get(key.type, 0), documentation=key.doc if docs else None)
        for key in CONFIG_KEYS.values()
    ]


def _broker_layers(broker: Broker, config: LogConfig, name: str
                   ) -> list[tuple[ConfigSource, str]]:
    """The broker layers setting topic config ``name``'s default, most specific first: the
    dynamic ones (``dynamic_config``), else the static value (perhaps set by an alias,
    ``log.retention.hours``)."""
    synonym = CONFIG_KEYS[name].broker_synonym
    if not synonym or name not in config.broker:
        return []
    return broker.dynamic_configs.layers(synonym) or [(SOURCE_STATIC_BROKER,
                                                       render(config.broker[name]))]


def _synonyms(build: Build, broker: Broker, config: LogConfig, name: str) -> list[Any]:
    key = CONFIG_KEYS[name]
    out = []
    if name in config.overrides:
        out.append(build("DescribeConfigsSynonym", name=name,
                         value=render(config.overrides[name]), source=SOURCE_TOPIC))
    for source, value in _broker_layers(broker, config, name):
        out.append(build("DescribeConfigsSynonym", name=key.broker_synonym, value=value,
                         source=source))
    out.append(build("DescribeConfigsSynonym", name=key.broker_synonym or name,
                     value=render(key.default), source=SOURCE_DEFAULT))
    return out


def _broker_entries(build: Build, broker: Broker, name: str, synonyms: bool,
                    docs: bool) -> list[Any]:
    if name not in ("", str(broker.node_id)):
        raise KafkaError(f"broker {name} is not this broker (node id {broker.node_id})",
                         ErrorCode.INVALID_REQUEST)
    explicit = broker.config.explicit
    own_id = {} if "broker.id" in explicit else {"broker.id": str(broker.node_id)}  # not -1
    defaults = {**BROKER_DEFAULTS, **{k: render(key.default) for k, key in TOPIC_DEFAULTS.items()},
                **own_id}
    dynamic = broker.dynamic_configs
    level = DEFAULT if name == "" else None  # "": the cluster-wide default, not this broker
    values = {**defaults, **dynamic.effective(level), **own_id}

    def value(k: str, raw: str | None) -> str | None:
        return None if is_sensitive(k) else raw

    def layers(k: str) -> list[tuple[ConfigSource, str]]:
        return dynamic.layers(k, level) + ([(SOURCE_DEFAULT, defaults[k])] if k in defaults
                                           else [])

    def synonyms_of(k: str) -> tuple[Any, ...]:
        return tuple(build("DescribeConfigsSynonym", name=k, value=value(k, v), source=source)
                     for source, v in layers(k))

    return [
        build("DescribeConfigsResourceResult", name=k, value=value(k, values[k]),
              read_only=k not in DYNAMIC,
              config_source=(layers(k) or [(SOURCE_DEFAULT, "")])[0][0],
              is_default=not dynamic.layers(k, level), is_sensitive=is_sensitive(k),
              synonyms=synonyms_of(k) if synonyms else (),
              config_type=_TYPES["password"] if is_sensitive(k) else _TYPES.get(
                  config_type(k) or "", 0),
              documentation=TOPIC_DEFAULTS[k].doc if docs and k in TOPIC_DEFAULTS else None)
        for k in sorted(values)
    ]


def _client_metrics_entries(build: Build, broker: Broker, name: str) -> list[Any]:
    if not name:
        raise InvalidRequestError("Client metrics subscription name must not be empty")
    config = broker.client_metrics.configs.get(name, {})
    return [build("DescribeConfigsResourceResult", name=key, value=config[key],
                  read_only=False, config_source=ConfigSource.CLIENT_METRICS_CONFIG,
                  is_default=False, is_sensitive=False, synonyms=(), config_type=0,
                  documentation=None)
            for key in sorted(config, key=_setting_order)]


def _setting_order(key: str) -> tuple[int, str]:
    known = key in CLIENT_METRICS_SETTINGS
    return (CLIENT_METRICS_SETTINGS.index(key) if known else len(CLIENT_METRICS_SETTINGS), key)


@handles(ApiKey.ALTER_CONFIGS, versions=(0, 2))
@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, versions=(0, 1))
async def alter_configs(broker: Broker, header: RequestHeader,
                        request: AlterConfigsRequest | IncrementalAlterConfigsRequest) -> Any:
    build = Build(header)
    incremental = header.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
    responses = []
    for resource in request.resources:
        code, message = ErrorCode.NONE, None
        try:
            _require(broker, Operation.ALTER_CONFIGS, resource)
            if resource.resource_type == CLIENT_METRICS:
                await _alter_client_metrics(broker, resource, incremental,
                                            request.validate_only)
            elif resource.resource_type == TOPIC:
                await _alter_topic(broker, resource, incremental, request.validate_only)
            elif resource.resource_type == BROKER:
                await _alter_broker(broker, resource, incremental, request.validate_only)
            else:
                raise KafkaError(f"resource type {resource.resource_type} cannot be altered",
                                 ErrorCode.INVALID_REQUEST)
        except KafkaError as exc:
            code, message = exc.code, str(exc)
        responses.append(build("AlterConfigsResourceResponse", error_code=code,
                               error_message=message, resource_type=resource.resource_type,
                               resource_name=resource.resource_name))
    return build.response(responses=tuple(responses))


async def _alter_topic(broker: Broker, resource: Any, incremental: bool,
                       validate_only: bool) -> None:
    """Validate the topic's new overrides, then (unless ``validate_only``) make them the
    topic's in the store whence every broker applies them."""
    topic = broker.logs.get_topic(resource.resource_name)
    if incremental:
        overrides = _apply_incremental(topic.config, resource.configs)
    else:
        overrides = {c.name: c.value for c in resource.configs if c.value is not None}
    config = broker.logs.set_topic_config(topic.name, overrides, validate_only=True)
    broker.schema_validation.check_config(config)
    if not validate_only:
        await broker.replicas.set_topic_config(
            topic.name, {k: render(v) for k, v in config.overrides.items()})


async def _alter_broker(broker: Broker, resource: Any, incremental: bool,
                        validate_only: bool) -> None:
    """A broker's (or, named "", every broker's) dynamic configs, validated, then kept in
    the store whence every broker applies them (``dynamic_config``)."""
    name = resource.resource_name
    if name not in ("", str(broker.node_id)):
        raise KafkaError(f"broker {name} is not this broker (node id {broker.node_id}): ask "
                         f"broker {name}, or alter the default (\"\")",
                         ErrorCode.INVALID_REQUEST)
    dynamic = broker.dynamic_configs
    store_name = dynamic.store_name(name)
    config = dict(dynamic.configs.get(store_name, {})) if incremental else {}
    for change in resource.configs:
        op = getattr(change, "config_operation", SET)
        if op == SET and change.value is not None:
            config[change.name] = change.value
        elif op in (SET, DELETE):
            config.pop(change.name, None)
        else:
            raise InvalidConfigError(f"APPEND and SUBTRACT apply to topic configs; got "
                                     f"{change.name}")
    dynamic.validate(store_name, config)
    if not validate_only:
        await dynamic.alter(store_name, config)


async def _alter_client_metrics(broker: Broker, resource: Any, incremental: bool,
                                validate_only: bool) -> None:
    """A client-metrics subscription's new settings, validated, then kept (module doc)."""
    name = resource.resource_name
    if not incremental:
        nulls = [c.name for c in resource.configs if c.value is None]
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
        config = {c.name: c.value for c in resource.configs}
    else:
        config = dict(broker.client_metrics.configs.get(name, {}))
        for change in resource.configs:
            op, key = change.config_operation, change.name
            if op == SET:
                config[key] = change.value or ""
            elif op == DELETE:
                config.pop(key, None)
            elif op in (APPEND, SUBTRACT) and key in CLIENT_METRICS_LISTS:
                items = _append_or_subtract(op, _items(config.get(key, "")),
                                            _items(change.value or ""))
                config[key] = ",".join(items)
            elif op in (APPEND, SUBTRACT):
                raise InvalidConfigError(f"APPEND and SUBTRACT need a list config "
                                         f"({', '.join(CLIENT_METRICS_LISTS)}); got {key}")
            else:
                raise InvalidConfigError(f"unknown config operation {op} for {key}")
    broker.client_metrics.validate(name, config)
    if not validate_only:
        await broker.client_metrics.alter(name, config)


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _append_or_subtract(op: int, current: list[Any], items: list[Any]) -> list[Any]:
    if op == APPEND:
        return current + [i for i in items if i not in current]
    return [i for i in current if i not in items]


def _apply_incremental(config: LogConfig, changes: Any) -> dict[str, Any]:
    overrides = dict(config.overrides)
    for change in changes:
        key = CONFIG_KEYS.get(change.name)
        if key is None:
            raise InvalidConfigError(f"unknown topic config {change.name!r}")
        op = change.config_operation
        if op == SET:
            overrides[change.name] = change.value
        elif op == DELETE:
            overrides.pop(change.name, None)
        elif op in (APPEND, SUBTRACT):
            if key.type != "list":
                raise InvalidConfigError(f"APPEND and SUBTRACT need a list config; "
                                         f"{change.name} is a {key.type}")
            overrides[change.name] = _append_or_subtract(
                op, list(overrides.get(change.name, config.get(change.name))),
                key.parse(change.value or ""))
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {change.name}")
    return overrides
