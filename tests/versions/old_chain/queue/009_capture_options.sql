-- Queue version 9: capture options (add-table --trigger-flags / --trigger-arg).
--
-- A capture spec (jsonb, made and checked by pgferry's node/capture_spec.py; docs/events.md)
-- says what a table's row trigger queues:
--   key       the key columns named in ev_type ([] = the table has no key: every column
--             identifies a row, and an UPDATE carries its old row in ev_extra2)
--   ignore    columns left out of the row images; an UPDATE changing only them queues nothing
--   when      a boolean expression on the row: only rows where it holds are queued (an
--             UPDATE of a row leaving it queues a D, one entering it an I)
--   backup    an UPDATE also carries the old row in ev_extra2
--   ev_extra2 / ev_extra3 / ev_extra4   expressions on the row, stored as text
--   ops       'IUD' or a part of it: the operations captured
--   before, skip   a BEFORE trigger; skip also cancels the local write (queue-only table)
--
-- A spec with a key and none of the options is captured by the plain function of its key
-- list (001_9, unchanged: one cached-plan INSERT per row).  Any other spec gets a function
-- generated from a template: the body with @@ferry_event_table@@, @@ferry_part@@ and
-- @@ferry_event_seq@@ where the queue's current rotation table, its partition number and
-- its event sequence go.  The template is stored in capture_function, so every rotation
-- rewrites these functions as it rewrites the plain ones (refresh_capture_functions), and
-- tables whose templates are the same text share one function.  Templated functions that
-- no trigger uses any more are dropped when triggers are attached or detached.

alter table ferry_queue.capture_function add column cf_template text;
alter table ferry_queue.capture_function drop constraint capture_function_pkey;
create unique index capture_function_plain
    on ferry_queue.capture_function (cf_queue, cf_pkey) where cf_template is null;
create unique index capture_function_templated
    on ferry_queue.capture_function (cf_queue, md5(cf_template)) where cf_template is not null;

-- The body of the plain capture function of a key list (as 001_9 writes it).
create function ferry_queue.plain_capture_template(i_pkey text[]) returns text
language plpgsql immutable as $$
declare
    v_body text;
begin
    v_body := $template$
begin
    if tg_op = 'INSERT' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, nextval(@@ferry_event_seq@@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    elsif tg_op = 'DELETE' then
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, nextval(@@ferry_event_seq@@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
    elsif @KEY_CHANGED@ then
        -- Key change: a delete of the old key, then an insert of the new row.
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, nextval(@@ferry_event_seq@@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, nextval(@@ferry_event_seq@@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    else
        insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@@ferry_part@@, nextval(@@ferry_event_seq@@), 'U:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    end if;
    return null;
end;
$template$;
    return replace(v_body, '@KEY_CHANGED@',
        (select string_agg(format('old.%I is distinct from new.%I', k, k), ' or ')
           from unnest(i_pkey) k));
end;
$$;

-- (Re)write function i_name from a template, for the queue's current rotation table.
create function ferry_queue.install_capture_function(
    i_queue_id integer, i_name text, i_template text)
returns text
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_body text;
begin
    select * into q from ferry_queue.queue where queue_id = i_queue_id;
    v_body := replace(i_template, '@@ferry_event_table@@',
        format('ferry_queue.%I', format('event_%s_%s', q.queue_id, q.queue_cur_table)));
    v_body := replace(v_body, '@@ferry_part@@', (q.queue_id * 10 + q.queue_cur_table)::text);
    v_body := replace(v_body, '@@ferry_event_seq@@',
        quote_literal(q.queue_event_seq::text) || '::regclass');
    execute format('create or replace function ferry_queue.%I() returns trigger'
                   ' language plpgsql as %L', i_name, v_body);
    return i_name;
end;
$$;

-- A new function name of the queue: capture_<queue_id>_<n>, n one above the highest so far
-- (pruned names are not reused while a higher one exists).
create function ferry_queue.next_capture_name(i_queue_id integer) returns text
language sql as $$
    select format('capture_%s_%s', i_queue_id,
                  coalesce(max((regexp_match(cf_name, '_([0-9]+)$'))[1]::integer), 0) + 1)
      from ferry_queue.capture_function where cf_queue = i_queue_id
$$;

-- The plain function of a key list (replaces 001_9's: templated rows share the table).
create or replace function ferry_queue.capture_function(i_queue_id integer, i_pkey text[])
returns text
language plpgsql as $$
declare
    v_name text;
begin
    select cf_name into v_name from ferry_queue.capture_function
     where cf_queue = i_queue_id and cf_pkey = i_pkey and cf_template is null;
    if v_name is null then
        v_name := ferry_queue.next_capture_name(i_queue_id);
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name)
        values (i_queue_id, i_pkey, v_name);
    end if;
    return ferry_queue.install_capture_function(
        i_queue_id, v_name, ferry_queue.plain_capture_template(i_pkey));
end;
$$;

-- The function of a template (one per distinct template text and queue).
create function ferry_queue.templated_capture_function(
    i_queue_id integer, i_key text[], i_template text)
returns text
language plpgsql as $$
declare
    v_name text;
begin
    select cf_name into v_name from ferry_queue.capture_function
     where cf_queue = i_queue_id and md5(cf_template) = md5(i_template)
       and cf_template = i_template;
    if v_name is null then
        v_name := ferry_queue.next_capture_name(i_queue_id);
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name, cf_template)
        values (i_queue_id, i_key, v_name, i_template);
    end if;
    return ferry_queue.install_capture_function(i_queue_id, v_name, i_template);
end;
$$;

-- Point every capture function of a queue at its current rotation table.
create or replace function ferry_queue.refresh_capture_functions(i_queue_id integer)
returns integer
language plpgsql as $$
declare
    r record;
    v_count integer := 0;
begin
    for r in select cf_name, cf_pkey, cf_template from ferry_queue.capture_function
              where cf_queue = i_queue_id
    loop
        perform ferry_queue.install_capture_function(
            i_queue_id, r.cf_name,
            coalesce(r.cf_template, ferry_queue.plain_capture_template(r.cf_pkey)));
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;

-- Drop the templated functions of a queue that no trigger uses any more.
create function ferry_queue.prune_capture_functions(i_queue_id integer) returns integer
language plpgsql as $$
declare
    r record;
    v_count integer := 0;
begin
    for r in select c.cf_name from ferry_queue.capture_function c
              where c.cf_queue = i_queue_id and c.cf_template is not null
                and not exists (
                    select 1 from pg_trigger t
                     where t.tgfoid = to_regprocedure(format('ferry_queue.%I()', c.cf_name)))
    loop
        execute format('drop function if exists ferry_queue.%I()', r.cf_name);
        delete from ferry_queue.capture_function
         where cf_queue = i_queue_id and cf_name = r.cf_name;
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;

-- A row image of i_row ('new' or 'old') as text: the whole row, or only i_cols.
create function ferry_queue.capture_image(i_row text, i_cols text[]) returns text
language sql immutable as $$
    select case when i_cols is null then format('row_to_json(%s)::text', i_row)
                else format('(select row_to_json(_ferry_image)::text'
                            ' from (select %s) as _ferry_image)',
                            (select string_agg(format('%s.%I', i_row, c), ', ' order by n)
                               from unnest(i_cols) with ordinality as u(c, n)))
           end
$$;

-- One statement queuing an event of kind i_kind about i_row.  With i_from (the table's
-- name, quoted) the row is also a FROM item of that name, so that expressions written as
-- on the table (when=, ev_extra*=) see its columns; i_where filters it.
create function ferry_queue.capture_insert(
    i_kind text, i_row text, i_data text, i_extra text[], i_from text, i_where text)
returns text
language sql immutable as $$
    select case when i_from is null then
        format(E'insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data,'
               ' ev_extra1, ev_extra2, ev_extra3, ev_extra4)\n            values'
               ' (@@ferry_part@@, nextval(@@ferry_event_seq@@), %L || tg_argv[2], %s,'
               ' tg_argv[1], %s, %s, %s);',
               i_kind || ':', i_data, i_extra[1], i_extra[2], i_extra[3])
    else
        format(E'insert into @@ferry_event_table@@ (ev_part, ev_id, ev_type, ev_data,'
               ' ev_extra1, ev_extra2, ev_extra3, ev_extra4)\n            select'
               ' @@ferry_part@@, nextval(@@ferry_event_seq@@), %L || tg_argv[2], %s,'
               ' tg_argv[1], %s, %s, %s\n              from (select %s.*) as %s%s;',
               i_kind || ':', i_data, i_extra[1], i_extra[2], i_extra[3], i_row, i_from,
               coalesce(' where (' || i_where || ')', ''))
    end
$$;

-- Whether a spec needs nothing but the plain function of its key.
create function ferry_queue.plain_capture(i_spec jsonb) returns boolean
language sql immutable as $$
    select jsonb_array_length(coalesce(i_spec->'key', '[]')) > 0
       and jsonb_array_length(coalesce(i_spec->'ignore', '[]')) = 0
       and i_spec->>'when' is null and i_spec->>'ev_extra2' is null
       and i_spec->>'ev_extra3' is null and i_spec->>'ev_extra4' is null
       and not coalesce((i_spec->>'backup')::boolean, false)
       and not coalesce((i_spec->>'before')::boolean, false)
       and not coalesce((i_spec->>'skip')::boolean, false)
$$;

-- The template of the capture function of i_table under i_spec (see the head comment).
create function ferry_queue.capture_template(i_table regclass, i_spec jsonb) returns text
language plpgsql stable as $$
declare
    v_key    text[] := array(select jsonb_array_elements_text(coalesce(i_spec->'key', '[]')));
    v_ignore text[] := array(select jsonb_array_elements_text(coalesce(i_spec->'ignore', '[]')));
    v_when   text := i_spec->>'when';
    v_skip   boolean := coalesce((i_spec->>'skip')::boolean, false);
    v_before boolean := coalesce((i_spec->>'before')::boolean, false) or v_skip;
    -- A keyless table's UPDATE always carries the old row: it is the row's identity.
    v_backup boolean := coalesce((i_spec->>'backup')::boolean, false)
                        or cardinality(v_key) = 0;
    v_cols   text[];  -- the captured columns (every column but the ignored ones)
    v_ign    text[];  -- the ignored columns that exist
    v_from   text;
    v_extra  text[];
    v_upd    text[];
    v_new    text;
    v_old    text;
    v_body   text;
begin
    select array_agg(a.attname::text order by a.attnum)
                filter (where a.attname::text <> all(v_ignore)),
           array_agg(a.attname::text order by a.attnum)
                filter (where a.attname::text = any(v_ignore))
      into v_cols, v_ign
      from pg_attribute a
     where a.attrelid = i_table and a.attnum > 0 and not a.attisdropped;
    if v_cols is null then
        raise exception 'capture of %: no column left to capture', i_table;
    end if;
    if v_when is not null or i_spec->>'ev_extra2' is not null
       or i_spec->>'ev_extra3' is not null or i_spec->>'ev_extra4' is not null then
        select quote_ident(relname) into v_from from pg_class where oid = i_table;
    end if;
    v_new := ferry_queue.capture_image('new', case when v_ign is null then null else v_cols end);
    v_old := ferry_queue.capture_image('old', case when v_ign is null then null else v_cols end);
    v_extra := array[coalesce('(' || (i_spec->>'ev_extra2') || ')::text', 'null'),
                     coalesce('(' || (i_spec->>'ev_extra3') || ')::text', 'null'),
                     coalesce('(' || (i_spec->>'ev_extra4') || ')::text', 'null')];
    -- An UPDATE queued as one U event carries the old row in ev_extra2 with backup.
    v_upd := v_extra;
    if v_backup then
        v_upd[1] := v_old;
    end if;
    v_body := E'begin\n    <<capture>>\n    begin\n'
        || E'        if tg_op = ''INSERT'' then\n            '
        || ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, v_when)
        || E'\n        elsif tg_op = ''DELETE'' then\n            '
        || ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, v_when)
        || E'\n        else\n';
    if v_when is not null then
        -- The row left the condition: a delete; it entered it: an insert.
        v_body := v_body || format(
            E'            v_old := coalesce((select (%s) from (select old.*) as %s), false);\n'
            '            v_new := coalesce((select (%s) from (select new.*) as %s), false);\n'
            '            if not v_new then\n'
            '                if v_old then\n                    %s\n                end if;\n'
            '                exit capture;\n'
            '            elsif not v_old then\n                %s\n'
            '                exit capture;\n            end if;\n',
            v_when, v_from, v_when, v_from,
            ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, null),
            ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, null));
    end if;
    if v_ign is not null then
        -- Only ignored columns changed: nothing to queue.  (A change of nothing at all is
        -- queued, as without options.)  Compared by binary image: any type, no operator.
        v_body := v_body || format(
            E'            if record_image_eq(row(%s), row(%s))\n'
            '               and not record_image_eq(row(%s), row(%s)) then\n'
            '                exit capture;\n            end if;\n',
            (select string_agg(format('old.%I', c), ', ') from unnest(v_cols) c),
            (select string_agg(format('new.%I', c), ', ') from unnest(v_cols) c),
            (select string_agg(format('old.%I', c), ', ') from unnest(v_ign) c),
            (select string_agg(format('new.%I', c), ', ') from unnest(v_ign) c));
    end if;
    if cardinality(v_key) > 0 then
        -- Key change: a delete of the old key, then an insert of the new row.
        v_body := v_body || format(
            E'            if not record_image_eq(row(%s), row(%s)) then\n'
            '                %s\n                %s\n'
            '                exit capture;\n            end if;\n',
            (select string_agg(format('old.%I', c), ', ') from unnest(v_key) c),
            (select string_agg(format('new.%I', c), ', ') from unnest(v_key) c),
            ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, null),
            ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, null));
    end if;
    v_body := v_body || '            '
        || ferry_queue.capture_insert('U', 'new', v_new, v_upd, v_from, null)
        || E'\n        end if;\n    end capture;\n';
    if v_before and not v_skip then
        v_body := v_body || E'    if tg_op = ''DELETE'' then\n        return old;\n    end if;\n'
                         || E'    return new;\nend;\n';
    else
        -- After the write, or skip: a BEFORE trigger returning null cancels the write.
        v_body := v_body || E'    return null;\nend;\n';
    end if;
    if v_when is not null then
        v_body := E'declare\n    v_old boolean;\n    v_new boolean;\n' || v_body;
    end if;
    return v_body;
