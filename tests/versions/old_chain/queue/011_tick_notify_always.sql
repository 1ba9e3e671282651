-- ferry_queue: every tick is announced, also those a branch mirrors.
--
-- A branch's worker makes its provider's ticks in its own queue from a session in
-- session_replication_role = replica, where an ordinary trigger does not fire: the nodes
-- below the branch heard of none of them and found them only when they next asked.

alter table ferry_queue.tick enable always trigger notify_tick;
