-- ferry_queue: a batch is opened with one update of the consumer's row.
--
-- next_batch_custom and next_batch_upto recorded the call (sub_active) and then, when a tick
-- was there, the batch (sub_batch, sub_next_tick): two new row versions for every batch.
-- Both now end in open_batch, which writes the batch and sub_active in one update, and
-- sub_active alone only when no batch opens: one row version, one WAL record, less for
-- vacuum, per batch and consumer.  Nothing else changes.

-- The batch of a locked consumer up to tick i_next (null: no batch, the call recorded).
create function ferry_queue.open_batch(i_sub_id integer, i_next bigint) returns bigint
language plpgsql as $$
declare
    v_batch bigint;
begin
    if i_next is null then
        update ferry_queue.subscription set sub_active = now() where sub_id = i_sub_id;
        return null;
    end if;
    v_batch := nextval('ferry_queue.batch_id_seq');
    update ferry_queue.subscription
       set sub_batch = v_batch, sub_next_tick = i_next, sub_active = now()
     where sub_id = i_sub_id;
    return v_batch;
end;
$$;

create or replace function ferry_queue.next_batch_custom(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval)
returns bigint
language plpgsql as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    -- Lock the subscription: one open batch per consumer, even with racing callers.
    select * into s from ferry_queue.subscription where sub_id = s.sub_id for update;
    if s.sub_batch is not null then
        update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
        return s.sub_batch;
    end if;
    select * into v_prev from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_last_tick;
    if not found then
        raise exception 'Last tick % of consumer % on queue % is gone',
            s.sub_last_tick, i_consumer, i_queue;
    end if;
    if i_min_count is null and i_min_interval is null then
        select tick_id into v_next from ferry_queue.tick
         where tick_queue = s.sub_queue and tick_id > s.sub_last_tick
           and (i_min_lag is null or tick_time <= now() - i_min_lag)
         order by tick_id limit 1;
    else
        -- The first tick that closes a batch big enough (events or time span): far
        -- behind consumers get one large batch instead of many small ones.
        select tick_id into v_next from ferry_queue.tick
         where tick_queue = s.sub_queue and tick_id > s.sub_last_tick
           and (i_min_lag is null or tick_time <= now() - i_min_lag)
           and ((i_min_count is not null
                 and tick_event_seq - v_prev.tick_event_seq >= i_min_count)
             or (i_min_interval is not null
                 and tick_time - v_prev.tick_time >= i_min_interval))
         order by tick_id limit 1;
    end if;
    return ferry_queue.open_batch(s.sub_id, v_next);
end;
$$;

create or replace function ferry_queue.next_batch_upto(
    i_queue text, i_consumer text, i_upto bigint, i_min_count integer)
returns bigint
language plpgsql as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    select * into s from ferry_queue.subscription where sub_id = s.sub_id for update;
    if s.sub_batch is not null then
        update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
        return s.sub_batch;
    end if;
    select * into v_prev from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_last_tick;
    if not found then
        raise exception 'Last tick % of consumer % on queue % is gone',
            s.sub_last_tick, i_consumer, i_queue;
    end if;
    select tick_id into v_next from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id > s.sub_last_tick and tick_id <= i_upto
       and (tick_id = i_upto or tick_event_seq - v_prev.tick_event_seq >= i_min_count)
     order by tick_id limit 1;
    return ferry_queue.open_batch(s.sub_id, v_next);
end;
$$;
