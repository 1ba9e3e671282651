"""The transactional event queue: Python side of the ``ferry_queue`` SQL schema.

- :mod:`pgferry.queue.api`       calls into ``ferry_queue``: queues, consumers, batches, events
- :mod:`pgferry.queue.ticks`     ticks: making and reading them, holds, waiting for the next one
- :mod:`pgferry.queue.consumer`  read batches of events (register, loop, finish)
- :mod:`pgferry.queue.ticker`    the ticker daemon (ticks, rotation, retry) for many databases
"""
