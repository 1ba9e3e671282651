"""The transactional event queue: Python side of the ``ferry_queue`` SQL schema.

- :mod:`pgferry.queue.api`       every call pgferry's Python code makes into ``ferry_queue``
- :mod:`pgferry.queue.consumer`  read batches of events (register, loop, finish)
- :mod:`pgferry.queue.ticker`    the ticker daemon (ticks, rotation, retry) for many databases
"""
