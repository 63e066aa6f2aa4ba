"""The broker's monitoring: request metrics recorded by the server, a status snapshot taken
on the event loop, Prometheus metrics under Kafka's names, and the status page, served on
``metrics.listener`` (off unless set).
"""
