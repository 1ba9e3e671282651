-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_queue(text, text, text, text)
--
--     Queue one captured statement as an EXECUTE event, as `execute` queues a script, so
--     that every subscriber runs it (translated to its own table names) exactly between the
--     row events around it.  The event's name is 'ddl <random id>: <the statement's start>',
--     unique so that each node runs it once (ferry.applied_execute); that form of name is
--     what tells a subscriber the event is captured DDL, which it checks before it runs
--     it (pgferry/scripts/ddl_check.py), and `execute` refuses a script file named so.  ev_extra4 lists the
--     queue's tables as they were before the statement (a rename's old name among them).
--     Returns the event id.
--
-- Parameters:
--     i_queue text
--     i_stmt text
--     i_attrs text
--     i_tables text
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_queue(
    i_queue text, i_stmt text, i_attrs text, i_tables text)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
begin
    v_name := 'ddl ' || pg_catalog.substr(pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''), 1, 12)
              || ': ' || pg_catalog.left(pg_catalog.regexp_replace(i_stmt, '\s+', ' ', 'g'), 80);
    return ferry_queue.insert_event(
        i_queue, 'EXECUTE', i_stmt, v_name, i_attrs,
        pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(i_stmt, 'UTF8')), 'hex'), i_tables);
end;
$$;
