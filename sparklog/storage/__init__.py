"""Segment store: record batch headers, segments, indexes, partition logs, retention."""
