-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.wake_ticker()
--
--     Called by a capture trigger that found the ticker asleep (it holds the advisory lock
--     of ferry_queue.ticker_asleep exclusively while it waits longer than its busy period):
--     a notification on the ticker's channel, ferry_queue_ticker, so that the first event
--     after a quiet spell gets its tick at once instead of at the ticker's next round.  Once
--     per transaction (the setting ferry_queue.ticker_woken).  No notification where it
--     could hurt the writer: a server that allows prepared transactions (PREPARE refuses a
--     transaction that notified) or a notification queue that is filling up (a listener that
--     reads nothing, such as a hung ticker: a full queue makes commits fail).  With its
--     owner's rights and a pinned search_path, as the capture functions that call it; EXECUTE
--     revoked from PUBLIC by the installer.
--
-- Returns:
--     void
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.wake_ticker() returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    perform pg_catalog.set_config('ferry_queue.ticker_woken', '1', true);
    if pg_catalog.current_setting('max_prepared_transactions')::integer = 0
       and pg_catalog.pg_notification_queue_usage() < 0.0001 then
        perform pg_catalog.pg_notify('ferry_queue_ticker', '');
    end if;
end;
$$;
