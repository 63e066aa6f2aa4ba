"""The broker's API handlers: one module per Kafka API or API family, nothing else.

Each module registers what it serves with ``registry.handles`` beside its code and states
its behaviour and versions in its docstring; ``registry.load_handlers`` imports every module
here. Handlers reach the broker only through ``state.Broker`` and never ask whether it runs
alone or in a cluster.
"""
