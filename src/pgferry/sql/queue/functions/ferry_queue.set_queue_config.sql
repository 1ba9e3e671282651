-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.set_queue_config(text, text, text)
--
--     Set one setting of a queue (ticker_max_count, ticker_max_lag, ticker_idle_period,
--     ticker_paused, rotation_period, external_ticker; with or without the queue_ prefix).
--     Returns 1; an unknown setting raises.
--
-- Parameters:
--     i_queue text
--     i_param text
--     i_value text
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.set_queue_config(i_queue text, i_param text, i_value text)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
    v_col text;
begin
    q := ferry_queue.find_queue(i_queue);
    v_col := case when i_param like 'queue\_%' then i_param else 'queue_' || i_param end;
    if v_col not in ('queue_ticker_max_count', 'queue_ticker_max_lag',
                     'queue_ticker_idle_period', 'queue_ticker_paused',
                     'queue_rotation_period', 'queue_external_ticker') then
        raise exception 'Unknown queue setting: %', i_param;
    end if;
    execute format('update ferry_queue.queue set %I = %L where queue_id = %s',
                   v_col, i_value, q.queue_id);
    return 1;
end;
$$;
