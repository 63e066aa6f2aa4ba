"""Replication: this broker's partitions and their roles, followers' fetchers, the
inter-broker connections and the transaction coordinator's marker channel."""
