-- ferry_queue: a batch that ends no later than a given tick.
--
-- A copied group catches up with the main stream of its node through a consumer of its own
-- (see pgferry's apply/handover.py).  It must meet the main stream exactly at the main
-- stream's tick, so its batches end at the first tick that closes i_min_count events or at
-- i_upto, whichever comes first, never after i_upto.

create function ferry_queue.next_batch_upto(
    i_queue text, i_consumer text, i_upto bigint, i_min_count integer)
returns bigint
language plpgsql as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
    v_batch bigint;
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
    update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
    if v_next is null then
        return null;
    end if;
    v_batch := nextval('ferry_queue.batch_id_seq');
    update ferry_queue.subscription
       set sub_batch = v_batch, sub_next_tick = v_next
     where sub_id = s.sub_id;
    return v_batch;
end;
$$;
