-- Queue version 1, part 4 of 9: consumers (register_consumer_at, register_consumer,
-- unregister_consumer).

-- ---------------------------------------------------------------------------------------
-- consumers

create function ferry_queue.register_consumer_at(i_queue text, i_consumer text, i_tick_id bigint)
returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    if i_consumer is null or i_consumer = '' then
        raise exception 'Consumer name must not be empty';
    end if;
    perform 1 from ferry_queue.tick where tick_queue = q.queue_id and tick_id = i_tick_id;
    if not found then
        raise exception 'Tick % not found on queue %', i_tick_id, i_queue;
    end if;
    update ferry_queue.subscription
       set sub_last_tick = i_tick_id, sub_batch = null, sub_next_tick = null,
           sub_active = now()
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    insert into ferry_queue.subscription (sub_queue, sub_consumer, sub_last_tick)
    values (q.queue_id, i_consumer, i_tick_id);
    return 1;
end;
$$;

create function ferry_queue.register_consumer(i_queue text, i_consumer text) returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_tick bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    perform 1 from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    select max(tick_id) into v_tick from ferry_queue.tick where tick_queue = q.queue_id;
    if v_tick is null then
        raise exception 'No ticks for this queue: %', i_queue;
    end if;
    return ferry_queue.register_consumer_at(i_queue, i_consumer, v_tick);
end;
$$;

create function ferry_queue.unregister_consumer(i_queue text, i_consumer text) returns integer
language plpgsql as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    delete from ferry_queue.retry_queue where ev_owner = s.sub_id;
    delete from ferry_queue.subscription where sub_id = s.sub_id;
    return 1;
end;
$$;
