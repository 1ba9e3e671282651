-- Queue version 1, part 9 of 9: capture (the capture_function table, generated row-trigger
-- functions, the truncate and deny-write triggers, attach_capture, detach_capture).

-- ---------------------------------------------------------------------------------------
-- capture triggers (event format: docs/events.md)
--
-- Row trigger arguments, computed once by attach_capture so the per-row work is small:
--   0 queue name, 1 table as %I.%I (ev_extra1), 2 primary-key list for ev_type.
--
-- Row-trigger functions are generated: ferry_queue.capture_<queue_id>_<n>(), one per queue
-- and primary-key column list (PL/pgSQL compiles a trigger function per trigger, so tables
-- with the same key columns share one).  Each names the queue's *current* rotation table,
-- its sequence and the key columns in static SQL, so a row costs one cached-plan INSERT
-- straight into that table: no EXECUTE, no lookup of the current table, no tuple routing
-- through the partitioned parent, and a key-change test on typed columns (testing keys
-- generically through jsonb would cost more than all the rest).  Every rotation rewrites
-- the functions; a writer picks up the new one at its next transaction or lock, and one
-- that still adds to the previous table is safe because rotation only truncates a table
-- whose every event all consumers have passed (see maint_rotate_tables_step1).

create table ferry_queue.capture_function (
    cf_queue    integer not null references ferry_queue.queue on delete cascade,
    cf_pkey     text[]  not null,
    cf_name     text    not null unique,
    primary key (cf_queue, cf_pkey)
);

-- (Re)write the capture function of a queue for a primary-key column list.
create function ferry_queue.capture_function(i_queue_id integer, i_pkey text[])
returns text
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_name text;
    v_body text;
begin
    select * into q from ferry_queue.queue where queue_id = i_queue_id;
    select cf_name into v_name from ferry_queue.capture_function
     where cf_queue = i_queue_id and cf_pkey = i_pkey;
    if v_name is null then
        v_name := format('capture_%s_%s', i_queue_id,
                         (select count(*) + 1 from ferry_queue.capture_function
                           where cf_queue = i_queue_id));
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name)
        values (i_queue_id, i_pkey, v_name);
    end if;
    v_body := $template$
begin
    if tg_op = 'INSERT' then
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    elsif tg_op = 'DELETE' then
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
    elsif @KEY_CHANGED@ then
        -- Key change: a delete of the old key, then an insert of the new row.
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    else
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'U:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    end if;
    return null;
end;
$template$;
    v_body := replace(v_body, '@KEY_CHANGED@',
        (select string_agg(format('old.%I is distinct from new.%I', k, k), ' or ')
           from unnest(i_pkey) k));
    v_body := replace(v_body, '@TABLE@',
        format('ferry_queue.%I', format('event_%s_%s', q.queue_id, q.queue_cur_table)));
    v_body := replace(v_body, '@PART@', (q.queue_id * 10 + q.queue_cur_table)::text);
    v_body := replace(v_body, '@SEQ@', quote_literal(q.queue_event_seq::text) || '::regclass');
    execute format('create or replace function ferry_queue.%I() returns trigger'
                   ' language plpgsql as %L', v_name, v_body);
    return v_name;
end;
$$;

-- Point every capture function of a queue at its current rotation table.
create function ferry_queue.refresh_capture_functions(i_queue_id integer) returns integer
language plpgsql as $$
declare
    v_pkey text[];
    v_count integer := 0;
begin
    for v_pkey in select cf_pkey from ferry_queue.capture_function where cf_queue = i_queue_id
    loop
        perform ferry_queue.capture_function(i_queue_id, v_pkey);
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;

-- Statement trigger: TRUNCATE becomes one 'R' event.  Arguments: queue name, table.
create function ferry_queue.capture_truncate() returns trigger
language plpgsql as $$
declare
    v_part integer;
    v_seq  regclass;
begin
    select queue_id * 10 + queue_cur_table, queue_event_seq into v_part, v_seq
      from ferry_queue.queue where queue_name = tg_argv[0];
    if not found then
        raise exception 'Unknown queue: %', tg_argv[0] using errcode = 'P0002';
    end if;
    insert into ferry_queue.event (ev_part, ev_id, ev_type, ev_data, ev_extra1)
    values (v_part, nextval(v_seq), 'R', null, tg_argv[1]);
    return null;
end;
$$;

-- Subscriber tables: direct writes are refused.  Replay runs with
-- session_replication_role = replica, where ordinary triggers do not fire.
create function ferry_queue.deny_write() returns trigger
language plpgsql as $$
begin
    raise exception 'Table ''%'' to queue ''%'': change not allowed (%)',
        tg_argv[1], tg_argv[0], tg_op
        using errcode = '42501';
end;
$$;

create function ferry_queue.detach_capture(queue text, tbl regclass) returns integer
language plpgsql as $$
declare
    v_queue text := detach_capture.queue;
begin
    execute format('drop trigger if exists %I on %s', '_ferry_' || v_queue || '_capture', tbl);
    execute format('drop trigger if exists %I on %s', '_ferry_' || v_queue || '_truncate', tbl);
    return 1;
end;
$$;

-- (Re)create the capture triggers of queue on tbl; deny => true makes them refuse writes.
create function ferry_queue.attach_capture(
    queue text, tbl regclass, deny boolean default false)
returns integer
language plpgsql as $$
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
    execute format('create trigger %I after insert or update or delete on %s'
                   ' for each row execute function ferry_queue.%I(%L, %L, %L)',
                   v_row, tbl, ferry_queue.capture_function(q.queue_id, v_pk), v_queue, v_name,
                   (select string_agg(quote_ident(x), ',') from unnest(v_pk) x));
    execute format('create trigger %I after truncate on %s'
                   ' for each statement execute function ferry_queue.capture_truncate(%L, %L)',
                   v_trunc, tbl, v_queue, v_name);
    return 1;
end;
$$;
