-- ferry_node: divergence that replay repaired without being asked.
--
-- Replay applies an update as an upsert and a delete by key, so a subscriber row removed
-- behind replication's back comes back with the next update of it at the source, and a
-- delete at the source of a row missing here finds nothing: both would go unnoticed.  The
-- worker adds them up here, in the transaction that applied the batch, and status shows
-- the totals.  They run until cleared (set to 0 and NULL) after the tables are repaired.

alter table ferry_node.local_state
    add column diverged_rows    bigint not null default 0,  -- rows an update re-created
    add column diverged_deletes bigint not null default 0,  -- deletes that found no row
    add column diverged_since   timestamptz,                -- the first counted
    add column diverged_last    timestamptz,                -- the last counted
    add column diverged_tables  text;                       -- tables of the last batch with any
