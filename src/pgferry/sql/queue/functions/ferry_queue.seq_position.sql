-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.seq_position(regclass)
--
--     Event count of a queue so far (the sequence position); 0 before the first event.
--
-- Parameters:
--     i_seq regclass
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.seq_position(i_seq regclass) returns bigint
language sql volatile set search_path = pg_catalog, pg_temp as $$ select coalesce(pg_sequence_last_value(i_seq), 0) $$;
