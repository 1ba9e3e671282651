-- ferry: replay stages rows in temporary tables of the applying session, typed like their
-- destination (see pgferry.replication.replay), so the shared text stage is gone.

drop table if exists ferry.replay_stage;
