-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.attach_capture_spec(text, regclass, jsonb)
--
--     (Re)create the capture triggers of queue on tbl as spec says; returns their function.  One call replaces the old triggers, so in one transaction no write of the
--     table goes uncaptured.
--
--     A capture spec (jsonb, made and checked by pgferry's registry/capture_spec.py; docs/events.md)
--     says what a table's row trigger queues:
--       key       the key columns named in ev_type ([] = the table has no key: every column
--                 identifies a row, and an UPDATE carries its old row in ev_extra2)
--       ignore    columns left out of the row images; an UPDATE changing only them queues nothing
--       when      a boolean expression on the row: only rows where it holds are queued (an
--                 UPDATE of a row leaving it queues a D, one entering it an I)
--       backup    an UPDATE also carries the old row in ev_extra2
--       ev_extra2 / ev_extra3 / ev_extra4   expressions on the row, stored as text
--       ops       'IUD' or a part of it: the operations captured
--       before, skip   a BEFORE trigger; skip also cancels the local write (queue-only table)
--       capture   'statement': statement triggers (below) instead of the row trigger
--
--     A spec with capture 'statement', a key and none of the options, on an ordinary table
--     outside any inheritance tree, is captured by statement triggers (statement_capture): one function
--     per key list queues each statement's rows with set-based INSERTs; capture 'statement' on
--     any other table or with any option is refused.  A spec with a key and no option is
--     captured by the plain row function: the C function plain_row_capture where it is
--     installed and may be used (row_capture_in_c: one for every queue and key list, which
--     reads the queue's current table once per transaction), otherwise the PL/pgSQL
--     function of its key list (one cached-plan INSERT per row).
--     Any other spec gets a function generated from a
--     template: the body with @@ferry_event_table@@, @@ferry_part@@ and @@ferry_event_seq@@
--     where the queue's current rotation table, its partition number and its event sequence
--     go.  The template is stored in capture_function, so every rotation rewrites these
--     functions as it rewrites the plain ones (refresh_capture_functions), and tables whose
--     templates are the same text share one function.  Templated functions that no trigger
--     uses any more are dropped when triggers are attached or detached.
--
-- Parameters:
--     queue text
--     tbl regclass
--     spec jsonb
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.attach_capture_spec(queue text, tbl regclass, spec jsonb)
returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_queue  text := attach_capture_spec.queue;
    v_key    text[];
    v_ops    text := coalesce(spec->>'ops', 'IUD');
    v_events text;
    v_timing text := 'after';
    v_name   text;
    v_fn     text;
    v_args   text;
    v_stmt   boolean;
    q        ferry_queue.queue;
begin
    q := ferry_queue.find_queue(v_queue);
    if jsonb_typeof(spec->'key') is distinct from 'array' then
        raise exception 'capture spec of % has no key list', tbl;
    end if;
    v_key := array(select jsonb_array_elements_text(spec->'key'));
    select string_agg(op, ' or ' order by n) into v_events
      from (values ('I', 'insert', 1), ('U', 'update', 2), ('D', 'delete', 3)) as o(l, op, n)
     where strpos(v_ops, l) > 0;
    if v_events is null then
        raise exception 'capture spec of % captures no operation', tbl;
    end if;
    if coalesce((spec->>'before')::boolean, false) or coalesce((spec->>'skip')::boolean, false)
    then
        v_timing := 'before';
    end if;
    select format('%I.%I', n.nspname, c.relname) into v_name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.oid = tbl;
    v_stmt := ferry_queue.statement_capture(tbl, spec);
    if spec->>'capture' is not distinct from 'statement' and not v_stmt then
        raise exception 'capture=statement: % cannot be captured by statement (it needs a'
                        ' unique key checked at once on NOT NULL columns, no other capture'
                        ' option, all three operations, and an ordinary table outside any'
                        ' inheritance tree)', tbl
              using errcode = '22023';
    end if;
    if v_stmt then
        v_fn := ferry_queue.templated_capture_function(
            q.queue_id, v_key, ferry_queue.statement_capture_template(v_key));
    elsif ferry_queue.plain_capture(spec) and ferry_queue.row_capture_in_c() then
        v_fn := 'plain_row_capture';  -- one C function for every queue and key list
    elsif ferry_queue.plain_capture(spec) then
        v_fn := ferry_queue.capture_function(q.queue_id, v_key);
    else
        v_fn := ferry_queue.templated_capture_function(
            q.queue_id, v_key, ferry_queue.capture_template(tbl, spec));
    end if;
    v_args := format('%L, %L, %L', v_queue, v_name,
        coalesce((select string_agg(quote_ident(x), ',') from unnest(v_key) x), ''));
    perform ferry_queue.drop_capture_triggers(v_queue, tbl);
    if v_stmt then
        -- One trigger per operation (transition tables allow one event); the UPDATE one
        -- bears the row trigger's name (ddl_trigger_table reads its arguments).
        execute format('create trigger %I after update on %s'
                       ' referencing old table as _ferry_old new table as _ferry_new'
                       ' for each statement execute function ferry_queue.%I(%s)',
                       '_ferry_' || v_queue || '_capture', tbl, v_fn, v_args);
        execute format('create trigger %I after insert on %s'
                       ' referencing new table as _ferry_new'
                       ' for each statement execute function ferry_queue.%I(%s)',
                       '_ferry_' || v_queue || '_capture_insert', tbl, v_fn, v_args);
        execute format('create trigger %I after delete on %s'
                       ' referencing old table as _ferry_old'
                       ' for each statement execute function ferry_queue.%I(%s)',
                       '_ferry_' || v_queue || '_capture_delete', tbl, v_fn, v_args);
    else
        execute format('create trigger %I %s %s on %s'
                       ' for each row execute function ferry_queue.%I(%s)',
                       '_ferry_' || v_queue || '_capture', v_timing, v_events, tbl, v_fn,
                       v_args);
    end if;
    execute format('create trigger %I after truncate on %s'
                   ' for each statement execute function ferry_queue.capture_truncate(%L, %L)',
                   '_ferry_' || v_queue || '_truncate', tbl, v_queue, v_name);
    perform ferry_queue.prune_capture_functions(q.queue_id);
    return v_fn;
end;
$$;
