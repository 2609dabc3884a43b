/*-------------------------------------------------------------------------
 * migrate.c
 *	  ExecutorStart hook, and the migration of input rows.
 *
 * Tracking.  An input row is unmigrated exactly as long as it is present in
 * its retired table.  Migrating a set of rows is one step (see "The
 * migration steps" below), in the caller's transaction: delete them from the
 * retired table, INSERT their images into every target, log the count.  So
 * the "migrating" bit is the row lock of the delete, and the "migrated" bit
 * is the deletion, made durable by the same commit as the new rows.  A
 * group or join mapping migrates whole units instead of rows (units.c):
 * every row of every input sharing a key, claimed in one global order so
 * that the first row of a unit decides who migrates it ("Steps of group
 * and join mappings" below).
 *
 * Locking rules.
 *	- A statement's migration step locks every retired input it may read
 *	  (AccessShareLock, until transaction end) before anything else; this
 *	  also processes invalidations, so a migration completed meanwhile is
 *	  seen as such and the step is skipped.  Completion takes
 *	  AccessExclusiveLock on the inputs (worker.c).
 *	- Two sessions migrating one row: the second DELETE waits on the first's
 *	  row lock (an ordinary lock wait: sleeping, deadlock-checked).  If the
 *	  first commits, the second skips the row (READ COMMITTED) or fails with
 *	  40001 (REPEATABLE READ, SERIALIZABLE: its snapshot cannot see the
 *	  migrated row).  If the first aborts, the row is simply there again.
 *	  A row corrected meanwhile (UPDATE of the retired row, failed.c) is
 *	  skipped the same way, and found at its new ctid by the next round.
 *	- Rows claimed by a statement stay locked until its transaction ends.
 *
 * Rounds.  Relevance queries run with snapshot S; if they find rows to
 * migrate, the rows are migrated and the loop repeats with a new S.  When
 * a round finds nothing, every row the statement can need is visible in S,
 * and S becomes the statement's snapshot (relevance queries that read only
 * their input need no confirming round: see standalone() in relevance.c).
 * Which S, under each isolation level: "The hook" below, and snapshot.c.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/parallel.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/parsetree.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/predicate.h"
#include "tcop/dest.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static ExecutorRun_hook_type prev_ExecutorRun = NULL;


/* ---------------------------------------------------------------------
 * Collecting ctids from a relevance plan
 * ---------------------------------------------------------------------
 */
typedef struct TidSet
{
	MemoryContext cxt;			/* outlives the executor that fills it */
	Oid			input;
	int			mapping_id;		/* the mapping whose groups its rows need
								 * (LF_ITEM_MAPPING), or 0 */
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

/* Order of ctids, for qsort and bsearch */
int
lf_tid_cmp(const void *a, const void *b)
{
	return ItemPointerCompare((ItemPointer) a, (ItemPointer) b);
}

/* Sort tids[0..n) and drop duplicates; returns the new count */
int
lf_tids_sort_unique(ItemPointerData *tids, int n)
{
	int			j = 0;

	if (n < 2)
		return n;
	qsort(tids, n, sizeof(ItemPointerData), lf_tid_cmp);
	for (int i = 1; i < n; i++)
		if (!ItemPointerEquals(&tids[j], &tids[i]))
			tids[++j] = tids[i];
	return j + 1;
}

static void
tidset_sort_unique(TidSet *set)
{
	set->n = lf_tids_sort_unique(set->tids, set->n);
}

/*
 * Set while run_plan starts one of our own plans: the executor hook leaves
 * it alone.  Its snapshot is the step's, chosen on purpose; the hook's
 * check of completed migrations would have replaced it with a newer one,
 * which no longer sees the rows the step has just claimed (a chained GROUP
 * BY step inserted nothing for a whole group, while the copy of the same
 * rows, run just before the completion of the earlier migration reached
 * the cache, was right).
 */
static bool running_own_plan = false;

/*
 * The step plans are kept per backend, outside the plan cache, which would
 * lock their relations before each execution: lock them as it would, or a
 * step could insert into a target that a VACUUM FULL or CLUSTER is
 * rewriting (the new rows would be lost with the old file).  Held to the
 * end of the transaction, as a statement's locks are.  (Relevance plans
 * read inputs the statement has locked; pull plans are planned anew.)
 */
static void
lock_plan_relations(PlannedStmt *ps)
{
	ListCell   *lc;

	foreach(lc, ps->rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

		if (rte->rtekind == RTE_RELATION && rte->rellockmode != NoLock)
			LockRelationOid(rte->relid, rte->rellockmode);
	}
}

/*
 * A step's INSERTs queue their rows' trigger events (the checks of the new
 * tables' foreign keys, of a DEFERRABLE unique constraint) for the end of
 * the step, not of each INSERT (run_plan with EXEC_FLAG_SKIP_TRIGGERS, the
 * events fired by copy_claimed).  A step migrates one row or unit into
 * every new table its mappings fill, and a row may reference another row of
 * the same step in a table the step fills after it: a self-referencing
 * table filled by two INSERTs, two tables referencing each other, an
 * archive of orders referencing the per-customer totals of the same orders.
 * Eagerly the script's INSERTs have all run before a DEFERRABLE key's check
 * at commit; a NOT DEFERRABLE key's INSERT comes after those of the tables
 * it references (start.c refuses a script that fills a referenced table
 * after its referencing one: eagerly that INSERT fails), so that all its
 * rows are there too.  Deferrable checks cannot wait for the commit: the
 * trigger events of a security-restricted operation may not be deferred
 * past it (PostgreSQL refuses with "cannot fire deferred trigger within
 * security-restricted operation").  The step's rows are those of start(),
 * which the eager script's check at its commit saw the same way, and what
 * they reference in other steps is migrated by the check's own query, a
 * statement on a new table like any other.  Only the executor's copies of
 * the triggers are made not deferrable (InitResultRelInfo copies the
 * relation's), so the transaction's SET CONSTRAINTS state and its own
 * deferred events are left alone.
 */
static void
check_constraints_now(QueryDesc *qd)
{
	ListCell   *lc;

	foreach(lc, qd->estate->es_opened_result_relations)
	{
		TriggerDesc *td = ((ResultRelInfo *) lfirst(lc))->ri_TrigDesc;

		for (int i = 0; td != NULL && i < td->numtriggers; i++)
		{
			td->triggers[i].tgdeferrable = false;
			td->triggers[i].tginitdeferred = false;
		}
	}
}

/*
 * Run one plan with the given snapshot and parameters; returns es_processed.
 * A step's INSERT (step) leaves its trigger events, made not deferrable, to
 * the caller's query level (the step's: copy_claimed).
 */
static uint64
run_plan(PlannedStmt *ps, const char *what, Snapshot snap, ParamListInfo params,
		 DestReceiver *dest, bool step)
{
	QueryDesc  *qd;
	uint64		n;

	PushActiveSnapshot(snap);
	qd = CreateQueryDesc(ps, what, snap, InvalidSnapshot, dest, params, NULL, 0);
	running_own_plan = true;
	PG_TRY();
	{
		ExecutorStart(qd, step ? EXEC_FLAG_SKIP_TRIGGERS : 0);
	}
	PG_FINALLY();
	{
		running_own_plan = false;
	}
	PG_END_TRY();
	if (step)
		check_constraints_now(qd);
	ExecutorRun(qd, ForwardScanDirection, 0, true);
	ExecutorFinish(qd);
	n = qd->estate->es_processed;
	ExecutorEnd(qd);
	FreeQueryDesc(qd);
	PopActiveSnapshot();
	return n;
}

/* ---------------------------------------------------------------------
 * Plans of the migration steps, built from the stored mapping trees (no SQL
 * text, so no search_path) and kept per backend, generic in $1.  Each
 * relation is checked as its owner needs: the retired table as the
 * extension's owner, the targets as the migration's owner.
 * ---------------------------------------------------------------------
 */
typedef struct StepKey
{
	int			migration_id;
	Oid			input;
	int			mapping_id;		/* its group or join mapping, or 0 */
} StepKey;

/* Plans built here are kept per backend, in hash tables made on first use. */
static void *
plan_cache_entry(HTAB **cache, const char *name, Size keysize, Size entrysize,
				 const void *key, bool *found)
{
	if (*cache == NULL)
	{
		HASHCTL		ctl = {.keysize = keysize,.entrysize = entrysize};

		*cache = hash_create(name, 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	return hash_search(*cache, key, HASH_ENTER, found);
}

static PlannedStmt *
plan_in_top_context(Query *q, const char *what)
{
	PlannedStmt *ps = standard_planner(q, what, 0, NULL);
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PlannedStmt *copy = copyObject(ps);

	MemoryContextSwitchTo(old);
	return copy;
}


/* $id of a plan built here */
static Param *
extern_param(int id, Oid type)
{
	Param	   *param = makeNode(Param);

	param->paramkind = PARAM_EXTERN;
	param->paramid = id;
	param->paramtype = type;
	param->paramtypmod = -1;
	param->location = -1;
	return param;
}

/* ctid = ANY ($paramid) over range table entry varno */
static Expr *
ctid_any_param(int varno, int paramid)
{
	ScalarArrayOpExpr *saop = makeNode(ScalarArrayOpExpr);
	Param	   *param = extern_param(paramid, TIDARRAYOID);

	saop->opno = TIDEqualOperator;
	saop->opfuncid = get_opcode(TIDEqualOperator);
	saop->useOr = true;
	saop->inputcollid = InvalidOid;
	saop->args = list_make2(makeVar(varno, SelfItemPointerAttributeNumber, TIDOID, -1, InvalidOid, 0),
							param);
	saop->location = -1;
	return (Expr *) saop;
}

static RangeTblEntry *
relation_rte(Relation rel, AclMode perms, Oid check_as)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	TupleDesc	desc = RelationGetDescr(rel);
	List	   *colnames = NIL;
	int			attno;

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	rte->requiredPerms = perms;
	rte->checkAsUser = check_as;
	for (attno = 1; attno <= desc->natts; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);

		colnames = lappend(colnames, makeString(pstrdup(att->attisdropped ? "" : NameStr(att->attname))));
		if (att->attisdropped)
			continue;
		if (perms & ACL_INSERT)
			rte->insertedCols = bms_add_member(rte->insertedCols,
											   attno - FirstLowInvalidHeapAttributeNumber);
		if (perms & ACL_SELECT)
			rte->selectedCols = bms_add_member(rte->selectedCols,
											   attno - FirstLowInvalidHeapAttributeNumber);
	}
	rte->eref = makeAlias(pstrdup(RelationGetRelationName(rel)), colnames);
	return rte;
}

/*
 * INSERT INTO rel SELECT * FROM (sub): every live column of rel from the
 * subquery's column of the same attribute number.  rte is rel's entry.
 */
static Query *
insert_select(Relation rel, RangeTblEntry *rte, Query *sub, const char *alias)
{
	Query	   *ins = makeNode(Query);
	TupleDesc	desc = RelationGetDescr(rel);
	RangeTblEntry *srte = makeNode(RangeTblEntry);
	RangeTblRef *rtr = makeNode(RangeTblRef);
	List	   *colnames;
	ListCell   *lc;
	int			attno;

	for (attno = 1; attno <= desc->natts; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);

		if (att->attisdropped)
			continue;
		ins->targetList = lappend(ins->targetList,
								  makeTargetEntry((Expr *) makeVar(2, attno, att->atttypid,
																   att->atttypmod, att->attcollation, 0),
												  attno, pstrdup(NameStr(att->attname)), false));
	}
	srte->rtekind = RTE_SUBQUERY;
	srte->subquery = sub;
	colnames = list_copy(rte->eref->colnames);
	foreach(lc, sub->targetList)	/* the subquery's extra columns (lf_ctid) */
		if (((TargetEntry *) lfirst(lc))->resno > list_length(colnames))
			colnames = lappend(colnames, makeString(pstrdup(((TargetEntry *) lfirst(lc))->resname)));
	srte->eref = makeAlias(pstrdup(alias), colnames);
	rtr->rtindex = 2;

	ins->commandType = CMD_INSERT;
	ins->querySource = QSRC_ORIGINAL;
	ins->resultRelation = 1;
	ins->rtable = list_make2(rte, srte);
	ins->jointree = makeFromExpr(list_make1(rtr), NULL);
	return ins;
}

