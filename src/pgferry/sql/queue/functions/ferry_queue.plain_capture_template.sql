-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.plain_capture_template(text[])
--
--     The template of the plain capture function of a key list (see
--     ferry_queue.attach_capture_spec.sql for the placeholders).
--
-- Parameters:
--     i_pkey text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.plain_capture_template(i_pkey text[]) returns text
language plpgsql immutable as $$
declare
    v_body text;
begin
    v_body := $template$
begin
    if tg_op = 'INSERT' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'I:' || tg_argv[2], pg_catalog.row_to_json(new)::text, tg_argv[1]);
    elsif tg_op = 'DELETE' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'D:' || tg_argv[2], pg_catalog.row_to_json(old)::text, tg_argv[1]);
    elsif @KEY_CHANGED@ then
        -- Key change: a delete of the old key, then an insert of the new row.
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'D:' || tg_argv[2], pg_catalog.row_to_json(old)::text, tg_argv[1]);
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'I:' || tg_argv[2], pg_catalog.row_to_json(new)::text, tg_argv[1]);
    else
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@), 'U:' || tg_argv[2], pg_catalog.row_to_json(new)::text, tg_argv[1]);
    end if;
    return null;
end;
$template$;
    return replace(v_body, '@KEY_CHANGED@',
        (select string_agg(format('old.%I is distinct from new.%I', k, k), ' or ')
           from unnest(i_pkey) k));
end;
$$;
