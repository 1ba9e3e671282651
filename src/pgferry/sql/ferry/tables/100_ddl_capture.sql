-- ferry: DDL captured on a root (`capture-ddl on`).
--
-- A row per queue whose root turns DDL on its replicated tables into queued EXECUTE events
-- (event triggers that only `capture-ddl on` creates, since they need a superuser).
-- indexes: CREATE INDEX / DROP INDEX on replicated tables are captured too.

create table ferry.ddl_capture (
    queue_name      text        primary key,
    indexes         boolean     not null default true,
    turned_on_by    text        not null default current_user,
    turned_on_at    timestamptz not null default now()
);
