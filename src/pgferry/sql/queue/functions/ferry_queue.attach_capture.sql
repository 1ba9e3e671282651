-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.attach_capture(text, regclass, boolean)
--
--     (Re)create the capture triggers of queue on tbl, keyed by its primary key; deny => true
--     makes them refuse writes instead.  Returns 1.
--
-- Parameters:
--     queue text
--     tbl regclass
--     deny boolean default false
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.attach_capture(
    queue text, tbl regclass, deny boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_queue text := attach_capture.queue;
    v_row   text := '_ferry_' || attach_capture.queue || '_capture';
    v_trunc text := '_ferry_' || attach_capture.queue || '_truncate';
    v_name  text;
    v_pk    text[];
    q       ferry_queue.queue;
begin
    q := ferry_queue.find_queue(v_queue);
    select format('%I.%I', n.nspname, c.relname) into v_name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.oid = tbl;
    select array_agg(a.attname::text order by k.ord) into v_pk
      from pg_index i
      cross join lateral unnest(i.indkey) with ordinality k(attnum, ord)
      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
     where i.indrelid = tbl and i.indisprimary;
    if v_pk is null and not deny then
        raise exception 'Primary key missing on table: %', v_name;
    end if;
    perform ferry_queue.detach_capture(v_queue, tbl);
    if deny then
        execute format('create trigger %I after insert or update or delete on %s'
                       ' for each row execute function ferry_queue.deny_write(%L, %L)',
                       v_row, tbl, v_queue, v_name);
        execute format('create trigger %I after truncate on %s'
                       ' for each statement execute function ferry_queue.deny_write(%L, %L)',
                       v_trunc, tbl, v_queue, v_name);
        return 1;
    end if;
    -- Keyed by the primary key, without options: attach_capture_spec's plain capture.
    perform ferry_queue.attach_capture_spec(v_queue, tbl, jsonb_build_object('key', to_jsonb(v_pk)));
    return 1;
end;
$$;