/* ---------------------------------------------------------------------
 * Error context of the steps
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

	if (mc->n == 0 || mc->tids == NULL)
		errcontext("leapfrog migration \"%s\": migrating rows of input %s",
				   mc->mig->name, get_rel_name(mc->input));
	else if (mc->n == 1)
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

/* Name the migration and the rows in errors raised until pop_context(). */
static void
push_context(ErrorContextCallback *cb, MigrateContext *mc)
{
	cb->callback = migrate_errcontext;
	cb->arg = mc;
	cb->previous = error_context_stack;
	error_context_stack = cb;
}

static void
pop_context(ErrorContextCallback *cb)
{
	error_context_stack = cb->previous;
}

/* $1 of a plan built here */
static ParamListInfo
one_param(Datum value, Oid type)
{
	ParamListInfo params = makeParamList(1);

	params->params[0].value = value;
	params->params[0].isnull = false;
	params->params[0].pflags = PARAM_FLAG_CONST;
	params->params[0].ptype = type;
	return params;
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

/* ---------------------------------------------------------------------
 * The migration steps: claim rows, then copy what was claimed
 *
 *	 claim:	the rows are deleted from retired, in C, at the command of
 *			snapshot S: a statement's step deletes the rows its relevance
 *			queries found, waiting for a transaction migrating one of them
 *			(claim_tids, as DELETE ... WHERE ctid = ANY would); the
 *			background step deletes every row of blocks [lo, hi) that S
 *			sees, skipping without waiting a row another transaction is
 *			migrating, like SKIP LOCKED (claim_range)
 *	 INSERT INTO target_m SELECT <mapping m> FROM retired
 *	   WHERE <m's filter> AND ctid = ANY ($1)		(one per mapping, read with S)
 *	 and the count goes to the progress log (progress.c)
 *
 * S still sees the rows deleted at its own command (a tuple deleted by the
 * snapshot's command or a later one is visible to it): the mappings read
 * exactly the claimed row versions.  The rows stay locked by the deletion
 * until commit, and the copies commit or abort with it.  The background
 * step never waits for a session: a worker waiting for a session while
 * holding its batch could deadlock with it.  Neither step locks its rows
 * twice (SELECT ... FOR UPDATE SKIP LOCKED, then DELETE) or materialises
 * the deleted rows (perf: the lock pass and the tuplestore were 8% and 17%
 * of a worker's time).  A statement's step was a single statement (DELETE
 * ... RETURNING feeding an INSERT per mapping through CTEs) until both
 * shared this code; the C claim is about 2% faster for one-row steps.
 * ---------------------------------------------------------------------
 */
typedef struct StepPlan
{
	StepKey		key;
	List	   *inserts;		/* PlannedStmt per mapping, in TopMemoryContext */
	List	   *unfiltered;		/* per mapping: the $n whose rows it copies one
								 * for one (a mapping without a filter), or 0 */
	List	   *direct;			/* per mapping: the $n of its ctids if
								 * lf_copy_rows can run its plan, or 0 */
	PlannedStmt *unit_plan;		/* of the group or join mapping, if any */
	PlannedStmt *few_rows;		/* a join mapping's, joined by nested loop */
	bool		ready;
} StepPlan;

/*
 * A join step of at most this many pairs of claimed rows (rows of input 0
 * times rows of input 1) uses few_rows.  The plan for any count is generic
 * in the ctid arrays, and the planner's guess of ten rows each gives a hash
 * join: a statement's one join key (a stock row and its three order lines)
 * paid for a hash table and its scan for unmatched rows.  A nested loop
 * reads at most this many row pairs.
 */
#define LF_FEW_PAIRS 1024

/*
 * The step of a group or join mapping: INSERT INTO target SELECT <mapping>
 * with each input restricted to the claimed rows, ctid = ANY ($i) for input
 * i.  A preserved side (or either side of an inner join) is restricted in
 * WHERE, the nullable side of an outer join in its ON clause: the claimed
 * rows are whole units, so the join of the claimed rows is the eager join
 * restricted to their keys.  A GROUP BY's lf_ctid (min(ctid)) is not
 * computed.
 */
static Query *
unit_step_query(LfMapping *m)
{
	Query	   *sub = copyObject(m->query);
	int			i;

	for (i = 0; i < m->ninputs; i++)
	{
		RangeTblEntry *irte = rt_fetch(m->rtis[i], sub->rtable);
		Expr	   *to_claimed = ctid_any_param(m->rtis[i], i + 1);
		bool		nullable = (m->jointype == JOIN_LEFT && i == 1) ||
			(m->jointype == JOIN_RIGHT && i == 0);

		irte->checkAsUser = lf_catalog_owner();
		irte->selectedCols = bms_add_member(irte->selectedCols,
											SelfItemPointerAttributeNumber - FirstLowInvalidHeapAttributeNumber);
		if (m->kind == LF_MAP_JOIN && nullable)
		{
			JoinExpr   *j = linitial_node(JoinExpr, sub->jointree->fromlist);

			j->quals = make_and_qual(j->quals, (Node *) to_claimed);
		}
		else
			sub->jointree->quals = make_and_qual(sub->jointree->quals, (Node *) to_claimed);
	}
	if (m->kind == LF_MAP_GROUPS)
	{
		TargetEntry *ctid = list_nth(sub->targetList, m->natts);

		ctid->expr = (Expr *) makeNullConst(TIDOID, -1, InvalidOid);
	}
	return sub;
}

static HTAB *step_plans = NULL;

static StepPlan *build_step_plan(LfMigration *mig, Oid input, LfMapping *um);

/*
 * The step plans of input, with their targets locked: before any row is
 * claimed, so that a claimer never holds rows while it waits for a lock on
 * a target (a session holding a SHARE lock on one, say).
 */
static StepPlan *
step_plan(LfMigration *mig, Oid input, LfMapping *um)
{
	StepPlan   *sp = build_step_plan(mig, input, um);
	ListCell   *lc;

	foreach(lc, sp->inserts)
		lock_plan_relations(lfirst_node(PlannedStmt, lc));
	return sp;
}

static StepPlan *
build_step_plan(LfMigration *mig, Oid input, LfMapping *um)
{
	StepKey		key = {mig->id, input, um ? um->id : 0};
	StepPlan   *sp;
	bool		found;
	ListCell   *lc;
	List	   *inserts = NIL;
	List	   *unfiltered = NIL;
	List	   *direct = NIL;
	PlannedStmt *unit_plan = NULL;
	PlannedStmt *few_rows = NULL;
	MemoryContext old;

	sp = plan_cache_entry(&step_plans, "leapfrog migration steps", sizeof(StepKey),
						  sizeof(StepPlan), &key, &found);
	if (found && sp->ready)
		return sp;
	sp->ready = false;

	/*
	 * INSERT INTO target SELECT <mapping> FROM retired WHERE ... AND ctid =
	 * ANY ($n): the row mappings of input ($1), or those that read an input
	 * of the group or join mapping, whose rows migrate with its units ($n for
	 * its input n - 1: the copy of a table that stays live, start.c).
	 */
	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);
		Query	   *sub;
		RangeTblEntry *irte;
		Relation	rel;
		Query	   *ins;
		PlannedStmt *ps;
		Node	   *filtered;
		int			paramid = 1;

		if (m->kind != LF_MAP_ROWS)
			continue;
		/* of an input tracked by keys, only its carrier's step copies it */
		if (um && OidIsValid(um->done_keys) && m->done_keys != um->done_keys)
			continue;
		if (um)
			paramid = lf_unit_input_index(um, m->input) + 1;
		else if (m->input != input)
			continue;
		if (paramid < 1)
			continue;
		sub = copyObject(m->query);
		if (list_length(sub->rtable) != 1 || rt_fetch(1, sub->rtable)->relid != m->input)
			elog(ERROR, "leapfrog: unexpected mapping %d", m->id);
		/* the retired table is reachable by the extension's owner only */
		irte = rt_fetch(1, sub->rtable);
		irte->checkAsUser = lf_catalog_owner();
		irte->selectedCols = bms_add_member(irte->selectedCols,
											SelfItemPointerAttributeNumber - FirstLowInvalidHeapAttributeNumber);
		filtered = sub->jointree->quals;
		sub->jointree->quals = make_and_qual(filtered, (Node *) ctid_any_param(1, paramid));
		rel = table_open(m->target, AccessShareLock);
		ins = insert_select(rel, relation_rte(rel, ACL_INSERT, mig->owner), sub, "lf_source");
		ins->canSetTag = true;
		table_close(rel, AccessShareLock);
		ps = plan_in_top_context(ins, "leapfrog migrate");
		old = MemoryContextSwitchTo(TopMemoryContext);
		inserts = lappend(inserts, ps);
		unfiltered = lappend_int(unfiltered, filtered == NULL ? paramid : 0);
		direct = lappend_int(direct, lf_copy_param(ps));
		MemoryContextSwitchTo(old);
	}
	/*
	 * A group or join mapping: INSERT INTO target SELECT <its units>.  (A
	 * row mapping keyed by its input's primary key is one of those above.)
	 */
	if (um != NULL && um->kind != LF_MAP_ROWS)
	{
		Relation	rel = table_open(um->target, AccessShareLock);
		Query	   *ins = insert_select(rel, relation_rte(rel, ACL_INSERT, mig->owner),
										unit_step_query(um), "lf_source");
		PlannedStmt *ps;
		int			nestlevel = NewGUCNestLevel();

		ins->canSetTag = true;
		table_close(rel, AccessShareLock);

		/*
		 * Groups by hashing rather than sorting: the planner, which cannot
		 * know how many rows ctid = ANY ($1) brings, sorts them, and a
		 * worker's batch of 5000 order lines aggregated 1.3 times as fast
		 * hashed (the same for a statement's one group).
		 */
		if (um->kind == LF_MAP_GROUPS)
			(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
		/* (the planner scribbles on its Query) */
		ps = plan_in_top_context(um->kind == LF_MAP_JOIN ? copyObject(ins) : ins,
								 "leapfrog migrate");
		if (um->kind == LF_MAP_JOIN)
		{
			(void) set_config_option("enable_hashjoin", "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
			(void) set_config_option("enable_mergejoin", "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
			few_rows = plan_in_top_context(ins, "leapfrog migrate");
		}
		AtEOXact_GUC(true, nestlevel);
		old = MemoryContextSwitchTo(TopMemoryContext);
		inserts = lappend(inserts, ps);
		unfiltered = lappend_int(unfiltered, 0);
		direct = lappend_int(direct, 0);	/* a group's or join's plan */
		MemoryContextSwitchTo(old);
		unit_plan = ps;
	}

	sp->inserts = inserts;
	sp->unfiltered = unfiltered;
	sp->direct = direct;
	sp->unit_plan = unit_plan;
	sp->few_rows = few_rows;
	sp->ready = true;			/* last: an error above leaves it to be rebuilt */
	return sp;
}

/*
 * Clear the prune hint of the pages of tids[0..n) (in block order) of a
 * retired table, which the claim that deleted them set.  A retired table
 * only loses rows until it is dropped, so pruning its pages frees space
 * nobody will use; but the next statement that reads such a page (a
 * relevance query, a computing read, another unit's claim) prunes it
 * first, on the application's time: on TPC-C's join migration that was
 * 0.36M instructions per transaction, a tenth of what the migration adds
 * to a transaction (bench/statement_cost.py).  Autovacuum is off on these
 * tables for the same reason (start.c); VACUUM still prunes them.  The
 * hint is only a hint (heap_page_prune_opt), so it is changed as hint bits
 * are, and a standby, which never prunes, keeps it.
 */
static void
leave_unpruned(Relation rel, ItemPointer tids, int n)
{
	BlockNumber last = InvalidBlockNumber;

	for (int i = 0; i < n; i++)
	{
		BlockNumber blk = ItemPointerGetBlockNumber(&tids[i]);
		Buffer		buf;
		PageHeader	page;

		if (blk == last)
			continue;
		last = blk;
		buf = ReadBuffer(rel, blk);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = (PageHeader) BufferGetPage(buf);
		if (TransactionIdIsValid(page->pd_prune_xid))
		{
			page->pd_prune_xid = InvalidTransactionId;
			MarkBufferDirtyHint(buf, true);
		}
		UnlockReleaseBuffer(buf);
	}
}

/*
 * Delete, without waiting, the rows of blocks [lo, hi) of rel visible to
 * snap, at the current command.  Returns how many; their tids in *tids_out,
 * allocated in cxt.
 */
static int
claim_range(Relation rel, Snapshot snap, BlockNumber lo, BlockNumber hi,
			ItemPointerData **tids_out, MemoryContext cxt)
{
	ItemPointerData min,
				max;
	TableScanDesc scan;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	CommandId	cid = GetCurrentCommandId(true);
	int			n = 0;
	int			cap = 256;
	ItemPointerData *tids = MemoryContextAlloc(cxt, cap * sizeof(ItemPointerData));

	ItemPointerSet(&min, lo, FirstOffsetNumber);
	ItemPointerSet(&max, hi - 1, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &min, &max);
	while (table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		res = table_tuple_delete(rel, &tid, cid, snap, InvalidSnapshot, false, &tmfd, false);
		if (res == TM_Ok)
		{
			if (n == cap)
			{
				cap *= 2;
				tids = repalloc(tids, cap * sizeof(ItemPointerData));
			}
			tids[n++] = tid;
		}
		else if (res != TM_BeingModified && res != TM_Updated && res != TM_Deleted)
			elog(ERROR, "leapfrog: unexpected result %d deleting row (%u,%u) of %s", (int) res,
				 ItemPointerGetBlockNumber(&tid), ItemPointerGetOffsetNumber(&tid),
				 RelationGetRelationName(rel));
		/* else being migrated by another transaction, or migrated meanwhile */
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	leave_unpruned(rel, tids, n);
	*tids_out = tids;
	return n;
}

/*
 * The snapshot of a step: the transaction's, at the claim's command, in a
 * copy of its own.  Under REPEATABLE READ GetTransactionSnapshot() returns
 * the transaction snapshot itself, whose command id the next
 * CommandCounterIncrement() advances: the copies would no longer see the
 * rows the claim deleted.
 */
static Snapshot
step_snapshot(void)
{
	Snapshot	snap;

	CommandCounterIncrement();
	PushCopiedSnapshot(GetTransactionSnapshot());
	snap = RegisterSnapshot(GetActiveSnapshot());
	PopActiveSnapshot();
	return snap;
}

/*
 * Delete the rows tids[0..ntids) of rel that snap sees, at the current
 * command, as DELETE FROM rel WHERE ctid = ANY (...) would: waiting for a
 * transaction that is migrating one of them; skipping a row migrated by a
 * transaction that committed meanwhile under READ COMMITTED, failing with
 * 40001 under REPEATABLE READ and SERIALIZABLE (its snapshot cannot see
 * the new row).  Fetching through snap gives SERIALIZABLE its predicate
 * locks, as the TID scan would.  Returns how many; their tids in *out.
 */
/*
 * Set when a claim skipped a row corrected meanwhile (claim_tids), or a
 * step met a live row updated since its relevance query found it
 * (skip_done_seeds): the row is still to migrate, at its new ctid, and the
 * statement needs another round (migrate_rounds).
 */
static bool claim_saw_update = false;

static int
claim_tids(Relation rel, Snapshot snap, ItemPointer tids, int ntids, ItemPointerData **out)
{
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	CommandId	cid = GetCurrentCommandId(true);
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);
	ItemPointerData *claimed = palloc(sizeof(ItemPointerData) * Max(ntids, 1));
	int			n = 0;
	int			i;

	for (i = 0; i < ntids; i++)
	{
		ItemPointerData tid = tids[i];
		TM_FailureData tmfd;
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		if (!ItemPointerIsValid(&tid) || ItemPointerGetBlockNumber(&tid) >= nblocks ||
			!table_tuple_fetch_row_version(rel, &tid, snap, slot))
			continue;
		res = table_tuple_delete(rel, &tid, cid, snap, InvalidSnapshot, true, &tmfd, false);
		switch (res)
		{
			case TM_Ok:
				claimed[n++] = tid;
				break;
			case TM_SelfModified:
				break;			/* migrated by this very command already */
			case TM_Updated:
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent delete")));
				/*
				 * Deleted: migrated by another transaction meanwhile.
				 * Updated: corrected (leapfrog.correct_row), and still
				 * waiting at its new ctid, which the next round finds.
				 */
				if (res == TM_Updated)
					claim_saw_update = true;
				break;
			default:
				elog(ERROR, "leapfrog: unexpected result %d deleting row (%u,%u) of %s", (int) res,
					 ItemPointerGetBlockNumber(&tid), ItemPointerGetOffsetNumber(&tid),
					 RelationGetRelationName(rel));
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	leave_unpruned(rel, claimed, n);
	*out = claimed;
	return n;
}

/*
 * Copy the rows of input just claimed (deleted at the command of snap) into
 * every target, reading them through snap, which still sees them.  The
 * caller has set the error context.
 */
static void
copy_claimed(LfMigration *mig, StepPlan *sp, Snapshot snap, ParamListInfo params,
			 const int *counts)
{
	int			n = 0;
	LfSavedUser saved = lf_become(mig->owner, SECURITY_RESTRICTED_OPERATION);
	bool		queued = false;
	bool		bulk_ok = lf_bulk_batch;	/* a worker's batch: not its checks' steps */
	ListCell   *lc,
			   *lu,
			   *ld;

	lf_bulk_batch = false;
	/* the INSERTs' trigger events fire as the step ends (check_constraints_now) */
	AfterTriggerBeginQuery();
	forthree(lc, sp->inserts, lu, sp->unfiltered, ld, sp->direct)
	{
		PlannedStmt *ps = lfirst(lc);
		uint64		copied;

		/* the join mapping's plan (never direct) */
		if (sp->few_rows && ps == sp->unit_plan && params->numParams == 2 &&
			(int64) counts[0] * counts[1] <= LF_FEW_PAIRS)
			ps = sp->few_rows;
		CommandCounterIncrement();
		if (!lf_copy_rows(ps, lfirst_int(ld), snap, params, bulk_ok, &copied))
		{
			copied = run_plan(ps, "leapfrog migrate", snap, params, None_Receiver, true);
			queued = true;
		}

		/* a mapping without a filter copies every claimed row, or none is lost */
		if (lfirst_int(lu) && copied != (uint64) counts[lfirst_int(lu) - 1])
			elog(ERROR, "leapfrog: a migration step copied %llu of its %d claimed rows",
				 (unsigned long long) copied, counts[lfirst_int(lu) - 1]);
	}
	if (queued)
	{
		CommandCounterIncrement();
		PushActiveSnapshot(snap);
	}
	AfterTriggerEndQuery(NULL);		/* (its own EState, as for deferred events) */
	if (queued)
		PopActiveSnapshot();
	for (int i = 0; i < params->numParams; i++)
		n += counts[i];
	lf_unbecome(saved);
	CommandCounterIncrement();
	lf_progress_add(mig->id, n);
}

/* ---------------------------------------------------------------------
 * Steps of group and join mappings: whole units (units.c)
 *
 * The rows of the units are claimed in the order of the mapping's inputs,
 * then of ctids, by everyone: the first row of a unit decides who migrates
 * it.  A statement's step waits for it like any claim (claim_tids): when
 * the holder commits, every row of the unit is gone (skipped, or 40001);
 * when it aborts, every row is back.  A worker takes a unit only if it gets
 * its first row without waiting, and then must get the rest.
 * ---------------------------------------------------------------------
 */

/*
 * Lock every input of m, as a step on one of them would, and a live input's
 * table of done keys (live.c), which a completion drops while the live
 * input stays; false if one is gone, or if mig is no longer running: the
 * migration completed meanwhile.
 *
 * The tables' existence is not enough.  A completion leaves a live input's
 * table of done keys (and trigger) for later while a writer holds the live
 * table, and a lock this transaction already held reads no invalidation:
 * the trigger of a statement that began before the completion, or a
 * worker's batch chosen before it, still found the migration in the cache,
 * and migrated a group written since (a new table's row that eagerly does
 * not exist, or 23505 against the application's own).  So read the
 * invalidations, and ask the cache again.
 */
static bool
lock_unit_inputs(LfMigration *mig, LfMapping *m)
{
	for (int i = 0; i < m->ninputs; i++)
		if (!lf_lock_input_if_exists(m->inputs[i], RowExclusiveLock))
			return false;
	if (OidIsValid(m->done_keys) && !lf_lock_input_if_exists(m->done_keys, RowExclusiveLock))
		return false;
	return lf_still_running(mig->id);
}

/* Copy the claimed rows of every input of m (claimed[i]: those of input i). */
static void
copy_units(LfMigration *mig, LfMapping *m, StepPlan *sp, Snapshot snap, TidSet *claimed)
{
	ParamListInfo params = makeParamList(m->ninputs);
	int			counts[2] = {0, 0};

	for (int i = 0; i < m->ninputs; i++)
	{
		params->params[i].value = tid_array(claimed[i].tids, claimed[i].n);
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = TIDARRAYOID;
		counts[i] = claimed[i].n;
	}
	if (counts[0] + counts[1] > 0)
		copy_claimed(mig, sp, snap, params, counts);
}

/*
 * Delete the rows of the units that no other transaction is migrating,
 * without waiting; claimed[i] gets those of input i.  A unit whose first
 * row is taken, or gone, is left whole.
 */
static void
claim_units_nowait(LfMapping *m, Snapshot snap, List *units, TidSet *claimed)
{
	CommandId	cid = GetCurrentCommandId(true);
	Relation	rels[2];
	ListCell   *lc;

	for (int i = 0; i < m->ninputs; i++)
		rels[i] = table_open(m->inputs[i], NoLock);
	foreach(lc, units)
	{
		LfUnit	   *u = lfirst(lc);
		bool		first = true;

		for (int i = 0; i < m->ninputs; i++)
			for (int j = 0; j < u->n[i]; j++)
			{
				TM_FailureData tmfd;
				TM_Result	res;

				CHECK_FOR_INTERRUPTS();
				res = table_tuple_delete(rels[i], &u->tids[i][j], cid, snap, InvalidSnapshot,
										 false, &tmfd, false);
				if (res != TM_Ok && first)
					goto next_unit;		/* another transaction has it */
				if (res == TM_Updated)	/* corrected: check_units_whole */
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent update"),
							 errdetail("A row of a group or join key being migrated was corrected meanwhile.")));
				if (res != TM_Ok)
					elog(ERROR, "leapfrog: row (%u,%u) of %s of a unit is taken though its first row was not (result %d)",
						 ItemPointerGetBlockNumber(&u->tids[i][j]),
						 ItemPointerGetOffsetNumber(&u->tids[i][j]),
						 RelationGetRelationName(rels[i]), (int) res);
				first = false;
				tidset_add(&claimed[i], &u->tids[i][j]);
			}
next_unit:
		;
	}
	for (int i = 0; i < m->ninputs; i++)
	{
		tidset_sort_unique(&claimed[i]);
		leave_unpruned(rels[i], claimed[i].tids, claimed[i].n);
		table_close(rels[i], NoLock);
	}
}

/*
 * The condition "column attno of input i of m has one of the key values
 * values[0..n) of column k of input from" over a mapping's output (varno
 * 1): = ANY with the join's equality, or the type's for the same input; a
 * group's NULL key (one group) also matches NULL.  NULL if nothing can match.
 */
static Node *
key_condition(LfMapping *m, int i, int from, int k, Oid rel_i, Datum *values, bool *nulls, int n)
{
	AttrNumber	att = m->keys[i][k];
	Oid			type_i,
				type_from = get_atttype(m->inputs[from], m->keys[from][k]);
	int32		typmod_i;
	Oid			coll_i;
	Oid			op;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *vals = palloc(sizeof(Datum) * Max(n, 1));
	int			nv = 0;
	bool		any_null = false;
	ScalarArrayOpExpr *saop;
	Var		   *v;
	Node	   *cond = NULL;

	get_atttypetypmodcoll(rel_i, att, &type_i, &typmod_i, &coll_i);
	if (i == from)
		op = lookup_type_cache(type_i, TYPECACHE_EQ_OPR)->eq_opr;
	else if (from == 0)
		op = get_commutator(m->eqops[k]);	/* input 1's column = input 0's value */
	else
		op = m->eqops[k];
	if (!OidIsValid(op))
		elog(ERROR, "leapfrog: no equality for key column %d of a unit", k + 1);
	for (int j = 0; j < n; j++)
	{
		if (nulls[j])
			any_null = true;
		else
			vals[nv++] = values[j];
	}
	v = makeVar(1, att, type_i, typmod_i, coll_i, 0);
	if (nv > 0)
	{
		get_typlenbyvalalign(type_from, &typlen, &typbyval, &typalign);
		saop = makeNode(ScalarArrayOpExpr);
		saop->opno = op;
		saop->opfuncid = get_opcode(op);
		saop->useOr = true;
		saop->inputcollid = coll_i;
		saop->args = list_make2(v, makeConst(get_array_type(type_from), -1, InvalidOid, -1,
											 PointerGetDatum(construct_array(vals, nv, type_from, typlen,
																			 typbyval, typalign)),
											 false, false));
		cond = (Node *) saop;
	}
	if (any_null && m->kind == LF_MAP_GROUPS)
	{
		NullTest   *nt = makeNode(NullTest);

		nt->arg = (Expr *) copyObject(v);
		nt->nulltesttype = IS_NULL;
		nt->location = -1;
		cond = cond ? (Node *) makeBoolExpr(OR_EXPR, list_make2(cond, nt), -1) : (Node *) nt;
	}
	return cond;
}

static bool migrate_set(TidSet *set);
static void run_relevance(List *item, Snapshot snap, ParamListInfo params, TidSet *set);
static int	set_cmp(const ListCell *a, const ListCell *b);
static TidSet *set_for(List **sets, List *item);

/*
 * Migrate what the relevance items find, round after round, until a round
 * finds nothing: the rows up a chain that a pull needs in place (the
 * earlier migrations first, as in migrate_rounds).
 */
static void
migrate_items(List *items)
{
	for (int round = 0;; round++)
	{
		List	   *sets = NIL;
		bool		any = false;
		Snapshot	snap;
		ListCell   *lc;

		CommandCounterIncrement();
		snap = RegisterSnapshot(GetTransactionSnapshot());
		foreach(lc, items)
		{
			TidSet	   *set = set_for(&sets, lfirst(lc));

			run_relevance(lfirst(lc), snap, NULL, set);
			any |= set->n > 0;
		}
		UnregisterSnapshot(snap);
		if (!any)
			return;
		if (round >= 1000)
			elog(ERROR, "leapfrog: the rows a pull needs up the chain did not converge");
		list_sort(sets, set_cmp);
		foreach(lc, sets)
			(void) migrate_set((TidSet *) lfirst(lc));	/* (completed: moved) */
	}
}

/*
 * Chained migrations: before the units of the given rows of input (of m,
 * of mig) are found, the earlier migration that fills an input of m moves
 * in every row it still holds for those units' keys.  A unit must be whole
 * when it migrates (units.c), and rows that arrive later would make a
 * second, partial one.  If the earlier migration reads a table still being
 * filled in turn, the rows up the chain that its mapping would turn into
 * those keys are moved in first (lf_pull_plan's upstream items), and so on
 * up; a GROUP BY or join step up the chain pulls for its own units alike.
 */
static void
pull_upstream(LfMigration *mig, LfMapping *m, int from, ItemPointer tids, int ntids)
{
	Relation	rel = table_open(m->inputs[from], NoLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	Datum	   *values[INDEX_MAX_KEYS];
	bool	   *nulls[INDEX_MAX_KEYS];
	int			n = 0;
	Snapshot	snap;

	CommandCounterIncrement();
	snap = RegisterSnapshot(GetTransactionSnapshot());
	for (int k = 0; k < m->nkeys; k++)
	{
		values[k] = palloc(sizeof(Datum) * ntids);
		nulls[k] = palloc(sizeof(bool) * ntids);
	}
	for (int j = 0; j < ntids; j++)
	{
		if (!table_tuple_fetch_row_version(rel, &tids[j], snap, slot))
			continue;
		for (int k = 0; k < m->nkeys; k++)
		{
			Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), m->keys[from][k] - 1);
			Datum		d = slot_getattr(slot, m->keys[from][k], &nulls[k][n]);

			/* a NULL key (a GROUP BY's NULL group) has no value to copy */
			values[k][n] = nulls[k][n] ? (Datum) 0 : datumCopy(d, att->attbyval, att->attlen);
		}
		n++;
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	UnregisterSnapshot(snap);
	if (n == 0)
		return;

	for (int i = 0; i < m->ninputs; i++)
	{
		LfMigration *up = lf_upstream_of(mig, m->inputs[i]);
		List	   *conds = NIL;
		ListCell   *lc;

		if (up == NULL)
			continue;
		for (int k = 0; k < m->nkeys; k++)
		{
			Node	   *c = key_condition(m, i, from, k, m->inputs[i], values[k], nulls[k], n);

			if (c == NULL)
				break;
			conds = lappend(conds, c);
		}
		if (list_length(conds) < m->nkeys)
			continue;			/* no key can match there */
		foreach(lc, up->mappings)
		{
			LfMapping  *um = lfirst(lc);
			TidSet		set = {CurrentMemoryContext, um->input};
			TidReceiver rcv = {{tid_receive, tid_startup, tid_shutdown, tid_destroy, DestNone}};
			PlannedStmt *ps;
			List	   *upstream = NIL;

			if (um->target != m->inputs[i])
				continue;
			ps = lf_pull_plan(um, (Node *) make_ands_explicit(copyObject(conds)), &upstream);
			if (upstream)
				migrate_items(upstream);
			rcv.set = &set;
			CommandCounterIncrement();
			snap = RegisterSnapshot(GetTransactionSnapshot());
			(void) run_plan(ps, "leapfrog pull", snap, NULL, (DestReceiver *) &rcv, false);
			UnregisterSnapshot(snap);
			if (set.n == 0)
				continue;
			tidset_sort_unique(&set);
			(void) lf_migrate_rows(up, um->input, um, set.tids, set.n);
		}
	}
	CommandCounterIncrement();
}

/*
 * Every unit claimed whole or not at all.  Claimers of one unit meet at its
 * first row, so a claimer that got that row gets the others, unless a row
 * was corrected (leapfrog.correct_row: updated, at a new ctid) or
 * quarantined (deleted) while the claimer waited for it, after it looked the
 * unit up.  Computing the group or join key from the rest would be wrong:
 * the statement fails with 40001 and its retry looks the unit up again.
 * (claimed[i] is sorted: claim_tids keeps the order of the sorted rows.)
 */
static void
check_units_whole(LfMapping *m, List *units, TidSet *claimed)
{
	ListCell   *lc;

	foreach(lc, units)
	{
		LfUnit	   *u = lfirst(lc);
		int			got = 0,
					want = 0;

		for (int i = 0; i < m->ninputs; i++)
			for (int j = 0; j < u->n[i]; j++)
			{
				want++;
				if (claimed[i].n > 0 &&
					bsearch(&u->tids[i][j], claimed[i].tids, claimed[i].n,
							sizeof(ItemPointerData), lf_tid_cmp) != NULL)
					got++;
			}
		if (got > 0 && got < want)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update"),
					 errdetail("A row of a group or join key being migrated was corrected or quarantined meanwhile.")));
	}
}

