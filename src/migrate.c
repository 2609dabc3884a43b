/*-------------------------------------------------------------------------
 * migrate.c
 *	  ExecutorStart hook, and the migration of input rows.
 *
 * Tracking.  An input row is unmigrated exactly as long as it is present in
 * its retired table.  Migrating a set of rows is one step, in the caller's
 * transaction:
 *	 SELECT ctid FROM retired WHERE ctid = ANY(rows) FOR UPDATE	-- claim
 *	 INSERT INTO target SELECT <mapping> FROM retired WHERE ctid = ANY(claimed)
 *	   (once per mapping of the input)
 *	 DELETE FROM retired WHERE ctid = ANY(claimed)
 * So the "migrating" bit is the row lock of the claim, and the "migrated"
 * bit is the deletion, made durable by the same commit as the new rows.
 *
 * Locking rules.
 *	- A statement's migration step locks every retired input it may read
 *	  (AccessShareLock, until transaction end) before anything else; this
 *	  also processes invalidations, so a migration completed meanwhile is
 *	  seen as such and the step is skipped.  Completion takes
 *	  AccessExclusiveLock on the inputs (worker.c).
 *	- Two sessions claiming one row: the second claim waits on the first's
 *	  row lock (an ordinary lock wait: sleeping, deadlock-checked).  If the
 *	  first commits, the second skips the row (READ COMMITTED) or fails with
 *	  40001 (REPEATABLE READ, SERIALIZABLE: its snapshot cannot see the
 *	  migrated row).  If the first aborts, the row is simply there again.
 *	- Rows claimed by a statement stay locked until its transaction ends.
 *
 * Snapshots.  Relevance queries run with snapshot S; if they find rows to
 * migrate, the rows are migrated and the loop repeats with a new S.  When
 * a round finds nothing, every row the statement can need is visible in S,
 * and S becomes the statement's snapshot (relevance queries that read only
 * their input need no confirming round: see standalone() in relevance.c):
 * under READ COMMITTED a fresh one
 * (seeing rows others migrated while we waited), under REPEATABLE READ the
 * transaction snapshot with a newer command id (seeing our own rows).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/parsetree.h"
#include "storage/lmgr.h"
#include "tcop/dest.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

static ExecutorStart_hook_type prev_ExecutorStart = NULL;

/* ---------------------------------------------------------------------
 * Collecting ctids from a relevance plan
 * ---------------------------------------------------------------------
 */
typedef struct TidSet
{
	MemoryContext cxt;			/* outlives the executor that fills it */
	Oid			input;
	int			n;
	int			cap;
	ItemPointerData *tids;
} TidSet;

typedef struct TidReceiver
{
	DestReceiver pub;
	TidSet	   *set;
} TidReceiver;

static void
tidset_add(TidSet *set, ItemPointer tid)
{
	if (set->n == set->cap)
	{
		set->cap = Max(64, set->cap * 2);
		set->tids = set->tids ? repalloc(set->tids, set->cap * sizeof(ItemPointerData))
			: MemoryContextAlloc(set->cxt, set->cap * sizeof(ItemPointerData));
	}
	set->tids[set->n++] = *tid;
}

static bool
tid_receive(TupleTableSlot *slot, DestReceiver *self)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, 1, &isnull);

	if (!isnull)
		tidset_add(((TidReceiver *) self)->set, DatumGetItemPointer(d));
	return true;
}

static void
tid_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
tid_shutdown(DestReceiver *self)
{
}

static void
tid_destroy(DestReceiver *self)
{
}

static int
tid_cmp(const void *a, const void *b)
{
	return ItemPointerCompare((ItemPointer) a, (ItemPointer) b);
}

static void
tidset_sort_unique(TidSet *set)
{
	int			i,
				j = 0;

	if (set->n < 2)
		return;
	qsort(set->tids, set->n, sizeof(ItemPointerData), tid_cmp);
	for (i = 1; i < set->n; i++)
		if (!ItemPointerEquals(&set->tids[j], &set->tids[i]))
			set->tids[++j] = set->tids[i];
	set->n = j + 1;
}

