-- ferry: the replication registry of one node.
--
-- table_info lists the tables of a queue known on this node; "local" ones are replicated
-- into (or captured from) this database.  merge_state follows the original's states:
-- NULL (copy pending) -> 'in-copy' -> 'catching-up' -> 'ok'.  copy_snapshot is the snapshot
-- under which the initial copy read the source: replay skips events visible in it.
-- copy_group ties together the tables added by one command, so that the worker copies them
-- from one snapshot.

create schema if not exists ferry;

create table ferry.table_info (
    queue_name      text    not null,
    table_name      text    not null,           -- queue-visible name, 'schema.table' (quoted as %I.%I)
    local           boolean not null default false,
    merge_state     text    check (merge_state in ('in-copy', 'catching-up', 'ok')),
    dest_table      text,                       -- local name when different ('schema.table')
    copy_condition  text,                       -- WHERE expression on the source table
    copy_snapshot   pg_snapshot,                -- snapshot the initial copy read
    skip_truncate   boolean not null default false,
    table_attrs     jsonb   not null default '{}',
    copy_group      bigint,                     -- tables added in one command share one id
    max_parallel_copy integer,                  -- --max-parallel-copy, NULL = parallel_copies
    added_at        timestamptz not null default now(),
    primary key (queue_name, table_name)
);

-- One value per add-table / resync command: the worker copies a group under one snapshot.
create sequence ferry.copy_group_seq;

create table ferry.seq_info (
    queue_name      text    not null,
    seq_name        text    not null,           -- 'schema.sequence'
    local           boolean not null default false,
    last_value      bigint,
    primary key (queue_name, seq_name)
);

-- Scripts run by `execute`, recorded so each runs once per node.
create table ferry.applied_execute (
    queue_name      text    not null,
    file_name       text    not null,
    file_hash       text    not null,
    file_sql        text    not null,
    executed_at     timestamptz not null default now(),
    primary key (queue_name, file_name)
);
