"""sparklog: a Kafka-protocol streaming log in Python with a native PySpark data source."""

__version__ = "0.1.0"
