-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.install_capture_function(integer, text, text)
--
--     (Re)write function i_name from a template, for the queue's current rotation table.
--     Returns i_name.
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
