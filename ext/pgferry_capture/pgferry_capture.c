/*
 * pgferry_capture: the plain row capture of pgferry's queue, in C.
 *
 * ferry_queue.plain_row_capture() is the trigger function of a table captured without
 * capture options (ferry_queue.plain_capture(spec)): AFTER INSERT OR UPDATE OR DELETE FOR
 * EACH ROW, with the arguments (queue, table name as its events name it, key columns in
 * quote_ident form joined by ',').  It queues exactly the events of the PL/pgSQL plain
 * function (ferry_queue.plain_capture_template and the prelude of
 * ferry_queue.install_capture_function): 'I:'/'U:'/'D:' || key list, ev_data =
 * row_to_json(row)::text, ev_extra1 = the table name; an UPDATE changing the key (binary
 * image of the key columns, as record_image_eq compares them) a D of the old row, then an
 * I of the new.  Before its first event it tries the ticker's shared advisory lock and
 * wakes a sleeping ticker (ferry_queue.wake_ticker), and it refuses a table that is not
 * the one its events name nor one of its partitions.
 *
 * The trust boundary: the function is SECURITY INVOKER and closed to PUBLIC (so no role
 * but superusers, and roles they grant it to, may attach it).  The row image (the column
 * types' output functions) is made with the writer's own rights.  The queue's row is read
 * from ferry_queue.queue and the event written into the event table by this code, without
 * SQL (the row and index entries the executor would make), so no privilege of the
 * writer's is asked for; should the event table not have the shape this code knows, a
 * kept INSERT runs as the event table's owner instead.  The ticker's lock key (once per
 * session) and its wake-up run as the owner of ferry_queue.queue.  Each switch of user is
 * SECURITY_LOCAL_USERID_CHANGE, undone on error too.  The SQL it runs names every table
 * and function with its schema: the writer's search_path reaches nothing.
 *
 * Per row no SQL is parsed nor run: the queue's current event table and its sequence are
 * read once per transaction (a scan of ferry_queue.queue with the latest snapshot), and
 * the shape of each event table is checked once, again after any change to it.  A transaction keeps
 * the event table it found at its first event even if a rotation switches tables
 * meanwhile: its xid was assigned before that read, so it is below the xid that
 * rotation's second step records, and rotation empties a table only once every consumer
 * is past those (ferry_queue.maint_rotate_tables_step1; it also waits for the lock every
 * writer holds on the table it writes).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am_d.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/primnodes.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
#include "utils/xid8.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(pgferry_plain_row_capture);

/* The queue's state, read once per transaction; the plans live for the session. */
typedef struct QueueState
{
	char		name[NAMEDATALEN];	/* hash key: the queue's name */
	LocalTransactionId lxid;	/* transaction the fields below were read in */
	int32		part;			/* ev_part of the current event table */
	Oid			event_rel;		/* the current event table */
	Oid			event_seq;		/* the queue's event sequence */
	Oid			queue_owner;	/* who wakes the ticker: the owner of ferry_queue.queue */
	LocalTransactionId lock_lxid;	/* the ticker's lock is held by (lxid, subxact) */
	SubTransactionId lock_subxid;
} QueueState;

/*
 * One event table: whether it has the shape this file writes directly (checked again after
 * any change to the table: relcache invalidation), and the kept INSERT otherwise.
 */
typedef struct EventTable
{
	Oid			event_rel;		/* hash key */
	bool		checked;		/* direct is known */
	bool		direct;			/* events are written without SQL */
	SPIPlanPtr	plan;			/* the INSERT, made when first needed */
} EventTable;

/* What one trigger (one table, or one partition's clone) checked in this transaction. */
typedef struct TriggerState
{
	Oid			tgoid;			/* hash key */
	LocalTransactionId lxid;
	bool		key_known;		/* keys[] resolved for this transaction */
	int			nkeys;
	AttrNumber *keys;			/* in TopMemoryContext */
} TriggerState;

