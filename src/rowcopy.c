/*-------------------------------------------------------------------------
 * rowcopy.c
 *	  A migration step's copy of claimed rows into a row mapping's target,
 *	  without starting the INSERT's plan.
 *
 * A step copies the rows it claimed with the plan of INSERT INTO target
 * SELECT <mapping> FROM input WHERE <filter> AND ctid = ANY ($n)
 * (migrate.c).  A statement's step copies one row or a few, and starting
 * and ending that plan was most of its cost: the split's step of one
 * customer started two plans, about 110k instructions, for two heap and
 * two index insertions.  This file runs the same plan's parts directly: it
 * fetches each row the plan's scan would (the tids, sorted, with the same
 * snapshot), evaluates the scan's filter and projection (the planner's
 * expressions: the INSERT's defaults and coercions included), and inserts
 * the result as logical replication applies a row
 * (ExecSimpleRelationInsert: stored generated columns, constraints, the
 * partition constraint of a partition, indexes).
 *
 * Only a plan of exactly that shape qualifies (lf_copy_param, asked once
 * when the step's plan is built), into a table without INSERT
 * triggers (statement triggers and the after-trigger queue belong to the
 * executor; a foreign key and a deferrable unique constraint are such
 * triggers), without RETURNING, ON CONFLICT, WITH CHECK OPTION (row-level
 * security) or sub-plans.  Otherwise, and in a read-only or parallel
 * transaction (the executor's errors), the caller runs the plan.  The
 * permission checks are the executor's (ExecCheckRTPerms, on every call).
 *
 * A background worker's batch inserts into the heap many rows at a time
 * (table_multi_insert, as COPY FROM), then their index entries: one WAL
 * record and one buffer lock per page rather than per row.  The rows'
 * constraints are then all checked before any is inserted, so of several
 * bad rows another may raise first than the eager INSERT's first; that
 * matters nowhere a worker's batch fails, since its rows are then tried
 * again one by one (worker.c, fail_on_bad_row).  A statement's step and
 * complete() insert row by row, in the eager order.
 *
 * Locking: none of its own.  The caller holds what the plan's execution
 * would: the plan's relations (migrate.c, lock_plan_relations) and the
 * claimed rows (deleted by its transaction).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/tableam.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "nodes/nodeFuncs.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* The $n of ctid = ANY ($n) on the scan's relation, or 0 */
static int
ctid_param(Node *clause, Index scanrelid)
{
	ScalarArrayOpExpr *saop = (ScalarArrayOpExpr *) clause;
	Var		   *ctid;
	Param	   *p;

	if (!IsA(saop, ScalarArrayOpExpr) || !saop->useOr || list_length(saop->args) != 2)
		return 0;
	ctid = linitial(saop->args);
	p = lsecond(saop->args);
	if (!IsA(ctid, Var) || ctid->varno != scanrelid ||
		ctid->varattno != SelfItemPointerAttributeNumber ||
		!IsA(p, Param) || p->paramkind != PARAM_EXTERN)
		return 0;
	return p->paramid;
}

static bool
exec_param(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param) && ((Param *) node)->paramkind != PARAM_EXTERN)
		return true;
	return expression_tree_walker(node, exec_param, context);
}

/*
 * If ps is INSERT ... SELECT ... WHERE ctid = ANY ($n) and nothing more, the
 * $n, which lf_copy_rows takes; else 0.  Asked once, when the step's plan is
 * built (migrate.c).  The scan is a TidScan, or a SeqScan where the input
 * was small when the step was planned (ctid = ANY among its quals); its
 * output is the INSERT's columns, none of them junk.
 */
int
lf_copy_param(PlannedStmt *ps)
{
	ModifyTable *mt;
	Plan	   *scan;
	ListCell   *lc;

	if (ps->commandType != CMD_INSERT || ps->hasReturning || ps->hasModifyingCTE ||
		ps->subplans != NIL || ps->rowMarks != NIL ||
		!IsA(ps->planTree, ModifyTable))
		return 0;
	mt = (ModifyTable *) ps->planTree;
	if (mt->operation != CMD_INSERT || list_length(mt->resultRelations) != 1 ||
		mt->returningLists != NIL || mt->withCheckOptionLists != NIL ||
		mt->onConflictAction != ONCONFLICT_NONE || mt->rootRelation != 0 ||
		mt->plan.initPlan != NIL || outerPlan(mt) == NULL)
		return 0;
	scan = outerPlan(mt);
	/* (ModifyTable's EvalPlanQual parameter is the only PARAM_EXEC) */
	if (scan->initPlan != NIL || exec_param((Node *) scan->targetlist, NULL) ||
		exec_param((Node *) scan->qual, NULL))
		return 0;
	foreach(lc, scan->targetlist)
		if (lfirst_node(TargetEntry, lc)->resjunk)
			return 0;
	if (IsA(scan, TidScan))
	{
		TidScan    *ts = (TidScan *) scan;

		if (list_length(ts->tidquals) == 1)
			return ctid_param(linitial(ts->tidquals), ts->scan.scanrelid);
	}
	else if (IsA(scan, SeqScan))
	{
		foreach(lc, scan->qual)
		{
			int			paramid = ctid_param(lfirst(lc), ((Scan *) scan)->scanrelid);

			if (paramid > 0)
				return paramid;
		}
	}
	return 0;
}

