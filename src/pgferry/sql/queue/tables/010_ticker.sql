-- ferry_queue: a tick as soon as events wait, nothing written while a queue is idle.
--
-- * tick_due(queue): whether the queue needs a tick now, and whether events wait for one,
--   read without any lock.  With new events: a tick once ticker_max_count events wait or
--   the last tick is ticker_max_lag old (default now 50 ms: the ticker daemon looks again
--   every ticker_busy_period while events wait, so an event waits about that long).
--   Without new events: a tick every ticker_idle_period (the lag a healthy idle queue
--   shows), and also, once ticker_max_lag has passed, when a transaction that was running
--   at the last tick has committed events since (its events were counted before that tick
--   but not visible in it, so no newer event would bring them).  This replaces the
--   doubling idle interval: an idle queue makes one tick per idle period.
-- * ticker(queue) decides without a lock and takes the queue's row lock only when a tick
--   is due, then decides again under it: a call on an idle queue writes nothing (no
--   transaction id, no WAL).
-- * ticker_round(): ticker() of every queue, and how many queues have events waiting, so
--   that the daemon knows when to look again soon.
-- * force_tick(queue) also wakes a listening ticker daemon (channel ferry_queue_ticker).

alter table ferry_queue.queue alter column queue_ticker_max_lag set default '50 milliseconds';