static HTAB *queues = NULL;
static HTAB *event_tables = NULL;
static HTAB *triggers = NULL;
static SPIPlanPtr wake_plan = NULL;
static bool ticker_key_known = false;
static int32 ticker_k1;
static int32 ticker_k2;

/* Only schema-qualified names: the writer's search_path reaches nothing. */
#define KEY_SQL "select k1, k2 from ferry_queue.ticker_asleep()"
#define WAKE_SQL "select ferry_queue.wake_ticker()"

/* Any change to an event table (or to every relation): its shape is checked again. */
static void
event_table_changed(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	EventTable *e;

	if (event_tables == NULL)
		return;
	if (OidIsValid(relid))
	{
		e = (EventTable *) hash_search(event_tables, &relid, HASH_FIND, NULL);
		if (e != NULL)
			e->checked = false;
		return;
	}
	hash_seq_init(&status, event_tables);
	while ((e = (EventTable *) hash_seq_search(&status)) != NULL)
		e->checked = false;
}

static void
init_hashes(void)
{
	HASHCTL		ctl;

	if (queues != NULL)
		return;
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(QueueState);
	queues = hash_create("pgferry capture queues", 8, &ctl, HASH_ELEM | HASH_STRINGS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(EventTable);
	event_tables = hash_create("pgferry capture event tables", 8, &ctl,
							   HASH_ELEM | HASH_BLOBS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(TriggerState);
	triggers = hash_create("pgferry capture triggers", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	CacheRegisterRelcacheCallback(event_table_changed, (Datum) 0);
}

static SPIPlanPtr
keep_plan(const char *query, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(query, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);

	if (plan == NULL)
		elog(ERROR, "pgferry capture: SPI_prepare failed: %s",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "pgferry capture: SPI_keepplan failed");
	return plan;
}

static Oid
rel_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "pgferry capture: cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

static int32
int4_column(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, col, desc, &isnull);

	return isnull ? 0 : DatumGetInt32(d);
}

/* The attribute number of column name in desc (an error when it has none). */
static AttrNumber
column_number(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	elog(ERROR, "pgferry capture: ferry_queue.queue has no column %s", name);
	return InvalidAttrNumber;	/* not reached */
}

/*
 * The ticker's lock key, ferry_queue.ticker_asleep() (immutable): read once per session,
 * as the owner of ferry_queue.queue (EXECUTE is closed to PUBLIC).
 */
static void
read_ticker_key(Oid queue_owner)
{
	Oid			save_user;
	int			save_sec;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pgferry capture: SPI_connect failed");
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(queue_owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		int			rc = SPI_execute(KEY_SQL, true, 1);

		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "pgferry capture: reading the ticker's key failed: %s",
				 SPI_result_code_string(rc));
		ticker_k1 = int4_column(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		ticker_k2 = int4_column(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_user, save_sec);
	}
	PG_END_TRY();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "pgferry capture: SPI_finish failed");
	ticker_key_known = true;
}

/*
 * Read the queue's row from ferry_queue.queue (a table of one row per queue: scanned, not
 * searched through its index), with the latest snapshot: a rotation committed since the
 * transaction's snapshot was taken is seen, as the PL/pgSQL function, rewritten by the
 * rotation, sees it.  No SQL: the read of pgferry's own table asks no privilege.
 */
static void
read_queue(QueueState *q, const char *queue, Oid queue_rel)
{
	Relation	rel = table_open(queue_rel, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	name_col = column_number(desc, "queue_name");
	AttrNumber	id_col = column_number(desc, "queue_id");
	AttrNumber	cur_col = column_number(desc, "queue_cur_table");
	AttrNumber	seq_col = column_number(desc, "queue_event_seq");
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	HeapTuple	tup;
	bool		found = false;
	int32		queue_id = 0;
	int32		cur_table = 0;
	char		relname[NAMEDATALEN];

	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		name = heap_getattr(tup, name_col, desc, &isnull);

		if (isnull || strcmp(TextDatumGetCString(name), queue) != 0)
			continue;
		queue_id = int4_column(tup, desc, id_col);
		cur_table = int4_column(tup, desc, cur_col);
		q->event_seq = DatumGetObjectId(heap_getattr(tup, seq_col, desc, &isnull));
		found = true;
		break;
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("capture: queue %s does not exist", queue)));
	q->part = queue_id * 10 + cur_table;
	snprintf(relname, sizeof(relname), "event_%d_%d", queue_id, cur_table);
	q->event_rel = get_relname_relid(relname, RelationGetNamespace(rel));
	if (!OidIsValid(q->event_rel))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("capture: event table ferry_queue.%s of queue %s does not exist",
						relname, queue)));
}

