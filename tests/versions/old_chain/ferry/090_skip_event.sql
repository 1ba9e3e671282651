-- Events an operator chose to skip, and the event a worker is stuck on.
--
-- A queued script that fails on a node stops that node's replay at the script (its
-- position is kept, the error shown by status).  failed_event says which event it is, so
-- that `skip-event` can show it before the operator confirms; skipped_event records the
-- decision, and replay passes over that event while still applying the rest of its batch.

create table ferry.failed_event (
    queue_name      text        not null,
    consumer_name   text        not null,
    tick_id         bigint      not null,       -- the tick that closes the failing batch
    ev_id           bigint      not null,
    ev_type         text        not null,
    ev_extra1       text,
    error           text        not null,
    failed_at       timestamptz not null default now(),
    primary key (queue_name, consumer_name)
);

create table ferry.skipped_event (
    queue_name      text        not null,
    tick_id         bigint      not null,
    ev_id           bigint      not null,
    ev_type         text        not null,
    ev_extra1       text,
    ev_data         text,
    error           text,
    skipped_by      text        not null default current_user,
    skipped_at      timestamptz not null default now(),
    primary key (queue_name, tick_id, ev_id)
);
