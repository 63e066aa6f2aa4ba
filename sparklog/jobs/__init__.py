"""The Spark jobs, each runnable as ``python -m sparklog.jobs.<name>``: ``stream_to_delta``
(a topic into a Delta table, exactly once), ``backfill`` (a range of a topic, once) and
``replay_dlq`` (dead letters back into the table, or parked).

Shared pieces, one job each: ``settings`` (defaults, ``--set``, the arguments every job
takes), ``spark`` (the SparkSession and the ``sparklog`` reader), ``routing`` (one batch
into Delta and the dead-letter topic) and ``runner`` (a job as a program: logging, session,
stopping on signals).

Invariants:
- Nothing here depends on where the code is: defaults are package data (``sparklog/conf``)
  and jobs are modules, so an installed wheel runs them as a checkout does.
- The jobs use the data source, Delta, dead-letter, offsets and client packages and the
  bottom modules; never the broker, storage or coordinator.
"""
