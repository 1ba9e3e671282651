-- ferry_node: watermarks, what the cascade still needs from each node's queue.
--
-- Up: a branch's local watermark is the lowest tick its subtree still needs (its
-- subscribers' positions on its queue and the watermarks they reported, hence recursively
-- every node below it); a leaf's is its own position.  Each subscriber reports it to its
-- provider, which keeps a hold '.<node>.watermark' there (ferry_queue.set_hold): the
-- provider's rotation then keeps every tick and event any node below it may still need,
-- and the root keeps what the whole cascade needs.
--
-- Down: the root's lowest position over all of that is the global watermark.  Each branch
-- copies its provider's into a hold '.global_watermark' on its own queue, so that a branch
-- keeps what any node of the cascade needs and every live member can serve any other.
-- The hold is left out of the branch's local watermark, or the two would hold each other
-- in place for ever.

create function ferry_node.watermark_hold(i_node text) returns text
language sql immutable as $$ select '.' || i_node || '.watermark' $$;

create function ferry_node.local_watermark(i_queue text) returns bigint
language plpgsql stable as $$
declare
    n     ferry_node.node_info;
    v_own bigint;
begin
    select * into n from ferry_node.node_info where queue_name = i_queue;
    if not found then
        raise exception 'Node not initialized for queue %', i_queue using errcode = 'P0002';
    end if;
    select last_tick_id into v_own from ferry_node.local_state
     where queue_name = i_queue and consumer_name = n.worker_name;
    if n.node_type = 'leaf' then
        return v_own;
    end if;
    if n.node_type = 'root' then
        -- A root's recorded position is where it was created or promoted, not a need.
        v_own := null;
    end if;
    return least(ferry_queue.lowest_position(i_queue, array['.global_watermark']), v_own);
end;
$$;

-- What this node keeps for the whole cascade.  On a root, the lowest position of all; a
-- '.global_watermark' hold left from the node's days as a branch is dropped there, as on a
-- root it would keep everything for ever.  On a branch, its hold (its local watermark
-- until it has one).  A leaf keeps nothing.
create function ferry_node.global_watermark(i_queue text) returns bigint
language plpgsql as $$
declare
    v_type text;
    v_tick bigint;
begin
    select node_type into v_type from ferry_node.node_info where queue_name = i_queue;
    if not found then
        raise exception 'Node not initialized for queue %', i_queue using errcode = 'P0002';
    end if;
    if v_type = 'leaf' then
        return null;
    end if;
    if v_type = 'root' then
        perform ferry_queue.drop_hold(i_queue, '.global_watermark');
        return ferry_node.local_watermark(i_queue);
    end if;
    select c.last_tick into v_tick
      from ferry_queue.get_consumer_info(i_queue) c
     where c.consumer_name = '.global_watermark';
    return coalesce(v_tick, ferry_node.local_watermark(i_queue));
end;
$$;

-- On a provider: hold what subscriber i_node reported (see ferry_queue.set_hold for where
-- the hold lands).  Returns the hold's tick; NULL, and nothing held, when i_node is not a
-- subscriber here (any more: a late report after it moved away must not leave a hold
-- that nobody releases).  The subscriber row is locked, so unregistering it waits for
-- this transaction and then drops the hold too.
create function ferry_node.set_subscriber_watermark(i_queue text, i_node text, i_tick bigint)
returns bigint
language plpgsql as $$
declare
    v_type text;
begin
    select node_type into v_type from ferry_node.node_info where queue_name = i_queue;
    if not found or v_type = 'leaf' then
        raise exception 'Node has no queue % to hold a watermark in', i_queue;
    end if;
    perform 1 from ferry_node.subscriber_info
     where queue_name = i_queue and subscriber_node = i_node
       for share;
    if not found then
        return null;
    end if;
    return ferry_queue.set_hold(i_queue, ferry_node.watermark_hold(i_node), i_tick);
end;
$$;

-- On a branch: keep what the cascade needs from tick i_tick on.  Elsewhere nothing (NULL).
create function ferry_node.set_global_watermark(i_queue text, i_tick bigint) returns bigint
language plpgsql as $$
begin
    perform 1 from ferry_node.node_info where queue_name = i_queue and node_type = 'branch';
    if not found or i_tick is null then
        return null;
    end if;
    return ferry_queue.set_hold(i_queue, '.global_watermark', i_tick);
end;
$$;

-- Forget the holds kept for node i_node (its watermark, and a gravestone left for it).
create function ferry_node.drop_watermark(i_queue text, i_node text) returns integer
language plpgsql as $$
declare
    v_count integer := 0;
begin
    perform 1 from ferry_queue.queue where queue_name = i_queue;
    if not found then
        return 0;
    end if;
    if ferry_queue.drop_hold(i_queue, ferry_node.watermark_hold(i_node)) then
        v_count := v_count + 1;
    end if;
    if ferry_queue.drop_hold(i_queue, '.' || i_node || '.gravestone') then
        v_count := v_count + 1;
    end if;
    return v_count;
end;
$$;