/* The state of a queue for this transaction, its fields read at the first event. */
static QueueState *
queue_state(const char *queue)
{
	QueueState *q;
	bool		found;
	Oid			queue_rel;

	if (strlen(queue) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("capture: queue name too long: %s", queue)));
	q = (QueueState *) hash_search(queues, queue, HASH_ENTER, &found);
	if (found && q->lxid == MyProc->lxid)
		return q;
	if (!found)
	{
		q->lock_lxid = InvalidLocalTransactionId;
		q->lock_subxid = InvalidSubTransactionId;
	}
	q->lxid = InvalidLocalTransactionId;	/* until read in full */
	queue_rel = get_relname_relid("queue", get_namespace_oid("ferry_queue", false));
	if (!OidIsValid(queue_rel))
		elog(ERROR, "pgferry capture: table ferry_queue.queue does not exist");
	q->queue_owner = rel_owner(queue_rel);
	if (!ticker_key_known)
		read_ticker_key(q->queue_owner);
	read_queue(q, queue, queue_rel);
	q->lxid = MyProc->lxid;
	return q;
}

/*
 * The ticker's wake-up, as the PL/pgSQL prelude: try the sleeping ticker's lock in shared
 * mode; failing that, unless this transaction woke it already, ferry_queue.wake_ticker()
 * as the queue's owner.  Once the lock is held in a (sub)transaction it stays held until
 * that ends, so it is tried again only in another one.
 */
static void
wake_ticker(QueueState *q)
{
	SubTransactionId subxid = GetCurrentSubTransactionId();
	const char *woken;
	Oid			save_user;
	int			save_sec;

	if (q->lock_lxid == MyProc->lxid && q->lock_subxid == subxid)
		return;
	if (DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_shared_int4,
										 Int32GetDatum(ticker_k1), Int32GetDatum(ticker_k2))))
	{
		q->lock_lxid = MyProc->lxid;
		q->lock_subxid = subxid;
		return;
	}
	woken = GetConfigOption("ferry_queue.ticker_woken", true, false);
	if (woken != NULL && strcmp(woken, "1") == 0)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pgferry capture: SPI_connect failed");
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(q->queue_owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		int			rc;

		if (wake_plan == NULL)
			wake_plan = keep_plan(WAKE_SQL, 0, NULL);
		rc = SPI_execute_plan(wake_plan, NULL, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "pgferry capture: waking the ticker failed: %s",
				 SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_user, save_sec);
	}
	PG_END_TRY();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "pgferry capture: SPI_finish failed");
}

/* This transaction's state of the trigger that fired. */
static TriggerState *
trigger_state(Oid tgoid)
{
	TriggerState *t;
	bool		found;

	t = (TriggerState *) hash_search(triggers, &tgoid, HASH_ENTER, &found);
	if (!found)
	{
		t->lxid = InvalidLocalTransactionId;
		t->keys = NULL;
	}
	if (t->lxid != MyProc->lxid)
	{
		t->key_known = false;
		t->nkeys = 0;
	}
	return t;
}

/*
 * The events name the table of the trigger's second argument: a trigger on another table
 * is refused (a partition of it is allowed; so is a name no table has any more).
 */
