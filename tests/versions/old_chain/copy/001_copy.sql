-- ferry_copy: the copy job's bookkeeping in a copy's destination database.
--
-- range_done records every block range copied (inserted before the range's rows, in the
-- same transaction, so a retried task skips a range that is already in); saved_index keeps
-- the definitions of the secondary indexes dropped for the load, to be rebuilt after it.
--
-- This component stands alone: any database a copy writes into gets it, node or not.
-- Copies made before it was versioned created these same tables without a version record,
-- hence "if not exists": such a database adopts them as version 1.

create schema if not exists ferry_copy;

create table if not exists ferry_copy.range_done (
    copy_id     text    not null,
    dest_table  text    not null,
    range_no    integer not null,
    rows        bigint  not null default 0,
    done_at     timestamptz not null default now(),
    primary key (copy_id, dest_table, range_no)
);

create table if not exists ferry_copy.saved_index (
    dest_table  text not null,
    index_name  text not null,
    index_def   text not null,
    saved_at    timestamptz not null default now(),
    primary key (dest_table, index_name)
);
