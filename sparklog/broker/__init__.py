"""The Kafka-protocol broker: an asyncio server with one module per API family."""