end;
$$;

-- Drop the queue's row and truncate triggers of tbl (capture or deny), keeping functions.
create function ferry_queue.drop_capture_triggers(i_queue text, i_table regclass)
returns integer
language plpgsql as $$
begin
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_capture', i_table);
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_truncate', i_table);
    return 1;
end;
$$;

-- Detach also drops the templated functions nobody uses any more.
create or replace function ferry_queue.detach_capture(queue text, tbl regclass)
returns integer
language plpgsql as $$
declare
    v_id integer;
begin
    perform ferry_queue.drop_capture_triggers(detach_capture.queue, tbl);
    select queue_id into v_id from ferry_queue.queue where queue_name = detach_capture.queue;
    if found then
        perform ferry_queue.prune_capture_functions(v_id);
    end if;
    return 1;
end;
$$;

-- (Re)create the capture triggers of queue on tbl as spec says (see the head comment);
-- returns the row trigger's function.  One call replaces the old triggers, so in one
-- transaction no write of the table goes uncaptured.
create function ferry_queue.attach_capture_spec(queue text, tbl regclass, spec jsonb)
returns text
language plpgsql as $$
declare
    v_queue  text := attach_capture_spec.queue;
    v_key    text[];
    v_ops    text := coalesce(spec->>'ops', 'IUD');
    v_events text;
    v_timing text := 'after';
    v_name   text;
    v_fn     text;
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
    if ferry_queue.plain_capture(spec) then
        v_fn := ferry_queue.capture_function(q.queue_id, v_key);
    else
        v_fn := ferry_queue.templated_capture_function(
            q.queue_id, v_key, ferry_queue.capture_template(tbl, spec));
    end if;
    perform ferry_queue.drop_capture_triggers(v_queue, tbl);
    execute format('create trigger %I %s %s on %s'
                   ' for each row execute function ferry_queue.%I(%L, %L, %L)',
                   '_ferry_' || v_queue || '_capture', v_timing, v_events, tbl, v_fn,
                   v_queue, v_name,
                   coalesce((select string_agg(quote_ident(x), ',') from unnest(v_key) x), ''));
    execute format('create trigger %I after truncate on %s'
                   ' for each statement execute function ferry_queue.capture_truncate(%L, %L)',
                   '_ferry_' || v_queue || '_truncate', tbl, v_queue, v_name);
    perform ferry_queue.prune_capture_functions(q.queue_id);
    return v_fn;
end;
$$;
