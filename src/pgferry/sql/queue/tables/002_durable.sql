-- ferry_queue: positions that survive a crash under synchronous_commit = off.
--
-- A subscriber applies the events of a batch, records the batch's tick and only then asks
-- the provider to finish the batch.  Two things must hold whatever the servers' default:
--
-- * A tick is durable before anybody can read a batch that ends at it: a transaction that
--   inserts a tick commits with synchronous_commit on (the WAL flush also covers every
--   event committed before the tick's snapshot).  A provider that crashes never loses a
--   tick that a subscriber has already applied.
-- * A consumer whose own recorded position lies behind (or ahead of) the queue's
--   subscription position is moved back to it with rewind_consumer, as long as the events
--   after that tick are still in the queue.  Rotation records in queue_rotated_xid the
--   bound below which events may be gone, so a rewind that would skip events is refused.

alter table ferry_queue.queue add column queue_rotated_xid xid8;