/* The tids of a tid[] parameter, sorted, without duplicates, as TidScan */
static int
param_tids(ParamListInfo params, int paramid, ItemPointerData **out)
{
	ParamExternData *prm;
	ArrayType  *arr;
	ItemPointerData *tids;
	int			n;

	if (params == NULL || paramid < 1 || paramid > params->numParams)
		return -1;
	prm = &params->params[paramid - 1];
	if (prm->isnull || prm->ptype != TIDARRAYOID)
		return -1;
	arr = DatumGetArrayTypeP(prm->value);
	if (ARR_NDIM(arr) > 1 || ARR_HASNULL(arr))
		return -1;
	n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
	tids = palloc(sizeof(ItemPointerData) * Max(n, 1));
	memcpy(tids, ARR_DATA_PTR(arr), sizeof(ItemPointerData) * n);
	*out = tids;
	return lf_tids_sort_unique(tids, n);
}

/*
 * Set by a worker around its batch's step (worker.c): that step's copy,
 * and no other (a statement's step, complete(), the steps of its foreign
 * keys' checks, even in a worker), inserts many rows at a time.
 */
bool		lf_bulk_batch = false;

/* Rows a worker's batch buffers before it inserts them (COPY's limits) */
#define LF_BULK_ROWS 1000
#define LF_BULK_BYTES 65535
#define LF_BULK_MIN_ROWS 16		/* fewer: row by row */

typedef struct BulkInsert
{
	ResultRelInfo *rri;
	EState	   *estate;
	TupleTableSlot **slots;		/* LF_BULK_ROWS, of the target's AM */
	int			n;
	Size		bytes;
} BulkInsert;

static void
bulk_flush(BulkInsert *bi)
{
	Relation	rel = bi->rri->ri_RelationDesc;

	if (bi->n == 0)
		return;
	table_multi_insert(rel, bi->slots, bi->n, bi->estate->es_output_cid, 0, NULL);
	for (int i = 0; i < bi->n; i++)
	{
		if (bi->rri->ri_NumIndices > 0)
			list_free(ExecInsertIndexTuples(bi->rri, bi->slots[i], bi->estate,
											false, false, NULL, NIL));
		ExecClearTuple(bi->slots[i]);
		ResetPerTupleExprContext(bi->estate);
	}
	bi->n = 0;
	bi->bytes = 0;
}

/*
 * What ExecSimpleRelationInsert does before it stores a row (no triggers
 * here: lf_copy_rows takes none), then the row buffered.
 */
static void
bulk_add(BulkInsert *bi, TupleTableSlot *row)
{
	Relation	rel = bi->rri->ri_RelationDesc;
	TupleTableSlot *slot;

	if (bi->slots[bi->n] == NULL)
		bi->slots[bi->n] = table_slot_create(rel, NULL);
	slot = ExecCopySlot(bi->slots[bi->n], row);
	if (rel->rd_att->constr && rel->rd_att->constr->has_generated_stored)
		ExecComputeStoredGenerated(bi->rri, bi->estate, slot, CMD_INSERT);
	if (rel->rd_att->constr)
		ExecConstraints(bi->rri, slot, bi->estate);
	if (rel->rd_rel->relispartition)
		ExecPartitionCheck(bi->rri, slot, bi->estate, true);
	bi->n++;
	if (TTS_IS_HEAPTUPLE(slot) || TTS_IS_BUFFERTUPLE(slot))
		bi->bytes += ((HeapTupleTableSlot *) slot)->tuple->t_len;
	if (bi->n == LF_BULK_ROWS || bi->bytes >= LF_BULK_BYTES)
		bulk_flush(bi);
}

