-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.seq_position(regclass)
--
--     Event count of a queue so far (the sequence position); 0 before the first event.
--     No SET search_path: the ticker's round reads it for every queue, inlined into its
--     query (a SET stops the inlining and saves and restores the setting at every call:
--     measured, it took an idle round from 61 to 112 us); the body names its one function
--     with its schema instead.
--
-- Parameters:
--     i_seq regclass
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.seq_position(i_seq regclass) returns bigint
language sql volatile as $$ select coalesce(pg_catalog.pg_sequence_last_value(i_seq), 0) $$;
