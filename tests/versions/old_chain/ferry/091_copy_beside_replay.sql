-- ferry: copies that run beside replay.
--
-- The worker copies a group of tables in a thread of its own while it keeps applying
-- batches to the node's other tables.  The group's events are held back from the main
-- apply meanwhile: a consumer of the group's own on the provider (copy_consumer, registered
-- at a tick made before the copy's snapshot) keeps them in the queue, and once the copy is
-- done it replays them for the group's tables only (state 'catching-up', position
-- catchup_tick, recorded in the same transaction as the rows it applies).  When its
-- position meets the main stream's, the tables turn 'ok' and the main stream applies them
-- from the next batch on, still skipping events visible in copy_snapshot until no event can
-- be any more.
--
-- copy_id, copy_total and copy_started let `tables` and `status` show a running copy's
-- progress: rows done are counted in ferry_copy.range_done under copy_id.

alter table ferry.table_info
    add column copy_consumer text,      -- the group's own consumer on the provider
    add column catchup_tick  bigint,    -- last tick that consumer applied here
    add column copy_id       text,      -- the running (or last) copy job
    add column copy_total    bigint,    -- estimated rows of the source table
    add column copy_started  timestamptz;

-- The last failure of the group's copy, shown by `tables` until the copy is tried again.
alter table ferry.table_info add column copy_error text;
