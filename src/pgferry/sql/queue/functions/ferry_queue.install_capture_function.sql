-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.install_capture_function(integer, text, text)
--
--     (Re)write function i_name from a template, for the queue's current rotation table,
--     its body opening with the ticker's wake-up (wake_ticker).  Returns i_name.
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
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.install_capture_function(
    i_queue_id integer, i_name text, i_template text)
returns text
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_body text;
    v_at   integer;
    v_key  record;
begin
    select * into q from ferry_queue.queue where queue_id = i_queue_id;
    v_body := replace(i_template, '@@ferry_event_table@@',
        format('ferry_queue.%I', format('event_%s_%s', q.queue_id, q.queue_cur_table)));
    v_body := replace(v_body, '@@ferry_part@@', (q.queue_id * 10 + q.queue_cur_table)::text);
    v_body := replace(v_body, '@@ferry_event_seq@@',
        quote_literal(q.queue_event_seq::text) || '::regclass');
    -- First of all, the ticker's wake-up (wake_ticker): a failed try of the sleeping
    -- ticker's lock is a lookup in the lock table; a success keeps the ticker awake until
    -- commit, and later rows find the lock held by their own transaction (cheaper still).
    -- After the first "begin" line: the templates' declarations have none.
    v_at := position(E'begin\n' in v_body);
    if v_at > 0 then
        select * into v_key from ferry_queue.ticker_asleep();
        v_body := overlay(v_body placing format(
            E'    if not pg_try_advisory_xact_lock_shared(%s, %s)\n'
            '       and current_setting(''ferry_queue.ticker_woken'', true) is distinct from ''1'' then\n'
            '        perform ferry_queue.wake_ticker();\n'
            '    end if;\n',
            v_key.k1, v_key.k2) from v_at + length(E'begin\n') for 0);
    end if;
    execute format('create or replace function ferry_queue.%I() returns trigger'
                   ' language plpgsql as %L', i_name, v_body);
    return i_name;
end;
$$;
