-- ferry: compare / repair at one logical point without locking the source.
--
-- sync_tick records a tick whose snapshot is a snapshot the caller holds open (exported in
-- a REPEATABLE READ transaction): the source is read in exactly that state, and every
-- subscriber that has applied through this tick holds the same data.  The snapshot must
-- contain the previous tick's, or batches would overlap; the caller retries otherwise.
--
-- sync_request lives on the subscriber: compare asks the worker to post a snapshot taken
-- right after it applied a given tick ('wait' -> 'ready'), and drops the row when done,
-- which lets the worker release the snapshot.  With pause (repair --apply) the worker also
-- applies nothing more until then, so fixes computed at that tick stay right.

create table ferry.sync_request (
    queue_name      text    not null,
    consumer_name   text    not null,
    tick_id         bigint  not null,
    state           text    not null default 'wait' check (state in ('wait', 'ready', 'missed')),
    pause           boolean not null default false,  -- hold replay at the tick until dropped
    snapshot_id     text,
    requested_at    timestamptz not null default now(),
    primary key (queue_name, consumer_name)
);
