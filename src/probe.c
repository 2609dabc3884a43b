/*-------------------------------------------------------------------------
 * probe.c
 *	  A relevance plan that is one btree index scan, run without the
 *	  executor.
 *
 * The commonest relevance plan is a point look-up: SELECT ctid FROM the
 * retired input WHERE its key = $1 (an UPDATE or a locking read by key, an
 * INSERT's unique-key conflict).  Starting and ending the executor for it
 * cost about as much as the look-up itself (bench/statement_cost.py: about
 * 21k instructions per relevance query on TPC-C's split, half of them
 * ExecutorStart and ExecutorEnd).  Here the same scan runs directly: the
 * plan's index, the scan keys ExecIndexBuildScanKeys would build from its
 * index quals, the same snapshot; its ctids are what the plan returns.
 *
 * Only a plan of exactly that shape qualifies: an IndexScan at the top, on
 * a btree index (never lossy: no recheck), whose target list is the scanned
 * relation's ctid alone, with no filter, no ORDER BY operator, no
 * sub-plan, and index quals each "column op value", the value a Const or
 * an external Param of the expected type.  Anything else, and a parameter
 * whose value is missing or of another type (the executor's error), runs
 * the plan (migrate.c, run_plan).  Privileges are checked as the executor
 * would (ExecCheckRTPerms).
 *
 * Locking: the caller holds the plan's relations (migrate.c,
 * lock_plan_relations); the index is locked as the executor locks it, with
 * the relation's lock mode.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

/* The value of an index qual's right side, or false if not simple */
static bool
qual_value(Node *value, ParamListInfo params, Datum *out, bool *isnull)
{
	while (value && IsA(value, RelabelType))
		value = (Node *) ((RelabelType *) value)->arg;
	if (value == NULL)
		return false;
	if (IsA(value, Const))
	{
		*out = ((Const *) value)->constvalue;
		*isnull = ((Const *) value)->constisnull;
		return true;
	}
	if (IsA(value, Param) && ((Param *) value)->paramkind == PARAM_EXTERN)
	{
		Param	   *p = (Param *) value;
		ParamExternData prmdata;
		ParamExternData *prm;

		if (params == NULL || p->paramid <= 0 || p->paramid > params->numParams)
			return false;
		prm = params->paramFetch ? params->paramFetch(params, p->paramid, false, &prmdata)
			: &params->params[p->paramid - 1];
		if (!OidIsValid(prm->ptype) || prm->ptype != p->paramtype)
			return false;
		*out = prm->value;
		*isnull = prm->isnull;
		return true;
	}
	return false;
}

/*
 * Run ps, if it is a point look-up of the shape above, with snap and
 * params, passing each ctid it returns to add(arg, tid); false (and nothing
 * done) if it is not.
 */
bool
lf_probe_index(PlannedStmt *ps, Snapshot snap, ParamListInfo params,
			   void (*add) (void *arg, ItemPointer tid), void *arg)
{
	IndexScan  *is = (IndexScan *) ps->planTree;
	TargetEntry *tle;
	Var		   *ctid;
	RangeTblEntry *rte;
	ScanKeyData keys[INDEX_MAX_KEYS];
	int			nkeys = 0;
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	List	   *perms;
	ListCell   *lc;

	if (ps->commandType != CMD_SELECT || ps->subplans != NIL || ps->rowMarks != NIL ||
		ps->planTree == NULL || !IsA(ps->planTree, IndexScan) ||
		is->scan.plan.parallel_aware || is->scan.plan.qual != NIL || is->scan.plan.initPlan != NIL ||
		is->indexorderby != NIL || is->indexqual == NIL ||
		list_length(is->indexqual) > INDEX_MAX_KEYS ||
		list_length(is->scan.plan.targetlist) != 1)
		return false;
	tle = linitial(is->scan.plan.targetlist);
	ctid = (Var *) tle->expr;
	if (!IsA(ctid, Var) || ctid->varno != is->scan.scanrelid ||
		ctid->varattno != SelfItemPointerAttributeNumber || ctid->varlevelsup != 0)
		return false;
	rte = rt_fetch(is->scan.scanrelid, ps->rtable);
	if (rte->rtekind != RTE_RELATION)
		return false;

	/* kept until the transaction ends, as the executor keeps it */
	index = index_open(is->indexid, rte->rellockmode);
	if (index->rd_rel->relam != BTREE_AM_OID)
	{
		index_close(index, NoLock);
		return false;
	}
	/* as ExecIndexBuildScanKeys, for "index column op value" */
	foreach(lc, is->indexqual)
	{
		OpExpr	   *op = lfirst(lc);
		Var		   *col;
		Datum		value;
		bool		isnull;
		int			strategy;
		Oid			lefttype;
		Oid			righttype;

		if (!IsA(op, OpExpr) || list_length(op->args) != 2)
			break;
		col = linitial(op->args);
		while (IsA(col, RelabelType))
			col = (Var *) ((RelabelType *) col)->arg;
		if (!IsA(col, Var) || col->varno != INDEX_VAR || col->varattno < 1 ||
			col->varattno > IndexRelationGetNumberOfKeyAttributes(index) ||
			!qual_value(lsecond(op->args), params, &value, &isnull))
			break;
		get_op_opfamily_properties(op->opno, index->rd_opfamily[col->varattno - 1], false,
								   &strategy, &lefttype, &righttype);
		/* (the plan is shared: its OpExpr is read, not completed) */
		ScanKeyEntryInitialize(&keys[nkeys++], isnull ? SK_ISNULL : 0, col->varattno,
							   strategy, righttype, op->inputcollid,
							   OidIsValid(op->opfuncid) ? op->opfuncid : get_opcode(op->opno),
							   value);
	}
	if (nkeys != list_length(is->indexqual))
	{
		index_close(index, NoLock);
		return false;
	}

	perms = list_make1(rte);
	(void) ExecCheckRTPerms(perms, true);
	list_free(perms);
	heap = table_open(rte->relid, NoLock);	/* locked by the caller */
	slot = table_slot_create(heap, NULL);
	scan = index_beginscan(heap, index, snap, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		CHECK_FOR_INTERRUPTS();
		add(arg, &slot->tts_tid);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	table_close(heap, NoLock);
	index_close(index, NoLock);
	return true;
}
