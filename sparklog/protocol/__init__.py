"""Kafka wire protocol: framing, the API version table, request and response codecs."""