static void
check_table(TriggerState *t, Relation rel, const char *name)
{
	Oid			relid = RelationGetRelid(rel);
	char	   *nsp;
	const char *here;
	Oid			named;
	List	   *ancestors;

	if (t->lxid == MyProc->lxid)
		return;
	nsp = get_namespace_name(RelationGetNamespace(rel));
	here = quote_qualified_identifier(nsp, RelationGetRelationName(rel));
	if (strcmp(here, name) != 0)
	{
		named = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)),
								 NoLock, true);
		if (OidIsValid(named) && named != relid)
		{
			ancestors = get_partition_ancestors(relid);
			if (!list_member_oid(ancestors, named))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("capture of %s: trigger on %s, another table", name,
								DatumGetCString(DirectFunctionCall1(regclassout,
																	ObjectIdGetDatum(relid))))));
			list_free(ancestors);
		}
	}
	t->lxid = MyProc->lxid;
}

/* The attribute numbers of the key columns (the trigger's third argument) in rel. */
static void
resolve_keys(TriggerState *t, Relation rel, const char *keylist)
{
	char	   *raw = pstrdup(keylist);
	List	   *names = NIL;
	ListCell   *lc;
	TupleDesc	desc = RelationGetDescr(rel);
	int			n = 0;

	if (!SplitIdentifierString(raw, ',', &names))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("capture: invalid key list: %s", keylist)));
	if (t->keys != NULL)
		pfree(t->keys);
	t->keys = MemoryContextAlloc(TopMemoryContext,
								 sizeof(AttrNumber) * Max(list_length(names), 1));
	foreach(lc, names)
	{
		const char *col = (const char *) lfirst(lc);
		AttrNumber	found = InvalidAttrNumber;

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (!att->attisdropped && strcmp(NameStr(att->attname), col) == 0)
			{
				found = att->attnum;
				break;
			}
		}
		if (found == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("record \"old\" has no field \"%s\"", col)));
		t->keys[n++] = found;
	}
	t->nkeys = n;
	t->key_known = true;
}

/* Whether the key columns hold the same binary image in both rows (record_image_eq). */
static bool
same_key(TriggerState *t, TupleDesc desc, HeapTuple old, HeapTuple new)
{
	for (int i = 0; i < t->nkeys; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, t->keys[i] - 1);
		bool		null1;
		bool		null2;
		Datum		v1 = heap_getattr(old, t->keys[i], desc, &null1);
		Datum		v2 = heap_getattr(new, t->keys[i], desc, &null2);

		if (null1 || null2)
		{
			if (null1 != null2)
				return false;
			continue;
		}
		if (!datum_image_eq(v1, v2, att->attbyval, att->attlen))
			return false;
	}
	return true;
}

/* row_to_json(row)::text */
static Datum
row_image(HeapTuple tuple, TupleDesc desc)
{
	return DirectFunctionCall1(row_to_json, heap_copy_tuple_as_datum(tuple, desc));
}

/* The columns of ferry_queue.event, in order, as 001_queue.sql makes them. */
#define EVENT_NATTS 12
static const struct
{
	const char *name;
	Oid			type;
}			event_columns[EVENT_NATTS] = {
	{"ev_part", INT4OID}, {"ev_id", INT8OID}, {"ev_time", TIMESTAMPTZOID},
	{"ev_txid", XID8OID}, {"ev_owner", INT4OID}, {"ev_retry", INT4OID},
	{"ev_type", TEXTOID}, {"ev_data", TEXTOID}, {"ev_extra1", TEXTOID},
	{"ev_extra2", TEXTOID}, {"ev_extra3", TEXTOID}, {"ev_extra4", TEXTOID},
};

/* Whether the default of a column is a call of funcid without arguments. */
static bool
default_is_call(const char *adbin, Oid funcid)
{
	Node	   *expr = stringToNode(adbin);

	return IsA(expr, FuncExpr) && ((FuncExpr *) expr)->funcid == funcid &&
		((FuncExpr *) expr)->args == NIL;
}

/*
 * Whether an event table has exactly the shape of ferry_queue.event's partitions: its
 * columns, no default but now() for ev_time and pg_current_xact_id() for ev_txid, no
 * trigger, rule, check constraint or row security, heap storage, and only plain indexes
 * (columns, no expression, no predicate, not unique).  Such a table gets its events
 * without SQL: the row the executor would make, inserted with its index entries.  Any
 * other (a later schema version that changed the event table, say) gets the kept INSERT.
 */
