"""A Confluent-compatible schema registry inside the broker (``schema.registry.listeners``).

Modules, bottom to top: ``errors`` (Confluent's error codes and messages), ``records`` (the
``_schemas`` topic's record format, Confluent's), ``schema_types`` (parsing AVRO, JSON and
PROTOBUF schemas with their references), ``compatibility`` (the levels and the checks per
schema type), ``store`` (the registry's state over ``_schemas``), ``rest`` (Confluent's REST
API routed onto the store), ``forwarding`` (a request sent on to the broker that leads
``_schemas``), ``listener`` (the HTTP server on its own threads, handing each request to
the broker's loop).
"""