/*
 * Copy the rows of ps's ctid parameter $paramid (lf_copy_param) that snap
 * sees into its target, as running ps would; *copied is the count.  False,
 * having done nothing, if the target or the transaction needs the plan.
 */
bool
lf_copy_rows(PlannedStmt *ps, int paramid, Snapshot snap, ParamListInfo params,
			 bool bulk_ok, uint64 *copied)
{
	Scan	   *scan;
	ItemPointerData *tids;
	int			ntids;
	EState	   *estate;
	ResultRelInfo *rri;
	Relation	target,
				input;
	TriggerDesc *trig;
	List	   *tlist;
	ExprContext *econtext;
	ExprState  *qual;
	ProjectionInfo *proj;
	TupleTableSlot *inslot,
			   *outslot;
	BlockNumber nblocks;
	uint64		n = 0;
	MemoryContext old;
	BulkInsert	bulk = {0};

	if (paramid == 0 || XactReadOnly || IsInParallelMode() ||
		(ntids = param_tids(params, paramid, &tids)) < 0)
		return false;
	scan = (Scan *) outerPlan(ps->planTree);
	tlist = scan->plan.targetlist;

	estate = CreateExecutorState();
	old = MemoryContextSwitchTo(estate->es_query_cxt);
	estate->es_snapshot = snap;
	estate->es_crosscheck_snapshot = InvalidSnapshot;
	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_param_list_info = params;
	ExecInitRangeTable(estate, ps->rtable);
	rri = makeNode(ResultRelInfo);
	ExecInitResultRelation(estate, rri, linitial_int(ps->resultRelations));
	target = rri->ri_RelationDesc;
	trig = rri->ri_TrigDesc;
	/* (the INSERT's columns: the scan's output, one per attribute) */
	if (target->rd_rel->relkind != RELKIND_RELATION ||
		list_length(tlist) != RelationGetDescr(target)->natts ||
		(trig && (trig->trig_insert_before_row || trig->trig_insert_after_row ||
				  trig->trig_insert_instead_row || trig->trig_insert_before_statement ||
				  trig->trig_insert_after_statement || trig->trig_insert_new_table)))
	{
		ExecCloseResultRelations(estate);
		ExecCloseRangeTableRelations(estate);
		MemoryContextSwitchTo(old);
		FreeExecutorState(estate);
		pfree(tids);
		return false;
	}
	(void) ExecCheckRTPerms(ps->rtable, true);

	input = ExecGetRangeTableRelation(estate, scan->scanrelid);
	ExecOpenIndices(rri, false);
	econtext = GetPerTupleExprContext(estate);
	inslot = table_slot_create(input, NULL);
	outslot = MakeSingleTupleTableSlot(RelationGetDescr(target), &TTSOpsVirtual);
	qual = ExecInitQual(scan->plan.qual, NULL);
	proj = ExecBuildProjectionInfo(tlist, econtext, outslot, NULL, RelationGetDescr(input));
	nblocks = RelationGetNumberOfBlocks(input);
	if (bulk_ok && ntids >= LF_BULK_MIN_ROWS)
	{
		bulk.rri = rri;
		bulk.estate = estate;
		bulk.slots = palloc0(sizeof(TupleTableSlot *) * LF_BULK_ROWS);
	}

	PushActiveSnapshot(snap);
	for (int i = 0; i < ntids; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!ItemPointerIsValid(&tids[i]) || ItemPointerGetBlockNumber(&tids[i]) >= nblocks ||
			!table_tuple_fetch_row_version(input, &tids[i], snap, inslot))
			continue;
		econtext->ecxt_scantuple = inslot;
		if (ExecQual(qual, econtext))
		{
			if (bulk.slots)
				bulk_add(&bulk, ExecProject(proj));
			else
				ExecSimpleRelationInsert(rri, estate, ExecProject(proj));
			n++;
		}
		ResetExprContext(econtext);
	}
	if (bulk.slots)
	{
		bulk_flush(&bulk);
		for (int i = 0; i < LF_BULK_ROWS && bulk.slots[i]; i++)
			ExecDropSingleTupleTableSlot(bulk.slots[i]);
	}
	PopActiveSnapshot();

	ExecDropSingleTupleTableSlot(inslot);
	ExecDropSingleTupleTableSlot(outslot);
	ExecCloseResultRelations(estate);
	ExecCloseRangeTableRelations(estate);
	MemoryContextSwitchTo(old);
	FreeExecutorState(estate);
	pfree(tids);
	*copied = n;
	return true;
}