/*
 * The units of the given rows of input (a statement's step): every row of
 * them claimed, waiting, in the order of the inputs and of ctids, then
 * copied.  Returns the rows migrated.
 */
static uint64
migrate_units(LfMigration *mig, LfMapping *m, Oid input, ItemPointer tids, int ntids,
			  MigrateContext *mc)
{
	int			from = lf_unit_input_index(m, input);
	TidSet		claimed[2] = {{CurrentMemoryContext}, {CurrentMemoryContext}};
	StepPlan   *sp;
	Snapshot	snap;
	List	   *units;
	uint64		n = 0;

	if (!lock_unit_inputs(mig, m))
		return 0;				/* completed meanwhile */
	if (lf_has_upstream(mig))
		pull_upstream(mig, m, from, tids, ntids);
	sp = step_plan(mig, input, m);
	snap = step_snapshot();
	units = lf_units_of(m, from, tids, ntids, snap);
	for (int i = 0; i < m->ninputs; i++)
	{
		TidSet		rows = {CurrentMemoryContext, m->inputs[i]};
		Relation	rel;
		ListCell   *lc;

		foreach(lc, units)
		{
			LfUnit	   *u = lfirst(lc);

			for (int j = 0; j < u->n[i]; j++)
				tidset_add(&rows, &u->tids[i][j]);
		}
		tidset_sort_unique(&rows);
		rel = table_open(m->inputs[i], NoLock);
		claimed[i].n = claim_tids(rel, snap, rows.tids, rows.n, &claimed[i].tids);
		table_close(rel, NoLock);
		n += claimed[i].n;
	}
	check_units_whole(m, units, claimed);
	if (n > 0)
	{
		if (claimed[from].n > 0)
		{
			mc->tids = claimed[from].tids;
			mc->n = claimed[from].n;
		}
		copy_units(mig, m, sp, snap, claimed);
	}
	UnregisterSnapshot(snap);
	return n;
}