static bool
direct_shape(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	List	   *indexes;
	ListCell   *lc;
	bool		plain = true;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->trigdesc != NULL || rel->rd_rel->relhasrules || rel->rd_rel->relrowsecurity ||
		desc->natts != EVENT_NATTS)
		return false;
	for (int i = 0; i < EVENT_NATTS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != event_columns[i].type ||
			strcmp(NameStr(att->attname), event_columns[i].name) != 0 ||
			att->attgenerated != '\0' || att->attidentity != '\0')
			return false;
	}
	if (constr == NULL || constr->num_check != 0 || constr->num_defval != 2)
		return false;
	for (int i = 0; i < constr->num_defval; i++)
	{
		AttrDefault *d = &constr->defval[i];

		if (!((d->adnum == 3 && default_is_call(d->adbin, F_NOW)) ||
			  (d->adnum == 4 && default_is_call(d->adbin, F_PG_CURRENT_XACT_ID))))
			return false;
	}
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	irel = index_open(lfirst_oid(lc), AccessShareLock);
		IndexInfo  *ii = BuildIndexInfo(irel);

		if (ii->ii_Expressions != NIL || ii->ii_Predicate != NIL || ii->ii_Unique ||
			ii->ii_ExclusionOps != NULL)
			plain = false;
		index_close(irel, AccessShareLock);
	}
	list_free(indexes);
	return plain;
}

static EventTable *
event_table(Oid relid)
{
	EventTable *e;
	bool		found;

	e = (EventTable *) hash_search(event_tables, &relid, HASH_ENTER, &found);
	if (!found)
	{
		e->checked = false;
		e->plan = NULL;
	}
	return e;
}

/* The event row written as the executor would write it, index entries included. */
static void
insert_direct(Relation rel, QueueState *q, Datum ev_type, Datum data, Datum table)
{
	Datum		values[EVENT_NATTS];
	bool		nulls[EVENT_NATTS];
	HeapTuple	tup;
	List	   *indexes;
	ListCell   *lc;

	memset(nulls, true, sizeof(nulls));
	values[0] = Int32GetDatum(q->part);
	values[1] = Int64GetDatum(nextval_internal(q->event_seq, false));
	values[2] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());	/* now() */
	values[3] = FullTransactionIdGetDatum(GetTopFullTransactionId());	/* pg_current_xact_id() */
	values[6] = ev_type;
	values[7] = data;
	values[8] = table;
	nulls[0] = nulls[1] = nulls[2] = nulls[3] = nulls[6] = nulls[7] = nulls[8] = false;
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	heap_insert(rel, tup, GetCurrentCommandId(true), 0, NULL);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	irel = index_open(lfirst_oid(lc), RowExclusiveLock);
		IndexInfo  *ii = BuildIndexInfo(irel);

		if (ii->ii_ReadyForInserts)
		{
			Datum		ivalues[INDEX_MAX_KEYS];
			bool		inulls[INDEX_MAX_KEYS];

			for (int k = 0; k < ii->ii_NumIndexAttrs; k++)
			{
				AttrNumber	attnum = ii->ii_IndexAttrNumbers[k];

				ivalues[k] = values[attnum - 1];
				inulls[k] = nulls[attnum - 1];
			}
			index_insert(irel, ivalues, inulls, &tup->t_self, rel, UNIQUE_CHECK_NO, false, ii);
		}
		index_close(irel, NoLock);
	}
	list_free(indexes);
	heap_freetuple(tup);
}

