-- Queue version 1 is the files 001_<part>_*.sql, run in part order as one script.
-- Part 1 of 9: the schema, its tables (queue, event, tick, subscription, retry_queue)
-- and the batch id sequence.

-- ferry_queue: the transactional event queue (ticks, batches, consumers, retry, rotation).
--
-- Events of every queue live in one partitioned table, ferry_queue.event, partitioned by
-- ev_part = queue_id * 10 + table number.  Each queue owns three rotation partitions; a
-- writer inserts through the parent with static SQL (a cached plan), and rotation empties
-- a partition with TRUNCATE once every consumer has passed it.
--
-- A tick stores the snapshot of the transaction that made it.  A batch is the span between
-- two ticks (prev, cur] and holds the events whose transaction is visible in cur's snapshot
-- and not in prev's: membership by visibility, never by commit time or event id.

create schema if not exists ferry_queue;

create table ferry_queue.queue (
    queue_id                 serial      primary key,
    queue_name               text        not null unique,
    queue_ntables            integer     not null default 3 check (queue_ntables between 2 and 10),
    queue_cur_table          integer     not null default 0,
    queue_rotation_period    interval    not null default '2 hours',
    queue_switch_step1       xid8        not null default pg_current_xact_id(),
    queue_switch_step2       xid8                 default pg_current_xact_id(),
    queue_switch_time        timestamptz not null default now(),
    queue_external_ticker    boolean     not null default false,
    queue_ticker_paused      boolean     not null default false,
    queue_ticker_max_count   integer     not null default 500,
    queue_ticker_max_lag     interval    not null default '3 seconds',
    queue_ticker_idle_period interval    not null default '1 minute',
    queue_force_tick         boolean     not null default false,
    queue_event_seq          regclass    not null,
    queue_tick_seq           regclass    not null,
    queue_extra_maint        text[]
);

-- Parent of every queue's event partitions.  ev_txid is the writer's xid8, compared with
-- tick snapshots through pg_visible_in_snapshot().
create table ferry_queue.event (
    ev_part     integer     not null,
    ev_id       bigint      not null,
    ev_time     timestamptz not null default now(),
    ev_txid     xid8        not null default pg_current_xact_id(),
    ev_owner    integer,                 -- subscription id for retried events, NULL = everybody
    ev_retry    integer,                 -- NULL on first delivery, then the retry count
    ev_type     text,
    ev_data     text,
    ev_extra1   text,
    ev_extra2   text,
    ev_extra3   text,
    ev_extra4   text
) partition by list (ev_part);

create index event_txid_idx on ferry_queue.event (ev_txid);

create table ferry_queue.tick (
    tick_queue      integer     not null references ferry_queue.queue on delete cascade,
    tick_id         bigint      not null,
    tick_time       timestamptz not null default now(),
    tick_snapshot   pg_snapshot not null default pg_current_snapshot(),
    tick_event_seq  bigint      not null,
    primary key (tick_queue, tick_id)
);

create table ferry_queue.subscription (
    sub_id          serial      primary key,
    sub_queue       integer     not null references ferry_queue.queue on delete cascade,
    sub_consumer    text        not null,
    sub_last_tick   bigint      not null,   -- last finished tick
    sub_active      timestamptz not null default now(),
    sub_batch       bigint      unique,     -- open batch, NULL when none
    sub_next_tick   bigint,                 -- closing tick of the open batch
    unique (sub_queue, sub_consumer)
);

create table ferry_queue.retry_queue (
    ev_retry_after  timestamptz not null,
    ev_queue        integer     not null references ferry_queue.queue on delete cascade,
    ev_owner        integer     not null references ferry_queue.subscription on delete cascade,
    ev_id           bigint      not null,
    ev_time         timestamptz not null,
    ev_txid         xid8,
    ev_retry        integer,
    ev_type         text,
    ev_data         text,
    ev_extra1       text,
    ev_extra2       text,
    ev_extra3       text,
    ev_extra4       text,
    primary key (ev_owner, ev_id)
);
create index retry_queue_after_idx on ferry_queue.retry_queue (ev_retry_after);

create sequence ferry_queue.batch_id_seq;