/*
 * A background step's claimed rows, kept in TopMemoryContext (LfClaim),
 * added to those it kept already (a live input's mappings claim in turn).
 */
static void
keep_claim(LfClaim *claim, TidSet *rows)
{
	TidSet		all = {TopMemoryContext};

	if (claim->n == 0)
	{
		if (claim->tids)
			pfree(claim->tids);
		claim->tids = MemoryContextAlloc(TopMemoryContext, sizeof(ItemPointerData) * Max(rows->n, 1));
		memcpy(claim->tids, rows->tids, sizeof(ItemPointerData) * rows->n);
		claim->n = rows->n;
		return;
	}

	for (int i = 0; i < claim->n; i++)
		tidset_add(&all, &claim->tids[i]);
	for (int i = 0; i < rows->n; i++)
		tidset_add(&all, &rows->tids[i]);
	tidset_sort_unique(&all);
	if (claim->tids)
		pfree(claim->tids);
	claim->tids = all.tids;
	claim->n = all.n;
}

/* The rows of blocks [lo, hi) of input that snap sees, into set. */
static void
range_rows(Oid input, Snapshot snap, BlockNumber lo, BlockNumber hi, TidSet *set)
{
	Relation	rel = table_open(input, NoLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ItemPointerData min,
				max;
	TableScanDesc scan;

	ItemPointerSet(&min, lo, FirstOffsetNumber);
	ItemPointerSet(&max, hi - 1, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &min, &max);
	while (table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
		tidset_add(set, &slot->tts_tid);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
}

/*
 * The units of the rows of blocks [lo, hi) of input (a background step):
 * those no other transaction is migrating, claimed without waiting and
 * copied.  claim gets the claimed rows of input.
 */
static uint64
migrate_unit_range(LfMigration *mig, LfMapping *m, Oid input, BlockNumber lo, BlockNumber hi,
				   LfClaim *claim, MigrateContext *mc)
{
	int			from = lf_unit_input_index(m, input);
	TidSet		seeds = {CurrentMemoryContext, input};
	TidSet		claimed[2] = {{CurrentMemoryContext}, {CurrentMemoryContext}};
	StepPlan   *sp;
	Snapshot	snap;

	if (!lock_unit_inputs(mig, m))
		return 0;
	sp = step_plan(mig, input, m);
	snap = step_snapshot();
	range_rows(input, snap, lo, hi, &seeds);

	claim_units_nowait(m, snap, lf_units_of(m, from, seeds.tids, seeds.n, snap), claimed);
	if (claimed[from].n > 0)
	{
		keep_claim(claim, &claimed[from]);
		mc->tids = claim->tids;
		mc->n = claim->n;
	}
	copy_units(mig, m, sp, snap, claimed);
	UnregisterSnapshot(snap);
	return claimed[0].n + claimed[1].n;
}

/* ---------------------------------------------------------------------
 * Steps of a live input tracked in place (live.c)
 *
 * A group is claimed by inserting its key into the table of done keys
 * (lf_live_claim), then copied from the live table with the step's
 * snapshot: a group nobody had claimed holds exactly its rows at start(),
 * since every write of one of its rows claims it first (the trigger).  The
 * rows are looked up before the claim; if the claim waited for a claimer
 * that aborted, they are as they were, and a claimer that committed leaves
 * the group migrated (skipped).
 * ---------------------------------------------------------------------
 */

/*
 * Copy the rows of the units claimed (a list of LfUnit); returns how many
 * rows of input i (the rows of a worker's claim, *claim, are those).
 */
static uint64
copy_live_claimed(LfMigration *mig, LfMapping *m, int i, StepPlan *sp, Snapshot snap, List *units,
				  LfClaim *claim, MigrateContext *mc)
{
	TidSet		claimed[2] = {{CurrentMemoryContext}, {CurrentMemoryContext}};
	ListCell   *lc;

	foreach(lc, units)
	{
		LfUnit	   *u = lfirst(lc);

		for (int j = 0; j < m->ninputs; j++)
			for (int r = 0; r < u->n[j]; r++)
				tidset_add(&claimed[j], &u->tids[j][r]);
	}
	if (claimed[0].n + claimed[1].n == 0)
		return 0;
	for (int j = 0; j < m->ninputs; j++)
		tidset_sort_unique(&claimed[j]);
	if (claim)
		keep_claim(claim, &claimed[i]);
	mc->tids = claimed[i].tids;
	mc->n = claimed[i].n;
	copy_units(mig, m, sp, snap, claimed);
	return claimed[i].n;
}

/*
 * The rows of tids[0..ntids) of input i of m whose unit m has not migrated
 * (lf_live_done, with snap), into *out: complete() hands every mapping
 * tracking the input the rows some mapping has not migrated, and looking a
 * unit up costs a read of all its rows (a shared join's complete() took
 * five times its workers' CPU looking up items migrated long before).
 */
static int
skip_done_seeds(LfMapping *m, int i, LfDoneKeys *d, Snapshot snap, ItemPointer tids, int ntids,
				ItemPointer *out)
{
	Relation	rel = table_open(m->inputs[i], NoLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ItemPointer keep = palloc(sizeof(ItemPointerData) * Max(ntids, 1));
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);
	int			n = 0;

	for (int j = 0; j < ntids; j++)
	{
		Datum		key[LF_KEY_MAX];

		CHECK_FOR_INTERRUPTS();
		if (ItemPointerIsValid(&tids[j]) && ItemPointerGetBlockNumber(&tids[j]) < nblocks &&
			table_tuple_fetch_row_version(rel, &tids[j], snap, slot))
		{
			lf_live_tuple_key(m, i, ExecFetchSlotHeapTuple(slot, false, NULL),
							  RelationGetDescr(rel), key);
			if (lf_key_joins_nothing(m, i, key) || lf_live_done(d, m, key, snap))
				continue;
		}
		else
		{
			/*
			 * Updated since the relevance query found it, by a write that
			 * left its group unmigrated (no column the group's copy reads
			 * changed: live.c, unit_columns_changed), or deleted (its group
			 * migrated first).  lf_units_of skips it; another round finds
			 * its new version, or its group migrated (live_moved_seed).
			 */
			claim_saw_update = true;
		}
		keep[n++] = tids[j];
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	*out = keep;
	return n;
}

/*
 * The units of the given rows of input `input` of m, tracked by keys: a
 * statement's step.  The rows are looked up first, then their units
 * claimed, waiting.
 */
static uint64
migrate_live_units(LfMigration *mig, LfMapping *m, Oid input, ItemPointer tids, int ntids,
				   MigrateContext *mc)
{
	StepPlan   *sp;
	Snapshot	snap;
	LfDoneKeys *d;
	List	   *claimed = NIL;
	ListCell   *lc;
	uint64		n;
	int			i = lf_unit_input_index(m, input);

	if (!lock_unit_inputs(mig, m))
		return 0;
	sp = step_plan(mig, m->input, m);
	snap = step_snapshot();
	d = lf_done_keys_open(m);
	ntids = skip_done_seeds(m, i, d, snap, tids, ntids, &tids);
	foreach(lc, lf_units_of(m, i, tids, ntids, snap))
	{
		LfUnit	   *u = lfirst(lc);

		if (lf_live_claim(d, m, u->key, snap, true) == LF_CLAIMED)
			claimed = lappend(claimed, u);
	}
	lf_done_keys_close(d);
	n = copy_live_claimed(mig, m, i, sp, snap, claimed, NULL, mc);
	UnregisterSnapshot(snap);
	return n;
}

/*
 * The groups of the rows of blocks [lo, hi) of a live input: a worker's
 * step.  Their keys are read from the blocks and claimed without waiting,
 * then only the groups claimed are looked up: a group nobody had claimed
 * holds its rows at start(), whenever they are read (a writer that claimed
 * it first and committed leaves it migrated; one that aborted, as it was).
 */
/*
 * The mappings (ids) whose keys this worker looks up before it claims them
 * (migrate_live_range): most keys of its last block range were migrated.
 */
static List *look_first = NIL;

static uint64
migrate_live_range(LfMigration *mig, LfMapping *m, Oid input, BlockNumber lo, BlockNumber hi,
				   LfClaim *claim, MigrateContext *mc)
{
	int			i = lf_unit_input_index(m, input);
	StepPlan   *sp;
	Snapshot	snap;
	LfDoneKeys *d;
	List	   *keys;
	List	   *tids = NIL;		/* of each key's row, for row_keys */
	bool		look;
	List	   *claimed = NIL;
	List	   *rows = NIL;		/* the claimed keys' rows, for row_keys */
	List	   *units;
	ListCell   *lc,
			   *lt;
	uint64		n;

	if (!lock_unit_inputs(mig, m))
		return 0;
	sp = step_plan(mig, m->input, m);
	snap = step_snapshot();
	d = lf_done_keys_open(m);
	keys = lf_live_range_keys(m, i, snap, lo, hi, m->row_keys ? &tids : NULL);
	look = list_member_int(look_first, m->id);
	foreach(lc, keys)
	{
		if (lf_live_claim_nowait(d, m, lfirst(lc), look))
		{
			claimed = lappend(claimed, lfirst(lc));
			if (m->row_keys)
				rows = lappend(rows, list_nth(tids, foreach_current_index(lc)));
		}
	}
	lf_done_keys_close(d);

	/*
	 * Most keys of the range migrated already (a group's rows scattered
	 * over the table): the next range looks each key up before it claims.
	 */
	if (keys != NIL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		if (list_length(claimed) < list_length(keys) * 3 / 4)
			look_first = list_append_unique_int(look_first, m->id);
		else
			look_first = list_delete_int(look_first, m->id);
		MemoryContextSwitchTo(old);
	}
	if (m->row_keys)
	{
		/*
		 * A primary key's only row that snap sees is the one read: no look-up
		 * (it took a third of the workers' CPU, bench/README.md).
		 */
		units = NIL;
		forboth(lc, claimed, lt, rows)
		{
			LfUnit	   *u = palloc0(sizeof(LfUnit));

			u->key = lfirst(lc);
			u->n[0] = 1;
			u->tids[0] = lfirst(lt);
			units = lappend(units, u);
		}
	}
	else
		units = lf_units_by_keys(m, claimed, snap);
	foreach(lc, units)
	{
		/* its key was read from a row that snap sees: a unit without it is partial */
		if (((LfUnit *) lfirst(lc))->n[i] == 0)
			elog(ERROR, "leapfrog: a unit of %s read in blocks %u to %u has no row through index %u",
				 get_rel_name(input), lo, hi - 1, lf_unit_index(m, i));
	}
	n = copy_live_claimed(mig, m, i, sp, snap, units, claim, mc);
	UnregisterSnapshot(snap);
	return n;
}

/*
 * The trigger's step (live.c), for a write of input i: migrate the unit of
 * key (a group, or a join key with its rows of both inputs), unless it is
 * migrated, waiting for a transaction migrating it.  A key that no row had
 * at start() is claimed all the same, with no row to copy: the rows
 * written with it later are never computed into a unit.
 */
void
lf_migrate_live_key(LfMigration *mig, LfMapping *m, int i, Datum *key)
{
	MigrateContext mc = {mig, m->inputs[i], NULL, 0};
	ErrorContextCallback errcb;
	StepPlan   *sp;
	Snapshot	snap;
	LfDoneKeys *d;
	LfLiveClaim c;

	/*
	 * Every input, as a worker's step: a join's other input is not the
	 * table written, and a completion that committed after this backend
	 * last looked drops a retired input at once, while the table of done
	 * keys waits for the written table's lock (live_join_complete).
	 */
	if (!lock_unit_inputs(mig, m))
		return;					/* completed meanwhile */
	d = lf_done_keys_open(m);
	if (lf_live_done(d, m, key, GetTransactionSnapshot()))
	{
		lf_done_keys_close(d);
		return;					/* migrated */
	}
	push_context(&errcb, &mc);
	sp = step_plan(mig, m->input, m);
	snap = step_snapshot();
	c = lf_live_claim(d, m, key, snap, true);
	lf_done_keys_close(d);
	if (c == LF_CLAIMED)
		(void) copy_live_claimed(mig, m, i, sp, snap, lf_units_by_keys(m, list_make1(key), snap),
								 NULL, &mc);
	UnregisterSnapshot(snap);
	pop_context(&errcb);
}

/*
 * Migrate the unmigrated rows of blocks [lo, hi) of input that no other
 * transaction is migrating (see above).  Returns the rows migrated.  *claim
 * gets them as soon as they are claimed, in TopMemoryContext, so that they
 * are known after an error (the worker then retries them one by one).
 */
uint64
lf_migrate_range(LfMigration *mig, Oid input, BlockNumber lo, BlockNumber hi, LfClaim *claim)
{
	MigrateContext mc = {mig, input, NULL, 0};
	ErrorContextCallback errcb;
	StepPlan   *sp;
	Relation	rel;
	Snapshot	snap;
	LfMapping  *um = lf_unit_mapping(mig, input);

	if (um)
	{
		uint64		n = 0;
		ListCell   *lc;

		push_context(&errcb, &mc);
		if (!OidIsValid(um->done_keys))
			n = migrate_unit_range(mig, um, input, lo, hi, claim, &mc);
		else
			foreach(lc, mig->mappings)	/* each mapping with a table of done keys */
			{
				LfMapping  *m = lfirst(lc);

				if (lf_tracks_keys(m, input))
					n += migrate_live_range(mig, m, input, lo, hi, claim, &mc);
			}
		pop_context(&errcb);
		return n;
	}
	sp = step_plan(mig, input, NULL);
	rel = table_open(input, RowExclusiveLock);
	snap = step_snapshot();
	mc.n = claim_range(rel, snap, lo, hi, &mc.tids, TopMemoryContext);
	table_close(rel, NoLock);
	if (mc.n == 0)
	{
		pfree(mc.tids);
		UnregisterSnapshot(snap);
		return 0;
	}
	claim->tids = mc.tids;
	claim->n = mc.n;

	push_context(&errcb, &mc);
	copy_claimed(mig, sp, snap, one_param(tid_array(mc.tids, mc.n), TIDARRAYOID), &mc.n);
	pop_context(&errcb);
	UnregisterSnapshot(snap);
	return mc.n;
}

/*
 * Migrate the given rows of input (sorted, unique or not) in one step
 * (claim_tids, then copy_claimed).  Rows another transaction migrated
 * meanwhile are skipped.  Returns the rows migrated.  Of an input tracked
 * by keys, their groups in mapping `only` (a row mapping: its carrier's),
 * or in each of its GROUP BY mappings if NULL (`only` is ignored for the
 * other inputs: their rows migrate for every mapping that reads them at
 * once).
 */
uint64
lf_migrate_rows(LfMigration *mig, Oid input, LfMapping *only, ItemPointer tids, int ntids)
{
	MigrateContext mc = {mig, input, tids, ntids};
	ErrorContextCallback errcb;
	StepPlan   *sp;
	Relation	rel;
	Snapshot	snap;
	ItemPointerData *claimed;
	int			n;

	LfMapping  *um;

	if (ntids == 0)
		return 0;
	push_context(&errcb, &mc);
	if ((um = lf_unit_mapping(mig, input)) != NULL)
	{
		ListCell   *lc;

		n = 0;
		/* a row mapping's rows move with its carrier's groups */
		if (only != NULL)
			only = lf_keys_carrier(mig, only);
		if (!OidIsValid(um->done_keys))
			n = (int) migrate_units(mig, um, input, tids, ntids, &mc);
		else
			foreach(lc, mig->mappings)	/* each mapping with a table of done keys */
			{
				LfMapping  *m = lfirst(lc);

				if (lf_tracks_keys(m, input) &&
					(only == NULL || only->id == m->id))
					n += (int) migrate_live_units(mig, m, input, tids, ntids, &mc);
			}
		pop_context(&errcb);
		return n;
	}

	sp = step_plan(mig, input, NULL);
	rel = table_open(input, RowExclusiveLock);
	snap = step_snapshot();
	n = claim_tids(rel, snap, tids, ntids, &claimed);
	table_close(rel, NoLock);
	if (n > 0)
	{
		mc.tids = claimed;
		mc.n = n;
		copy_claimed(mig, sp, snap, one_param(tid_array(claimed, n), TIDARRAYOID), &n);
	}
	UnregisterSnapshot(snap);
	pfree(claimed);
	pop_context(&errcb);
	return n;
}

/* ---------------------------------------------------------------------
 * The hook
 *
 * Snapshots.  Q is the snapshot PostgreSQL gave the statement
 * (qd->snapshot); snapshot.c says what state of each migration Q sees.
 *	- READ COMMITTED: every round of relevance queries runs on a new
 *	  snapshot, and the statement runs on the last one, which sees every
 *	  row migrated so far, by us or by the transactions we waited for.  Q
 *	  is replaced also when the plan's migrations are over or Q cannot see
 *	  a completion: Q can predate the last rows a completed migration moved
 *	  (it is taken before this hook; a STABLE function's statements run on
 *	  their caller's).
 *	- REPEATABLE READ and SERIALIZABLE: the relevance queries run on Q, and
 *	  once this statement has migrated rows, on Q with the current command
 *	  id, which the statement then runs on: it sees its own migrated rows
 *	  and nothing newer.  Not on the transaction snapshot: Q is not always
 *	  that one.  A foreign-key check runs on the latest snapshot (to see
 *	  rows committed since), crosschecked against the transaction's; run on
 *	  the transaction snapshot instead, a parent row could be deleted while
 *	  a newer child row in a new table still referenced it.  The crosscheck
 *	  snapshot also gets the current command id: rows migrated here are
 *	  rows the transaction saw in the inputs.
 * The statement runs on qd->snapshot, and so must its parallel workers,
 * which take the leader's active snapshot: PostgreSQL pushes qd->snapshot
 * for a portal's SELECT, but SPI and COPY (query) TO run the plan under the
 * snapshot they had pushed before ExecutorStart, which cannot see the rows
 * this statement migrated (lf_ExecutorRun).
 * ---------------------------------------------------------------------
 */
/*
 * Migrate the rows of set; false if its migration completed since a round
 * found them (a lock taken since processed the invalidation: a worker's
 * completion of an earlier migration of a chain, say), which moved them.
 */
static bool
migrate_set(TidSet *set)
{
	bool		save_read_only = XactReadOnly;
	LfMigration *mig = lf_migration_by_input(set->input);
	LfMapping  *only;

	if (mig == NULL)
		return false;
	only = lf_mapping_by_id(mig, set->mapping_id);
	tidset_sort_unique(set);
	XactReadOnly = false;
	PG_TRY();
	{
		(void) lf_migrate_rows(mig, set->input, only, set->tids, set->n);
	}
	PG_FINALLY();
	{
		XactReadOnly = save_read_only;
	}
	PG_END_TRY();
	return true;
}

static void
probe_add(void *set, ItemPointer tid)
{
	tidset_add((TidSet *) set, tid);
}

/*
 * Run one relevance plan on snap, adding the ctids it returns to set: a
 * point look-up without the executor where it can (probe.c).
 */
static void
run_relevance(List *item, Snapshot snap, ParamListInfo params, TidSet *set)
{
	TidReceiver rcv = {{tid_receive, tid_startup, tid_shutdown, tid_destroy, DestNone}};

	if (lf_probe_index(lf_item_plan(item), snap, params, probe_add, set))
		return;
	rcv.set = set;
	(void) run_plan(lf_item_plan(item), "leapfrog relevance", snap, params,
					(DestReceiver *) &rcv, false);
}

/*
 * The snapshot of a round: under READ COMMITTED a new one; otherwise a copy
 * of q, with the current command id once the statement has migrated rows.
 * Registered.
 */
static Snapshot
round_snapshot(Snapshot q, bool xact, bool migrated)
{
	Snapshot	snap;

	if (!xact)
		return RegisterSnapshot(GetTransactionSnapshot());
	PushCopiedSnapshot(q);
	if (migrated)
		UpdateActiveSnapshotCommandId();
	snap = RegisterSnapshot(GetActiveSnapshot());
	PopActiveSnapshot();
	return snap;
}

/* The statement runs on snap (registered); see "Snapshots" above. */
static void
use_snapshot(QueryDesc *qd, Snapshot snap, bool xact, bool migrated)
{
	UnregisterSnapshot(qd->snapshot);
	qd->snapshot = snap;
	if (xact && migrated && qd->crosscheck_snapshot != InvalidSnapshot)
	{
		Snapshot	cross = round_snapshot(qd->crosscheck_snapshot, true, true);

		UnregisterSnapshot(qd->crosscheck_snapshot);
		qd->crosscheck_snapshot = cross;
	}
}

/*
 * The snapshot of relevance plans that look for rows by key (conflicting
 * unique keys, rows referencing the rows a statement changes), under
 * REPEATABLE READ and SERIALIZABLE: the latest one.  What they look for is
 * what PostgreSQL's own checks will meet, and those read the newest row
 * versions: a unique check (a dirty snapshot) finds a row migrated since the
 * statement's snapshot in the new table, and a foreign key's action or
 * check runs on the latest snapshot.  So only the rows unmigrated now need
 * migrating; on the statement's snapshot, a row another transaction
 * migrated meanwhile would be claimed again and fail with 40001, where
 * eagerly the statement meets the row (23505, 23503, or the cascade).
 */
static bool
by_key(List *item)
{
	return lf_item_kind(item) != LF_NEEDS_ROWS;
}

/*
 * A statement whose REPEATABLE READ snapshot predates a migration writes
 * unique keys, or deletes or updates rows that new tables reference: if an
 * unmigrated row holds such a key, or references such a row, eager would
 * meet a row the snapshot cannot see (a unique violation, a foreign-key
 * check or a cascade that fails), which we cannot reproduce without making
 * the row visible to the snapshot (snapshot.c).  Rows migrated already are
 * in the new tables, where PostgreSQL's checks meet them as eagerly: the
 * rows unmigrated now count (by_key).
 */
static void
check_before_start(QueryDesc *qd, List *items)
{
	ListCell   *lc;

	foreach(lc, items)
	{
		List	   *item = lfirst(lc);
		TidSet		set = {CurrentMemoryContext, lf_item_input(item)};
		/* (looked up first: a lock the relevance plan takes may reload the cache) */
		LfMigration *mig = lf_migration_by_input(set.input);
		Snapshot	latest;

		if (mig == NULL)
			continue;			/* completed: its rows are in the new tables */
		latest = RegisterSnapshot(GetLatestSnapshot());
		run_relevance(item, latest, qd->params, &set);
		UnregisterSnapshot(latest);
		if (set.n > 0)
			lf_snapshot_predates(mig->name,
								 lf_item_kind(item) == LF_NEEDS_KEYS
								 ? "the transaction's snapshot predates its start, and the statement "
								 "writes a unique key that a row not migrated yet holds."
								 : "the transaction's snapshot predates its start, and the statement "
								 "changes rows that rows not migrated yet reference.");
	}
}

/*
 * A statement whose plan carries no migration work may still read new
 * tables of a migration completed after its snapshot (snapshot.c).
 */
static void
check_completions(QueryDesc *qd)
{
	LfMigration *unseen;
	bool		before_start;

	if (!lf_cache_valid)
		lf_cache_load();
	if (lf_recent_done == NIL ||
		lf_completions_visible(qd->plannedstmt, qd->snapshot, &unseen, &before_start))
		return;
	if (IsolationUsesXactSnapshot())
		lf_snapshot_predates(unseen->name, before_start
							 ? "the transaction's snapshot predates its start, and eagerly it "
							 "would see the rows of the table altered in place."
							 : "it completed after the transaction's snapshot was taken, so the "
							 "snapshot cannot see every row it moved.");
	use_snapshot(qd, RegisterSnapshot(GetTransactionSnapshot()), false, false);
}

/* The TidSet of item's input (and live mapping) in sets, made if missing. */
static TidSet *
set_for(List **sets, List *item)
{
	Oid			input = lf_item_input(item);
	int			mapping_id = lf_item_mapping(item);
	TidSet	   *set;
	ListCell   *ls;

	foreach(ls, *sets)
		if (((TidSet *) lfirst(ls))->input == input &&
			((TidSet *) lfirst(ls))->mapping_id == mapping_id)
			return lfirst(ls);
	set = palloc0(sizeof(TidSet));
	set->cxt = CurrentMemoryContext;
	set->input = input;
	set->mapping_id = mapping_id;
	*sets = lappend(*sets, set);
	return set;
}

/*
 * Does item find rows of one group of a live mapping only, a group the
 * trigger saw migrated in this transaction (lf_live_memo_migrated)?  Then
 * it would find nothing: the application wrote the group's input rows, then
 * writes its row of the new table (an order's lines, then its total).  The
 * key values are computed from the statement's parameters.
 */
static bool
pinned_group_migrated(List *item, LfMigration *mig, ParamListInfo params)
{
	List	   *pinned = lf_item_pinned(item);
	LfMapping  *m;
	Datum		values[INDEX_MAX_KEYS];
	bool		nulls[INDEX_MAX_KEYS];
	EState	   *estate = NULL;
	bool		migrated;

	if (pinned == NIL)
		return false;
	m = lf_mapping_by_id(mig, lf_item_mapping(item));
	if (m == NULL || list_length(pinned) != m->nkeys)
		return false;
	lf_live_eval_pinned(pinned, params, &estate, values, nulls);
	migrated = lf_live_memo_migrated(m, values, nulls);
	if (estate)
		FreeExecutorState(estate);
	return migrated;
}

/*
 * One round of the live relevance plans (see "Snapshots" above): the rows
 * they find, per input, in *sets.  Whether they found any; *skipped counts
 * the plans skipped because their migration completed meanwhile.
 */
static bool
relevance_round(QueryDesc *qd, List *live, Snapshot snap, bool xact, List **sets,
				int *skipped)
{
	Snapshot	latest = NULL;
	bool		any = false;
	ListCell   *lc;

	foreach(lc, live)
	{
		List	   *item = lfirst(lc);
		TidSet	   *set;
		LfMigration *mig;

		/*
		 * Its migration completed since the statement began (the lock
		 * processes the invalidation): its rows moved, and its retired input
		 * is gone.
		 */
		lock_plan_relations(lf_item_plan(item));
		if (!lf_cache_valid)
			lf_cache_load();
		mig = lf_migration_by_input(lf_item_input(item));
		if (mig == NULL || mig->id != lf_item_migration(item))
		{
			(*skipped)++;
			continue;
		}
		set = set_for(sets, item);
		if (pinned_group_migrated(item, mig, qd->params))
			continue;

		if (xact && by_key(item) && latest == NULL)
			latest = RegisterSnapshot(GetLatestSnapshot());
		run_relevance(item, xact && by_key(item) ? latest : snap, qd->params, set);
		any |= set->n > 0;
	}
	if (latest)
		UnregisterSnapshot(latest);
	return any;
}

static int
set_migration_id(const TidSet *set)
{
	LfMigration *mig = lf_migration_by_input(set->input);

	return mig ? mig->id : 0;
}

/*
 * Earlier migrations first: in a chain, a later migration's input is a
 * table an earlier one fills, and the rows the earlier one moves in are
 * found by the next round (relevance.c, nest_upstream).
 */
static int
set_cmp(const ListCell *a, const ListCell *b)
{
	int			x = set_migration_id(lfirst(a));
	int			y = set_migration_id(lfirst(b));

	return (x > y) - (x < y);
}

/*
 * Migrate the rows the live relevance plans find, round after round, until
 * a round finds none; then the statement runs on that round's snapshot
 * (under REPEATABLE READ, on its own if nothing was migrated).  True if a
 * migration completed while we went (relevance_round, migrate_set skip
 * it): the caller checks that the statement's snapshot sees the completion.
 */
static bool
migrate_rounds(QueryDesc *qd, List *live, bool xact, bool all_standalone)
{
	Snapshot	q = qd->snapshot;
	bool		migrated = false;
	bool		completed = false;
	int			skipped_before = 0;
	int			round;
	ListCell   *lc;

	for (round = 0;; round++)
	{
		Snapshot	snap = round_snapshot(q, xact, migrated);
		List	   *sets = NIL;
		int			skipped = 0;
		bool		newly_skipped;
		bool		found;

		claim_saw_update = false;
		found = relevance_round(qd, live, snap, xact, &sets, &skipped);
		completed |= skipped > 0;
		newly_skipped = skipped > skipped_before;
		skipped_before = skipped;

		/*
		 * A migration completed since the last round, after snap was taken
		 * maybe: the rows its last batches moved into a later migration's
		 * input are invisible to snap there, and gone from its own.  Under
		 * READ COMMITTED another round's snapshot sees them (skipped plans
		 * stay skipped, so this ends); under REPEATABLE READ the caller's
		 * check_completions fails with 40001 if q cannot see the
		 * completion (rc_chain_rounds.spec).
		 */
		if (!found && !xact && newly_skipped)
		{
			UnregisterSnapshot(snap);
			continue;
		}
		if (!found)
		{
			/* Every needed row is visible in snap: run the statement on it. */
			if (xact && !migrated)
				UnregisterSnapshot(snap);	/* q itself will do */
			else
				use_snapshot(qd, snap, xact, migrated);
			return completed;
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
		list_sort(sets, set_cmp);
		foreach(lc, sets)
			completed |= !migrate_set((TidSet *) lfirst(lc));
		migrated = true;
		CHECK_FOR_INTERRUPTS();

		/*
		 * Relevance queries that read only their input cannot find new rows:
		 * what they found is now migrated, by us or (skipped by the claim)
		 * by transactions that have committed.  A new snapshot sees it all.
		 * Unless the claim skipped a row corrected meanwhile, or the step a
		 * live row updated in place: it is still to migrate, at its new
		 * ctid, and another round finds it.
		 */
		if (all_standalone && !claim_saw_update && !completed)
		{
			use_snapshot(qd, round_snapshot(q, xact, true), xact, true);
			return false;
		}
	}
}

static void
prepare_statement(QueryDesc *qd, List *items)
{
	bool		xact = IsolationUsesXactSnapshot();
	Snapshot	q = qd->snapshot;
	ListCell   *lc;
	List	   *live = NIL;
	List	   *before_start = NIL;
	List	   *locked = NIL;		/* ids of the migrations locked */
	bool		over = false;
	bool		all_standalone = true;

	/* Lock the inputs first: this also makes our cache current. */
	foreach(lc, items)
		LockRelationOid(lf_item_input(lfirst(lc)), AccessShareLock);
	if (!lf_cache_valid)
		lf_cache_load();

	/*
	 * A join's relevance plans read its other input too, and those of an
	 * input tracked by keys its tables of done keys, which the executor
	 * opens without a lock (it expects the plan's relations locked): lock
	 * every input and table of done keys of the items' migrations, once
	 * each, or a completion could drop one under the plan ("relation
	 * deleted while still in use").  A completion marks the migration done
	 * and drops the inputs in one transaction: an input gone means the
	 * cache, current again, no longer lists it.
	 */
	foreach(lc, items)
	{
		LfMigration *mig = lf_migration_by_input(lf_item_input(lfirst(lc)));
		ListCell   *li;

		if (mig == NULL || list_member_int(locked, mig->id))
			continue;
		locked = lappend_int(locked, mig->id);
		if (list_length(mig->inputs) > 1)
			foreach(li, mig->inputs)
				(void) lf_lock_input_if_exists(lfirst_oid(li), AccessShareLock);
		foreach(li, mig->live_keys)
			(void) lf_lock_input_if_exists(lfirst_oid(li), AccessShareLock);
	}
	list_free(locked);
	if (!lf_cache_valid)
		lf_cache_load();

	/* What state of each migration the statement's snapshot sees */
	foreach(lc, items)
	{
		List	   *item = lfirst(lc);
		LfMigration *mig = lf_migration_by_input(lf_item_input(item));

		if (mig == NULL || mig->id != lf_item_migration(item))
			over = true;		/* completed since the plan was made */
		else if (xact && !lf_xact_visible(&mig->started, q))
		{
			/* the copy of a table altered in place held its rows eagerly */
			if (list_member_oid(mig->in_place, lf_item_input(item)) &&
				lf_stmt_reads_any(qd->plannedstmt, mig->in_place_targets))
				lf_snapshot_predates(mig->name,
									 "the transaction's snapshot predates its start, and eagerly it "
									 "would see the rows of the table altered in place.");
			if (by_key(item))
				before_start = lappend(before_start, item);
		}
		else
		{
			live = lappend(live, item);
			all_standalone &= lf_item_standalone(item);
		}
	}
	if (over || lf_recent_done != NIL)
		check_completions(qd);
	if (before_start != NIL)
		check_before_start(qd, before_start);
	if (live != NIL)
	{
		if (migrate_rounds(qd, live, xact, all_standalone))
			check_completions(qd);
	}
	else if (over && !xact && qd->snapshot == q)
		use_snapshot(qd, RegisterSnapshot(GetTransactionSnapshot()), false, false);
}

/*
 * query planned again for qd's run, as the planner hook plans it now (the
 * computing way where reads compute), with qd's parameters and the cursor
 * options its plan was made with.
 */
PlannedStmt *
lf_replan(QueryDesc *qd, Query *query, int eflags)
{
	int			options = 0;

	if (qd->plannedstmt->parallelModeNeeded)
		options |= CURSOR_OPT_PARALLEL_OK;
	if (eflags & EXEC_FLAG_BACKWARD)
		options |= CURSOR_OPT_SCROLL;
	return planner(copyObject(query), qd->sourceText, options, qd->params);
}

/*
 * The executor's own read-only check (ExecCheckXactReadOnly), first: a
 * statement that writes in a read-only transaction fails as it would
 * eagerly, naming itself ("SELECT FOR UPDATE"), before a step's own
 * queries could fail in its place.
 */
static void
check_read_only(PlannedStmt *stmt)
{
	ListCell   *lc;

	if (stmt->hasModifyingCTE)
		PreventCommandIfReadOnly(CreateCommandName((Node *) stmt));
	foreach(lc, stmt->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		if (rte->rtekind == RTE_RELATION && (rte->requiredPerms & ~ACL_SELECT) != 0 &&
			!isTempNamespace(get_rel_namespace(rte->relid)))
			PreventCommandIfReadOnly(CreateCommandName((Node *) stmt));
	}
}

/*
 * A serializable transaction's read that computes rows of new tables from
 * their retired inputs holds predicate locks on the retired rows it read.
 * Whoever migrates them later (a worker, a READ COMMITTED statement, a
 * completion) runs outside serializable isolation and moves no lock to the
 * row it inserts, so a serializable write of that row met none: a write
 * skew that eager would have failed with 40001.  A lock on each such new
 * table as a whole catches every later write of it (coarse: writes of rows
 * the read did not need conflict too, as after a sequential scan).
 */
static void
lock_computed_tables(QueryDesc *qd)
{
	ListCell   *lc;

	foreach(lc, qd->plannedstmt->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);
		Relation	rel;

		if (rte->rtekind != RTE_RELATION || !lf_is_target(rte->relid))
			continue;
		rel = table_open(rte->relid, AccessShareLock);
		PredicateLockRelation(rel, qd->snapshot);
		table_close(rel, NoLock);
	}
}

static void
lf_ExecutorStart(QueryDesc *qd, int eflags)
{
	/*
	 * A parallel worker runs on its leader's snapshot, already prepared; our
	 * own plans (run_plan) on the snapshot their step chose.
	 */
	if (!IsParallelWorker() && !running_own_plan)
	{
		List	   *items = lf_plan_items(qd->plannedstmt);

		/*
		 * A plain read planned the migrating way, run where reads compute (a
		 * cached plan, first run in a read-write transaction): plan it again,
		 * the computing way.  Under EXPLAIN too, which shows what would run.
		 */
		if (items != NIL && lf_plan_query(qd->plannedstmt) && lf_compute_wanted())
		{
			PlannedStmt *computed = lf_replan(qd, lf_plan_query(qd->plannedstmt), eflags);

			/* (else it cannot be computed: planned the migrating way again) */
			if (lf_plan_items(computed) == NIL)
			{
				qd->plannedstmt = computed;
				items = NIL;
			}
		}

		/*
		 * A computing plan whose units qd's snapshot sees migrated: its plain
		 * plan; a plain plan whose units it sees retired: planned again
		 * (EXPLAIN without ANALYZE shows the plan as made).
		 */
		if (items == NIL && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		{
			PlannedStmt *other = lf_compute_shortcut(qd, eflags);

			if (other)
			{
				qd->plannedstmt = other;
				items = lf_plan_items(other);
			}
		}
		if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
			;					/* plain EXPLAIN migrates nothing */
		else if (items != NIL)
		{
			if (XactReadOnly)
				check_read_only(qd->plannedstmt);
			prepare_statement(qd, items);
		}
		else
		{
			if (IsolationIsSerializable() && lf_plan_wrapped(qd->plannedstmt))
				lock_computed_tables(qd);
			if (!lf_cache_valid || lf_recent_done != NIL)
				check_completions(qd);
		}
	}
	if (prev_ExecutorStart)
		prev_ExecutorStart(qd, eflags);
	else
		standard_ExecutorStart(qd, eflags);
}

/* Run a plan of ours with qd->snapshot active (see "Snapshots" above). */
static void
lf_ExecutorRun(QueryDesc *qd, ScanDirection direction, uint64 count, bool execute_once)
{
	bool		push = qd->snapshot != InvalidSnapshot && lf_plan_wrapped(qd->plannedstmt) &&
		(!ActiveSnapshotSet() || GetActiveSnapshot() != qd->snapshot);

	/* (popped by the (sub)transaction's abort after an error) */
	if (push)
		PushActiveSnapshot(qd->snapshot);
	if (prev_ExecutorRun)
		prev_ExecutorRun(qd, direction, count, execute_once);
	else
		standard_ExecutorRun(qd, direction, count, execute_once);
	if (push)
		PopActiveSnapshot();
}

void
lf_install_executor_hook(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = lf_ExecutorStart;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = lf_ExecutorRun;
}
