-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_insert(text, text, text, text[], text, text)
--
--     One statement queuing an event of kind i_kind about i_row.  With i_from (the table's
--     name, quoted) the row is also a FROM item of that name, so that expressions written as
--     on the table (when=, ev_extra*=) see its columns; i_where filters it.
--
-- Parameters:
--     i_kind text
--     i_row text
--     i_data text
--     i_extra text[]
--     i_from text
--     i_where text
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_insert(
    i_kind text, i_row text, i_data text, i_extra text[], i_from text, i_where text)
returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select case when i_from is null then
        format(E'insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data,'
               ' ev_extra1, ev_extra2, ev_extra3, ev_extra4)\n            values'
               ' (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), %L || tg_argv[2], %s,'
               ' tg_argv[1], %s, %s, %s);',
               i_kind || ':', i_data, i_extra[1], i_extra[2], i_extra[3])
    else
        format(E'insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data,'
               ' ev_extra1, ev_extra2, ev_extra3, ev_extra4)\n            select'
               ' @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), %L || tg_argv[2], %s,'
               ' tg_argv[1], %s, %s, %s\n              from (select %s.*) as %s%s;',
               i_kind || ':', i_data, i_extra[1], i_extra[2], i_extra[3], i_row, i_from,
               coalesce(' where (' || i_where || ')', ''))
    end
$$;
