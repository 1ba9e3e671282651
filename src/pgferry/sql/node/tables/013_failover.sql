-- ferry_node: what a subscriber keeps to reconcile with a provider that failed over.
--
-- applied_tick: one row per batch applied on the node's own stream, written in the batch's
-- transaction: the tick it ended at (id and the provider's time of it, which together name
-- the tick) and the tables whose rows it changed.  When the provider fails over to a standby
-- that lacked its last ticks, the newest row whose tick the new provider holds (same id,
-- same time) is the last tick both share, and the rows after it name the tables to repair.
-- Rows older than failover_history are deleted as batches are applied.
--
-- lost_after_failover: what the new provider lost, saved before the repair: each row this
-- node held, in a table changed after the last common tick, that the new provider lacks or
-- holds otherwise (its row beside, NULL when it has none).  Kept until the DBA deletes it.

create table ferry_node.applied_tick (
    queue_name    text        not null,
    consumer_name text        not null,
    tick_id       bigint      not null,
    tick_time     timestamptz,
    tables        text[]      not null default '{}',
    primary key (queue_name, consumer_name, tick_id)
);

create index applied_tick_time on ferry_node.applied_tick (queue_name, consumer_name, tick_time);

create table ferry_node.lost_after_failover (
    lost_id       bigserial   primary key,
    queue_name    text        not null,
    provider_node text,
    found_at      timestamptz not null default now(),
    common_tick   bigint      not null,  -- the last tick both sides share
    lost_tick     bigint      not null,  -- the last tick applied here from the old provider
    table_name    text        not null,
    row_key       text        not null,  -- the key's values, as a row literal
    held_here     jsonb       not null,  -- this node's row
    on_provider   jsonb                  -- the new provider's row, NULL when it has none
);
