-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.plain_capture_template(text[])
--
--     The template of the plain capture function of a key list (see
--     ferry_queue.attach_capture_spec.sql for the placeholders).  It runs as its owner with
--     the writer's search_path (install_capture_function), so every function, operator and
--     type it names is named with its schema.
--
-- Parameters:
--     i_pkey text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.plain_capture_template(i_pkey text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    v_body text;
begin
    v_body := $template$
begin
    if tg_op operator(pg_catalog.=) 'INSERT' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'I:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(new)::pg_catalog.text, tg_argv[1]);
    elsif tg_op operator(pg_catalog.=) 'DELETE' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'D:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(old)::pg_catalog.text, tg_argv[1]);
    elsif @KEY_CHANGED@ then
        -- Key change: a delete of the old key, then an insert of the new row.
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'D:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(old)::pg_catalog.text, tg_argv[1]);
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'I:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(new)::pg_catalog.text, tg_argv[1]);
    else
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'U:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(new)::pg_catalog.text, tg_argv[1]);
    end if;
    return null;
end;
$template$;
    -- The key compared by binary image, as a templated function compares it: no operator
    -- of the key's type is looked up (none outside pg_catalog could be trusted).
    return replace(v_body, '@KEY_CHANGED@', 'not ' || ferry_queue.capture_image_eq(i_pkey));
end;
$$;
