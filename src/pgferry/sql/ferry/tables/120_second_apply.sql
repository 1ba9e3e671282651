-- ferry: tables of a large batch applied on the worker's second connection.
--
-- A large batch may apply some of its tables on a second subscriber connection, in a
-- transaction of its own that commits just before the main one (which records the tick).
-- That transaction writes one row here per table it applied, with what it found.  A worker
-- that fails or stops between the two commits finds these rows when it takes the batch
-- again, skips those tables and counts their divergence from here: every table is applied
-- exactly once.  The main transaction deletes the consumer's rows when it records the tick.

create table ferry.applied_part (
    queue_name      text    not null,
    consumer_name   text    not null,
    tick_id         bigint  not null,           -- the tick that closes the batch
    table_name      text    not null,           -- queue-visible source name
    dest            text    not null,           -- the destination, schema.name
    upserts         bigint  not null default 0,
    deletes         bigint  not null default 0,
    recreated       bigint  not null default 0, -- rows an update inserted: missing here
    missing_deletes bigint  not null default 0, -- deletes that found no row
    primary key (queue_name, consumer_name, tick_id, table_name)
);
