"""Dead-letter routing: records that fail to parse go to ``<topic>.dlq`` with ``dlq.*`` headers.

``parse`` splits a Kafka DataFrame into good rows and bad ones (Spark's JSON parser),
``headers`` defines a dead letter and its headers, ``producer`` sends a batch's dead letters
once even when the batch is replayed.
"""

from sparklog.dlq.headers import DeadLetter, Origin, dead_letter_origin
from sparklog.dlq.parse import ParseSpec, classify, split
from sparklog.dlq.producer import DeadLetterError, DeadLetterProducer, SendResult

__all__ = ["DeadLetter", "DeadLetterError", "DeadLetterProducer", "Origin", "ParseSpec",
           "SendResult", "classify", "dead_letter_origin", "split"]