/* Run one plan with the given snapshot and parameters. */
static void
run_plan(PlannedStmt *ps, const char *what, Snapshot snap, ParamListInfo params,
		 DestReceiver *dest)
{
	QueryDesc  *qd;

	PushActiveSnapshot(snap);
	qd = CreateQueryDesc(ps, what, snap, InvalidSnapshot, dest, params, NULL, 0);
	ExecutorStart(qd, 0);
	ExecutorRun(qd, ForwardScanDirection, 0, true);
	ExecutorFinish(qd);
	ExecutorEnd(qd);
	FreeQueryDesc(qd);
	PopActiveSnapshot();
}

/* ---------------------------------------------------------------------
 * Per-backend plan caches of the migration step
 * ---------------------------------------------------------------------
 */
typedef struct DeletePlan
{
	Oid			input;
	SPIPlanPtr	claim;			/* SELECT ctid ... FOR UPDATE */
	SPIPlanPtr	delete;
} DeletePlan;

typedef struct InsertPlan
{
	int			mapping_id;
	Oid			target;
	PlannedStmt *plan;
} InsertPlan;

static HTAB *delete_plans = NULL;
static HTAB *insert_plans = NULL;

static SPIPlanPtr
prepare_kept(const char *fmt, Oid input)
{
	Oid			argtypes[1] = {TIDARRAYOID};
	char	   *sql = psprintf(fmt,
							   quote_qualified_identifier(get_namespace_name(get_rel_namespace(input)),
														  get_rel_name(input)));
	SPIPlanPtr	plan = SPI_prepare(sql, 1, argtypes);

	if (plan == NULL)
		elog(ERROR, "leapfrog: could not prepare \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

static DeletePlan *
delete_plan(Oid input)
{
	DeletePlan *dp;
	bool		found;

	if (delete_plans == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(Oid),.entrysize = sizeof(DeletePlan)};

		delete_plans = hash_create("leapfrog delete plans", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	dp = hash_search(delete_plans, &input, HASH_ENTER, &found);
	if (!found)
		dp->claim = dp->delete = NULL;
	if (dp->claim == NULL || !SPI_plan_is_valid(dp->claim) ||
		dp->delete == NULL || !SPI_plan_is_valid(dp->delete))
	{
		if (dp->claim)
			SPI_freeplan(dp->claim);
		if (dp->delete)
			SPI_freeplan(dp->delete);
		dp->claim = dp->delete = NULL;
		dp->claim = prepare_kept("SELECT ctid FROM %s WHERE ctid OPERATOR(pg_catalog.=) ANY ($1) FOR UPDATE", input);
		dp->delete = prepare_kept("DELETE FROM %s WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)", input);
	}
	return dp;
}

/*
 * INSERT INTO target (all columns) SELECT <mapping> FROM input
 *	 WHERE <filter> AND ctid = ANY ($1)
 * built from the stored mapping Query and planned once per backend.
 */
static PlannedStmt *
insert_plan(LfMigration *mig, LfMapping *m)
{
	InsertPlan *ip;
	bool		found;

	if (insert_plans == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(int),.entrysize = sizeof(InsertPlan)};

		insert_plans = hash_create("leapfrog insert plans", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	ip = hash_search(insert_plans, &m->id, HASH_ENTER, &found);
	if (!found || ip->plan == NULL)
	{
		Query	   *sub = copyObject(m->query);
		Query	   *ins = makeNode(Query);
		RangeTblEntry *trte = makeNode(RangeTblEntry);
		RangeTblEntry *srte = makeNode(RangeTblEntry);
		RangeTblRef *rtr = makeNode(RangeTblRef);
		ScalarArrayOpExpr *saop = makeNode(ScalarArrayOpExpr);
		Param	   *param = makeNode(Param);
		Relation	rel = table_open(m->target, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(rel);
		List	   *colnames = NIL;
		int			attno;
		MemoryContext old;
		PlannedStmt *ps;

		param->paramkind = PARAM_EXTERN;
		param->paramid = 1;
		param->paramtype = TIDARRAYOID;
		param->paramtypmod = -1;
		param->location = -1;
		saop->opno = TIDEqualOperator;
		saop->opfuncid = get_opcode(TIDEqualOperator);
		saop->useOr = true;
		saop->inputcollid = InvalidOid;
		saop->args = list_make2(makeVar(1, SelfItemPointerAttributeNumber, TIDOID, -1, InvalidOid, 0),
								param);
		saop->location = -1;
		sub->jointree->quals = sub->jointree->quals
			? (Node *) make_andclause(list_make2(sub->jointree->quals, saop))
			: (Node *) saop;

		trte->rtekind = RTE_RELATION;
		trte->relid = m->target;
		trte->relkind = rel->rd_rel->relkind;
		trte->rellockmode = RowExclusiveLock;
		trte->requiredPerms = ACL_INSERT;
		trte->checkAsUser = mig->owner;
		for (attno = 1; attno <= desc->natts; attno++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, attno - 1);

			colnames = lappend(colnames, makeString(pstrdup(NameStr(att->attname))));
			if (att->attisdropped)
				continue;
			trte->insertedCols = bms_add_member(trte->insertedCols,
												attno - FirstLowInvalidHeapAttributeNumber);
			ins->targetList = lappend(ins->targetList,
									  makeTargetEntry((Expr *) makeVar(2, attno, att->atttypid,
																	   att->atttypmod, att->attcollation, 0),
													  attno, pstrdup(NameStr(att->attname)), false));
		}
		trte->eref = makeAlias(pstrdup(RelationGetRelationName(rel)), colnames);
		srte->rtekind = RTE_SUBQUERY;
		srte->subquery = sub;
		srte->eref = makeAlias("lf_source", lappend(list_copy(colnames), makeString("lf_ctid")));
		srte->inFromCl = true;
		rtr->rtindex = 2;

		ins->commandType = CMD_INSERT;
		ins->querySource = QSRC_ORIGINAL;
		ins->canSetTag = true;
		ins->resultRelation = 1;
		ins->rtable = list_make2(trte, srte);
		ins->jointree = makeFromExpr(list_make1(rtr), NULL);
		table_close(rel, AccessShareLock);

		ps = standard_planner(ins, "leapfrog migrate", 0, NULL);
		old = MemoryContextSwitchTo(TopMemoryContext);
		ip->plan = copyObject(ps);
		ip->target = m->target;
		MemoryContextSwitchTo(old);
	}
	return ip->plan;
}

/* ---------------------------------------------------------------------
 * The migration step
 * ---------------------------------------------------------------------
 */
typedef struct MigrateContext
{
	LfMigration *mig;
	Oid			input;
	ItemPointer tids;
	int			n;
} MigrateContext;

static void
migrate_errcontext(void *arg)
{
	MigrateContext *mc = arg;

	if (mc->n == 1)
		errcontext("leapfrog migration \"%s\": migrating row (%u,%u) of input %s",
				   mc->mig->name,
				   ItemPointerGetBlockNumberNoCheck(&mc->tids[0]),
				   ItemPointerGetOffsetNumberNoCheck(&mc->tids[0]),
				   get_rel_name(mc->input));
	else
		errcontext("leapfrog migration \"%s\": migrating %d rows of input %s, starting at (%u,%u)",
				   mc->mig->name, mc->n, get_rel_name(mc->input),
				   ItemPointerGetBlockNumberNoCheck(&mc->tids[0]),
				   ItemPointerGetOffsetNumberNoCheck(&mc->tids[0]));
}

static Datum
tid_array(ItemPointer tids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = ItemPointerGetDatum(&tids[i]);
	return PointerGetDatum(construct_array(elems, n, TIDOID, sizeof(ItemPointerData),
										   false, TYPALIGN_SHORT));
}

/*
 * Migrate the given rows of input (sorted, unique or not): claim them,
 * insert their images into every target, log progress.  Rows another
 * transaction migrated meanwhile are skipped.  Returns the rows migrated.
 */
uint64
lf_migrate_rows(LfMigration *mig, Oid input, ItemPointer tids, int ntids)
{
	MigrateContext mc = {mig, input, tids, ntids};
	ErrorContextCallback errcb;
	Oid			save_user;
	int			save_sec;
	Snapshot	snap;
	Datum		arg;
	uint64		claimed = 0;
	ItemPointerData *owned;
	ListCell   *lc;
	DeletePlan *dp;

	if (ntids == 0)
		return 0;
	errcb.callback = migrate_errcontext;
	errcb.arg = &mc;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(mig->owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/*
	 * Claim: lock the rows.  A row another transaction migrated meanwhile is
	 * skipped (READ COMMITTED) or raises 40001 (REPEATABLE READ and up).
	 */
	arg = tid_array(tids, ntids);
	SetUserIdAndSecContext(lf_catalog_owner(), save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	dp = delete_plan(input);
	if (SPI_execute_plan(dp->claim, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "leapfrog: claim statement failed");
	SetUserIdAndSecContext(mig->owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	claimed = SPI_processed;
	if (claimed > 0)
	{
		uint64		i;
		ParamListInfo params = makeParamList(1);

		owned = palloc(sizeof(ItemPointerData) * claimed);
		for (i = 0; i < claimed; i++)
		{
			bool		isnull;

			owned[i] = *DatumGetItemPointer(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));
		}
		arg = tid_array(owned, (int) claimed);
		params->params[0].value = arg;
		params->params[0].isnull = false;
		params->params[0].pflags = PARAM_FLAG_CONST;
		params->params[0].ptype = TIDARRAYOID;

		/* Insert the images of the claimed rows into every target. */
		foreach(lc, mig->mappings)
		{
			LfMapping  *m = lfirst(lc);

			if (m->input != input)
				continue;
			CommandCounterIncrement();
			snap = RegisterSnapshot(GetTransactionSnapshot());
			run_plan(insert_plan(mig, m), "leapfrog migrate", snap, params, None_Receiver);
			UnregisterSnapshot(snap);
		}
		CommandCounterIncrement();

		/* Mark them migrated: gone from the retired table. */
		SetUserIdAndSecContext(lf_catalog_owner(), save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		if (SPI_execute_plan(dp->delete, &arg, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_processed != claimed)
			elog(ERROR, "leapfrog: claimed rows of %s changed while locked", get_rel_name(input));

		/* progress log, written as the owner of the catalog */
		{
			Oid			types[2] = {INT4OID, INT8OID};
			Datum		values[2] = {Int32GetDatum(mig->id), Int64GetDatum((int64) claimed)};

			SetUserIdAndSecContext(lf_catalog_owner(), save_sec | SECURITY_LOCAL_USERID_CHANGE |
								   SECURITY_RESTRICTED_OPERATION);
			if (SPI_execute_with_args("INSERT INTO leapfrog.progress (migration_id, n) VALUES ($1, $2)",
									  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
				elog(ERROR, "leapfrog: could not log progress");
		}
	}
	SPI_finish();
	SetUserIdAndSecContext(save_user, save_sec);
	error_context_stack = errcb.previous;
	CommandCounterIncrement();
	return claimed;
}

/* ---------------------------------------------------------------------
 * The hook
 * ---------------------------------------------------------------------
 */
static void
migrate_set(TidSet *set)
{
	bool		save_read_only = XactReadOnly;

	tidset_sort_unique(set);
	XactReadOnly = false;
	PG_TRY();
	{
		(void) lf_migrate_rows(lf_migration_by_input(set->input), set->input,
							   set->tids, set->n);
	}
	PG_FINALLY();
	{
		XactReadOnly = save_read_only;
	}
	PG_END_TRY();
}

static void
prepare_statement(QueryDesc *qd, List *items)
{
	ListCell   *lc;
	List	   *live = NIL;
	int			round;
	bool		all_standalone = true;

	/* Lock the inputs first: this also makes our cache current. */
	foreach(lc, items)
		LockRelationOid((Oid) intVal(linitial((List *) lfirst(lc))), AccessShareLock);
	if (!lf_cache_valid)
		lf_cache_load();
	foreach(lc, items)
	{
		List	   *item = lfirst(lc);
		Oid			input = (Oid) intVal(linitial(item));
		LfMigration *mig = lf_migration_by_input(input);

		if (mig && mig->id == intVal(lsecond(item)))
		{
			live = lappend(live, item);
			all_standalone &= intVal(list_nth(item, 4)) != 0;
		}
	}
	if (live == NIL)
		return;

	for (round = 0;; round++)
	{
		Snapshot	snap = RegisterSnapshot(GetTransactionSnapshot());
		List	   *sets = NIL;
		bool		any = false;

		foreach(lc, live)
		{
			List	   *item = lfirst(lc);
			Oid			input = (Oid) intVal(linitial(item));
			TidReceiver rcv = {{tid_receive, tid_startup, tid_shutdown, tid_destroy, DestNone}};
			TidSet	   *set = NULL;
			ListCell   *ls;

			foreach(ls, sets)
				if (((TidSet *) lfirst(ls))->input == input)
					set = lfirst(ls);
			if (set == NULL)
			{
				set = palloc0(sizeof(TidSet));
				set->cxt = CurrentMemoryContext;
				set->input = input;
				sets = lappend(sets, set);
			}
			rcv.set = set;
			run_plan(lthird(item), "leapfrog relevance", snap, qd->params, (DestReceiver *) &rcv);
			any |= set->n > 0;
		}
		if (!any)
		{
			/* Every needed row is visible in snap: run the statement on it. */
			UnregisterSnapshot(qd->snapshot);
			qd->snapshot = snap;
			return;
		}
		UnregisterSnapshot(snap);
		if (round >= 1000)
			elog(ERROR, "leapfrog: migration of the rows a statement needs did not converge");

		/*
		 * Migrating changes nothing the transaction can observe, so it is
		 * allowed in a read-only transaction; but not where it would break
		 * the guarantees of one: on a standby, or in a serializable
		 * read-only transaction (safe snapshots assume no writes).
		 */
		if (RecoveryInProgress() || (XactReadOnly && IsolationIsSerializable()))
			ereport(ERROR,
					(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
					 errmsg("cannot migrate the rows this statement needs in a read-only serializable transaction or on a standby"),
					 errhint("Run the statement in a read-write transaction, or once the migration is done.")));
		foreach(lc, sets)
			migrate_set((TidSet *) lfirst(lc));
		CHECK_FOR_INTERRUPTS();

		/*
		 * Relevance queries that read only their input cannot find new rows:
		 * what they found is now migrated, by us or (skipped by the claim)
		 * by transactions that have committed.  A new snapshot sees it all.
		 */
		if (all_standalone)
		{
			UnregisterSnapshot(qd->snapshot);
			qd->snapshot = RegisterSnapshot(GetTransactionSnapshot());
			return;
		}
	}
}

static void
lf_ExecutorStart(QueryDesc *qd, int eflags)
{
	List	   *items = lf_plan_items(qd->plannedstmt);

	if (items != NIL && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		prepare_statement(qd, items);
	if (prev_ExecutorStart)
		prev_ExecutorStart(qd, eflags);
	else
		standard_ExecutorStart(qd, eflags);
}

void
lf_install_executor_hook(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = lf_ExecutorStart;
}
