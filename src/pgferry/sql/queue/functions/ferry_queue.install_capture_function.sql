-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.install_capture_function(integer, text, text)
--
--     (Re)write function i_name from a template, for the queue's current rotation table,
--     its body opening with the ticker's wake-up (wake_ticker) and the check that the table
--     written is the table its events name.  Returns i_name.
--
--     The queue is a trust boundary: a writer of a captured table needs only its table
--     privileges, never a right on ferry_queue.  So the function runs with its owner's rights
--     (SECURITY DEFINER: the role that ran add-table or the rotation, which owns the event
--     tables), and nobody else may run it (EXECUTE revoked from PUBLIC: CREATE TRIGGER asks
--     for it, firing does not), so that no other role can attach it to a table of its own.
--     Its events name the table of the trigger's second argument: a trigger firing on
--     another table is refused (a partition fires its parent's trigger: allowed; so is a name
--     that no table has any more, a rename capture did not follow: the subscribers know the
--     table by it), so that no trigger, however made, queues rows under a name they lack.
--
--     The writer's search_path must not reach into the function.  A templated function
--     (capture options: operator-written expressions) runs with search_path pinned to
--     pg_catalog, pg_temp.  A plain function names every function, operator and type with
--     its schema instead (plain_capture_template and the prelude below): the same effect,
--     without the cost of setting search_path on every row (measured: BENCHMARKS.md).
--
-- Parameters:
--     i_queue_id integer
--     i_name text
--     i_template text
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.capture_function
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.install_capture_function(
    i_queue_id integer, i_name text, i_template text)
returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q       ferry_queue.queue;
    v_body  text;
    v_at    integer;
    v_key   record;
    v_plain boolean;
begin
    select * into q from ferry_queue.queue where queue_id = i_queue_id;
    select cf_template is null into v_plain from ferry_queue.capture_function
     where cf_queue = i_queue_id and cf_name = i_name;
    v_body := replace(i_template, '@@ferry_event_table@@',
        format('ferry_queue.%I', format('event_%s_%s', q.queue_id, q.queue_cur_table)));
    v_body := replace(v_body, '@@ferry_part@@', (q.queue_id * 10 + q.queue_cur_table)::text);
    v_body := replace(v_body, '@@ferry_event_seq@@',
        quote_literal(q.queue_event_seq::text) || '::pg_catalog.regclass');
    -- First of all, the ticker's wake-up (wake_ticker): a failed try of the sleeping
    -- ticker's lock is a lookup in the lock table; a success keeps the ticker awake until
    -- commit, and later rows find the lock held by their own transaction (cheaper still).
    -- Then the table's check: a comparison of names, and the catalog only when they differ.
    -- After the first "begin" line: the templates' declarations have none.
    v_at := position(E'begin\n' in v_body);
    if v_at > 0 then
        select * into v_key from ferry_queue.ticker_asleep();
        v_body := overlay(v_body placing format(
            E'    if not pg_catalog.pg_try_advisory_xact_lock_shared(%s, %s)\n'
            '       and not coalesce(pg_catalog.current_setting(''ferry_queue.ticker_woken'','
            ' true) operator(pg_catalog.=) ''1'', false) then\n'
            '        perform ferry_queue.wake_ticker();\n'
            '    end if;\n'
            '    if tg_argv[1] operator(pg_catalog.<>)'
            ' pg_catalog.format(''%%I.%%I'', tg_table_schema, tg_table_name)\n'
            '       and pg_catalog.to_regclass(tg_argv[1])::pg_catalog.oid'
            ' operator(pg_catalog.<>) tg_relid then\n'
            '        if not exists (select from pg_catalog.pg_partition_ancestors(tg_relid) a\n'
            '                        where a.relid::pg_catalog.oid operator(pg_catalog.=)'
            ' pg_catalog.to_regclass(tg_argv[1])::pg_catalog.oid) then\n'
            '            raise exception ''capture of %%: trigger on %%, another table'','
            ' tg_argv[1], tg_relid::pg_catalog.regclass using errcode = ''42501'';\n'
            '        end if;\n'
            '    end if;\n',
            v_key.k1, v_key.k2) from v_at + length(E'begin\n') for 0);
    end if;
    execute format('create or replace function ferry_queue.%I() returns trigger'
                   ' language plpgsql security definer%s as %L', i_name,
                   case when v_plain then ''
                        -- A statement function's plans are made once per session, for
                        -- the size of the first statement's transition tables: joins by
                        -- hash whatever the size (a merge join sorts, a nested loop is
                        -- quadratic), and no JIT (it costs more than it saves here).
                        when i_template like '-- statement capture%'
                        then ' set search_path = pg_catalog, pg_temp set jit = off'
                             ' set enable_mergejoin = off set enable_nestloop = off'
                        else ' set search_path = pg_catalog, pg_temp' end,
                   v_body);
    -- A new function is anyone's to run; CREATE OR REPLACE keeps the privileges it has.
    execute format('revoke all on function ferry_queue.%I() from public', i_name);
    return i_name;
end;
$$;
