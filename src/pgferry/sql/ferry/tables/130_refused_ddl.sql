-- ferry: captured DDL events a subscriber refused to run.
--
-- An EXECUTE event named as capture-ddl names its statements ('ddl <id>: ...') is parsed
-- again on every subscriber before it runs; one that is not exactly one ALTER TABLE,
-- COMMENT ON, CREATE INDEX or DROP INDEX on the table it names is not run.  Replay passes
-- over it and goes on; the row here says which event it was and why, and `status` shows
-- how many there are and the last one.  Written in the apply transaction that passed over
-- the event, so a batch applied again records it once.

create table ferry.refused_event (
    queue_name      text        not null,
    tick_id         bigint      not null,       -- the tick that closes the event's batch
    ev_id           bigint      not null,
    ev_extra1       text,                       -- the event's name
    ev_data         text,                       -- the statement text, as queued
    reason          text        not null,
    refused_at      timestamptz not null default now(),
    primary key (queue_name, tick_id, ev_id)
);
