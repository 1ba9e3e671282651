-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.statement_capture_template(text[])
--
--     The template of the statement capture function of a key list (see
--     ferry_queue.attach_capture_spec.sql for the placeholders): the function of AFTER ...
--     FOR EACH STATEMENT triggers whose transition tables are _ferry_old and _ferry_new, one
--     trigger per operation (PostgreSQL allows transition tables only on a trigger of one
--     event).  A statement's events are queued by set-based INSERTs instead of one trigger
--     call and one INSERT per row.
--
--     The events are those the plain row function queues, in an order that replays to the
--     same table.  An UPDATE's old and new rows are paired by key (the transition tables do
--     not say which new row was which old one): an old key no new row has is a D, queued
--     first; a new row whose key an old row had is a U, any other an I.  One statement
--     changes each row at most once and its keys are unique before and after, so replaying
--     the D events before the others is the statement's effect whatever the order within
--     each set: a key update (a D of the old key, an I of the new) comes out as the row
--     function's, and keys swapped between rows become U events of the rows that end with
--     them.  Keys are compared with pg_catalog's operators (statement_capture_match).
--
-- Parameters:
--     i_pkey text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.statement_capture_template(i_pkey text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    v_body text;
begin
    v_body := $template$-- statement capture
begin
    if tg_op operator(pg_catalog.=) 'INSERT' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        select @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@),
               'I:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(n.*)::pg_catalog.text,
               tg_argv[1]
          from _ferry_new as n;
    elsif tg_op operator(pg_catalog.=) 'DELETE' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        select @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@),
               'D:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(o.*)::pg_catalog.text,
               tg_argv[1]
          from _ferry_old as o;
    elsif not exists (select from _ferry_old as o
                       where not exists (select from _ferry_new as n
                                          where @MATCH@)) then
        -- Every key kept (most UPDATEs): each new row is a U.
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        select @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@),
               'U:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(n.*)::pg_catalog.text,
               tg_argv[1]
          from _ferry_new as n;
    else
        -- Keys no row has any more: deleted, first.
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        select @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@),
               'D:' operator(pg_catalog.||) tg_argv[2], pg_catalog.row_to_json(o.*)::pg_catalog.text,
               tg_argv[1]
          from _ferry_old as o
         where not exists (select from _ferry_new as n
                            where @MATCH@);
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        select @@ferry_part@@, pg_catalog.nextval(@@ferry_event_seq@@),
               case when k.@FIRST@ is null then 'I:' else 'U:' end operator(pg_catalog.||) tg_argv[2],
               pg_catalog.row_to_json(n.*)::pg_catalog.text, tg_argv[1]
          from _ferry_new as n
          left join (select @OLD_COLS@ from _ferry_old as o) as k on @MATCH_K@;
    end if;
    return null;
end;
$template$;
    v_body := replace(v_body, '@MATCH@', ferry_queue.statement_capture_match('n', 'o', i_pkey));
    v_body := replace(v_body, '@MATCH_K@', ferry_queue.statement_capture_match('n', 'k', i_pkey));
    v_body := replace(v_body, '@OLD_COLS@',
        (select string_agg(format('o.%I', c), ', ') from unnest(i_pkey) as c));
    return replace(v_body, '@FIRST@', quote_ident(i_pkey[1]));
end;
$$;
