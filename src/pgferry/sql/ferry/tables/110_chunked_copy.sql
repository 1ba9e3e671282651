-- ferry: initial copies made in key-range chunks, each read in its own short provider
-- transaction, with no snapshot held across them (docs/replication.md, "Chunked copy").
--
-- copy_mode: how the running (or last) copy of the table is made: 'chunked', or NULL for
-- the one-snapshot copy.  A chunked copy records its chunks on this node
-- (ferry_copy.chunk, ferry_copy.range_done); a worker that stops mid-copy finds the table
-- 'in-copy' with copy_mode 'chunked' and goes on with the chunks not yet done.  Its
-- catch-up applies every event after the recorded tick (catchup_tick) with no snapshot
-- filter, and counts no divergence: a row re-created or a delete finding nothing is then
-- the expected meeting of a chunk read at one time with events of another.

alter table ferry.table_info
    add column copy_mode text check (copy_mode in ('chunked'));
