"""The transactional event queue: Python side of the ``ferry_queue`` SQL schema.

- :mod:`pgferry.queue.api`       calls into ``ferry_queue``: queues, consumers, events, capture
- :mod:`pgferry.queue.batches`   a consumer's batches: taking, describing, reading, finishing
- :mod:`pgferry.queue.ticks`     ticks: making and reading them, holds, waiting for the next one
- :mod:`pgferry.queue.consumer`  read batches of events (register, loop, finish)
- :mod:`pgferry.queue.ticker`    the ticker daemon (ticks, rotation, retry) for many databases
"""