/* The event through the kept INSERT, as the event table's owner. */
static void
insert_by_plan(EventTable *e, QueueState *q, Datum ev_type, Datum data, Datum table)
{
	Datum		values[4];
	Oid			save_user;
	int			save_sec;

	values[1] = ev_type;
	values[2] = data;
	values[3] = table;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pgferry capture: SPI_connect failed");
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(rel_owner(q->event_rel), save_sec | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		int			rc;

		if (e->plan == NULL)
		{
			char		query[256];
			Oid			argtypes[4] = {INT8OID, TEXTOID, TEXTOID, TEXTOID};

			snprintf(query, sizeof(query),
					 "insert into ferry_queue.%s (ev_part, ev_id, ev_type, ev_data, ev_extra1)"
					 " values (%d, $1, $2, $3, $4)",
					 quote_identifier(get_rel_name(q->event_rel)), q->part);
			e->plan = keep_plan(query, 4, argtypes);
		}
		values[0] = Int64GetDatum(nextval_internal(q->event_seq, true));
		/* The statement's snapshot: an INSERT of values reads nothing. */
		if (ActiveSnapshotSet())
			rc = SPI_execute_snapshot(e->plan, values, NULL, GetActiveSnapshot(),
									  InvalidSnapshot, false, true, 0);
		else
			rc = SPI_execute_plan(e->plan, values, NULL, false, 0);
		if (rc != SPI_OK_INSERT)
			elog(ERROR, "pgferry capture: queuing an event failed: %s",
				 SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_user, save_sec);
	}
	PG_END_TRY();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "pgferry capture: SPI_finish failed");
}

/*
 * One event into the queue's current event table.  The writer's rights play no part: the
 * row is written by this code (no SQL, so no privilege is checked, as none would be for
 * the table's owner) or, for a table of another shape, by the kept INSERT run as the
 * event table's owner.
 */
static void
queue_event(QueueState *q, const char *op, const char *keylist, Datum data, Datum table)
{
	EventTable *e = event_table(q->event_rel);
	Relation	rel;
	Datum		ev_type;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, op);
	appendStringInfoString(&buf, keylist);
	ev_type = CStringGetTextDatum(buf.data);
	/* Held until the transaction ends, as an INSERT holds it: rotation waits for it. */
	rel = table_open(q->event_rel, RowExclusiveLock);
	if (!e->checked)
	{
		e->direct = direct_shape(rel);
		e->checked = true;
	}
	if (e->direct)
		insert_direct(rel, q, ev_type, data, table);
	table_close(rel, NoLock);
	if (!e->direct)
		insert_by_plan(e, q, ev_type, data, table);
}

Datum
pgferry_plain_row_capture(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Trigger    *tg;
	TupleDesc	desc;
	QueueState *q;
	TriggerState *t;
	const char *table;
	const char *keylist;
	Datum		table_text;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("plain_row_capture: not called by trigger manager")));
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("plain_row_capture: must be fired AFTER ... FOR EACH ROW")));
	tg = td->tg_trigger;
	if (tg->tgnargs != 3)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("plain_row_capture: takes 3 arguments (queue, table, key list)")));
	table = tg->tgargs[1];
	keylist = tg->tgargs[2];
	desc = RelationGetDescr(td->tg_relation);
	init_hashes();

	q = queue_state(tg->tgargs[0]);
	wake_ticker(q);
	t = trigger_state(tg->tgoid);
	check_table(t, td->tg_relation, table);
	table_text = CStringGetTextDatum(table);

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
		queue_event(q, "I:", keylist, row_image(td->tg_trigtuple, desc), table_text);
	else if (TRIGGER_FIRED_BY_DELETE(td->tg_event))
		queue_event(q, "D:", keylist, row_image(td->tg_trigtuple, desc), table_text);
	else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
	{
		if (!t->key_known)
			resolve_keys(t, td->tg_relation, keylist);
		if (same_key(t, desc, td->tg_trigtuple, td->tg_newtuple))
			queue_event(q, "U:", keylist, row_image(td->tg_newtuple, desc), table_text);
		else
		{
			/* Key change: a delete of the old key, then an insert of the new row. */
			queue_event(q, "D:", keylist, row_image(td->tg_trigtuple, desc), table_text);
			queue_event(q, "I:", keylist, row_image(td->tg_newtuple, desc), table_text);
		}
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("plain_row_capture: fired by TRUNCATE (a statement trigger does that)")));

	return PointerGetDatum(NULL);
}
