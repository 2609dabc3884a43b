/*-------------------------------------------------------------------------
 * probe.c
 *	  Look-ups of a retired input without the executor: a relevance plan
 *	  that is one btree index scan, and whether the join unit or row a
 *	  computing read pins is still retired.
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
 * sub-plan, and index quals each "column op value", the value a Const, an
 * external Param of the expected type, or an expression of those
 * (evaluated as the executor evaluates a run-time key).  Anything else,
 * and a lone parameter whose value is missing or of another type (the
 * executor's error), runs the plan (migrate.c, run_plan).  Privileges are
 * checked as the executor would (ExecCheckRTPerms).
 *
 * Locking: the caller holds the plan's relations (migrate.c,
 * lock_plan_relations); the index is locked as the executor locks it, with
 * the relation's lock mode.
 *
 * The second look-up here tells a read that computes (compute.c) that the
 * join unit or row it pins is migrated: a statement whose conditions give
 * leading columns of an index of a retired input of a join or row mapping,
 * copied unchanged into the new table, values computable before it runs
 * (lf_retired_pin).  Where a snapshot sees no row of the input with those
 * values, every row the mapping's branch could compute has them, none
 * exists, and the statement as written reads the same rows
 * (lf_compute_plan at planning, lf_compute_shortcut at the executor's
 * start).  The retired input is held by the computing plan's locks, or
 * locked here (a plain plan holds none).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * The value of e if it is simple: a Const, or an external parameter that
 * params holds with e's type (speculative: fetched as the planner fetches,
 * for a plan not yet run).  False if not: the executor must evaluate it.
 */
bool
lf_simple_value(Node *e, ParamListInfo params, bool speculative, Datum *out, bool *isnull)
{
	Param	   *p = (Param *) e;
	ParamExternData workspace;
	ParamExternData *prm;

	if (e == NULL)
		return false;
	if (IsA(e, Const))
	{
		*out = ((Const *) e)->constvalue;
		*isnull = ((Const *) e)->constisnull;
		return true;
	}
	if (!IsA(e, Param) || p->paramkind != PARAM_EXTERN || params == NULL ||
		p->paramid <= 0 || p->paramid > params->numParams)
		return false;
	prm = params->paramFetch ? params->paramFetch(params, p->paramid, speculative, &workspace)
		: &params->params[p->paramid - 1];
	if (!OidIsValid(prm->ptype) || prm->ptype != p->paramtype)
		return false;
	*out = prm->value;
	*isnull = prm->isnull;
	return true;
}

/*
 * The value of e, a planned expression that reads no rows: lf_simple_value's,
 * or e evaluated in *estate (made here on first use, with params; the
 * caller frees it), as the executor evaluates a run-time key.
 */
void
lf_eval_value(Expr *e, ParamListInfo params, EState **estate, Datum *out, bool *isnull)
{
	MemoryContext old;
	ExprState  *expr;

	if (lf_simple_value((Node *) e, params, false, out, isnull))
		return;
	if (*estate == NULL)
	{
		*estate = CreateExecutorState();
		(*estate)->es_param_list_info = params;
	}
	old = MemoryContextSwitchTo((*estate)->es_query_cxt);
	expr = ExecInitExpr(e, NULL);
	MemoryContextSwitchTo(old);
	*out = ExecEvalExprSwitchContext(expr, GetPerTupleExprContext(*estate), isnull);
}

/*
 * The value of an index qual's right side (lf_eval_value: PL/pgSQL's
 * p_items[i] is evaluated).  False if it reads rows or a parameter of the
 * executor, or is a Param without a value of its type: the plan runs
 * instead, and gives the executor's error.  An expression is evaluated in
 * snap, as run_plan would (made the active snapshot on first use, *pushed;
 * the caller pops it): a STABLE function reading another table (WHERE id =
 * f()) gives the round's answer, not the statement's first snapshot's
 * (under READ COMMITTED the statement then runs in the last round's
 * snapshot, and needs that round's rows).
 */
static bool
qual_value(Node *value, ParamListInfo params, Snapshot snap, bool *pushed,
		   EState **estate, Datum *out, bool *isnull)
{
	while (value && IsA(value, RelabelType))
		value = (Node *) ((RelabelType *) value)->arg;
	if (lf_simple_value(value, params, false, out, isnull))
		return true;
	if (value == NULL || IsA(value, Const) || IsA(value, Param) || lf_reads_rows(value))
		return false;
	if (!*pushed)
		PushActiveSnapshot(snap);
	*pushed = true;
	lf_eval_value((Expr *) value, params, estate, out, isnull);
	return true;
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
	EState	   *estate = NULL;	/* of values evaluated (qual_value) */
	bool		pushed = false; /* snap, for them */
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
			!qual_value(lsecond(op->args), params, snap, &pushed, &estate, &value, &isnull))
			break;
		get_op_opfamily_properties(op->opno, index->rd_opfamily[col->varattno - 1], false,
								   &strategy, &lefttype, &righttype);
		/* (the plan is shared: its OpExpr is read, not completed) */
		ScanKeyEntryInitialize(&keys[nkeys++], isnull ? SK_ISNULL : 0, col->varattno,
							   strategy, righttype, op->inputcollid,
							   OidIsValid(op->opfuncid) ? op->opfuncid : get_opcode(op->opno),
							   value);
	}
	if (pushed)
		PopActiveSnapshot();
	if (nkeys != list_length(is->indexqual))
	{
		if (estate)
			FreeExecutorState(estate);
		index_close(index, NoLock);
		return false;
	}

	/* every entry, as the executor: the statement's own table's too */
	(void) ExecCheckRTPerms(ps->rtable, true);
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
	if (estate)
		FreeExecutorState(estate);
	return true;
}

/* The column of m's target that is input j's column attno unchanged, or 0 */
static AttrNumber
target_column(LfMapping *m, int j, AttrNumber attno)
{
	ListCell   *lc;

	foreach(lc, m->query->targetList)
	{
		TargetEntry *tle = lfirst(lc);
		Var		   *v = (Var *) tle->expr;

		if (tle->resno <= m->natts && IsA(v, Var) && v->varlevelsup == 0 &&
			v->varno == m->rtis[j] && v->varattno == attno)
			return tle->resno;
	}
	return 0;
}

/*
 * The value conds give column att of varno with operator opno under
 * collation coll ("att = value", either way round), planned, if it can be
 * computed before the statement runs; NULL otherwise.
 */
static Expr *
pinned_value(List *conds, int varno, AttrNumber att, Oid opno, Oid coll, Oid type)
{
	ListCell   *lc;

	foreach(lc, conds)
	{
		OpExpr	   *op = lfirst(lc);

		if (!IsA(op, OpExpr) || op->opno != opno || op->inputcollid != coll ||
			list_length(op->args) != 2)
			continue;
		for (int side = 0; side < 2; side++)
		{
			Node	   *col = list_nth(op->args, side);
			Expr	   *value = list_nth(op->args, 1 - side);

			while (IsA(col, RelabelType))
				col = (Node *) ((RelabelType *) col)->arg;
			if (!IsA(col, Var) || ((Var *) col)->varno != varno ||
				((Var *) col)->varlevelsup != 0 || ((Var *) col)->varattno != att)
				continue;
			value = expression_planner((Expr *) copyObject(value));
			if (exprType((Node *) value) == type && !lf_reads_rows((Node *) value) &&
				!contain_volatile_functions((Node *) value))
				return value;
		}
	}
	return NULL;
}

/* Does the tree hold a parameter of the statement ($n, a PL/pgSQL variable)? */
static bool
has_parameter_walker(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param))
		return ((Param *) node)->paramkind == PARAM_EXTERN;
	return expression_tree_walker(node, has_parameter_walker, cx);
}

bool
lf_has_parameter(Node *node)
{
	return has_parameter_walker(node, NULL);
}

/*
 * The look-up (index, operators, collations, input) that tells whether
 * the unit of join mapping m that conds pin (the statement's conjuncts on
 * the target, whose Vars varno read its columns) is still retired; *values:
 * the values of the index's leading columns.  NIL if conds pin none: the
 * input is not a plain retired table (live, filled by an earlier migration,
 * altered in place), no btree index's first column is pinned.  The index
 * with the most leading columns pinned wins.
 *
 * Join units and rows.  The look-up costs about 15k instructions where
 * the unit is not migrated.  Planned for one run, a plan that computes
 * costs several times a plain plan to make, so there the look-up pays if
 * one read in twenty finds its join unit migrated, one in nine its row
 * (bench/unit_reads.py: 27k and 22k more a read not migrated, 537k and
 * 193k less a read migrated, sent as text).  A kept
 * plan (generic) pays the look-up at every run and saves what the branch
 * costs to start: about 118k for a join's, one read in nine must find its
 * unit migrated; about 38k for a row's, one in three, which TPC-C's split,
 * whose reads mostly come before their rows migrate, does not (it cost 1%
 * more with rows pinned in its kept plans).  So a row is pinned only by a
 * statement whose conditions hold no parameter: its values are literals,
 * known at planning, where the planning snapshot looks and one plan is made
 * (compute.c, lf_compute_plan); a custom plan's would make the plan cache
 * keep custom plans of a prepared statement.  The walk for a parameter
 * comes first: it is all a custom plan's read of a row pays.
 */
List *
lf_retired_pin(LfMigration *mig, LfMapping *m, List *conds, int varno, List **values)
{
	List	   *best = NIL;
	int			best_n = 0;

	*values = NIL;
	if (m->kind == LF_MAP_GROUPS || (m->kind == LF_MAP_ROWS && lf_has_parameter((Node *) conds)) ||
		m->unmigrated != NULL || OidIsValid(m->done_keys) || lf_has_upstream(mig) ||
		list_member_oid(mig->in_place_targets, m->target))
		return NIL;
	for (int j = 0; j < m->ninputs; j++)
	{
		RangeTblEntry *rte = rt_fetch(m->rtis[j], m->query->rtable);
		Relation	rel;
		List	   *indexes;
		ListCell   *li;

		if (rte->rtekind != RTE_RELATION || rte->relid != m->inputs[j])
			continue;
		rel = table_open(rte->relid, AccessShareLock);
		indexes = RelationGetIndexList(rel);
		foreach(li, indexes)
		{
			Relation	idx = index_open(lfirst_oid(li), AccessShareLock);
			List	   *vals = NIL;
			List	   *ops = NIL;
			List	   *colls = NIL;

			if (idx->rd_rel->relam == BTREE_AM_OID && idx->rd_index->indisvalid &&
				heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
			{
				for (int p = 0; p < IndexRelationGetNumberOfKeyAttributes(idx); p++)
				{
					AttrNumber	col = idx->rd_index->indkey.values[p];
					AttrNumber	att = col > 0 ? target_column(m, j, col) : 0;
					Oid			type = idx->rd_opcintype[p];
					Oid			opno = att ? get_opfamily_member(idx->rd_opfamily[p], type, type,
																 BTEqualStrategyNumber) : InvalidOid;
					Expr	   *value = OidIsValid(opno)
						? pinned_value(conds, varno, att, opno, idx->rd_indcollation[p], type)
						: NULL;

					if (value == NULL)
						break;
					vals = lappend(vals, value);
					ops = lappend_oid(ops, opno);
					colls = lappend_oid(colls, idx->rd_indcollation[p]);
				}
			}
			if (list_length(vals) > best_n)
			{
				best_n = list_length(vals);
				best = list_make4(makeInteger((int) RelationGetRelid(idx)), ops, colls,
								  makeInteger((int) rte->relid));
				*values = vals;
			}
			index_close(idx, AccessShareLock);
		}
		list_free(indexes);
		table_close(rel, AccessShareLock);
	}
	return best;
}

/*
 * Does snap see no row of the retired input with the pinned values
 * (lf_retired_pin's look-up; values evaluated, none NULL)?  False too if
 * the input is gone: its migration completed, which the caller's plan
 * learns when it is planned again (a plain plan holds no lock on the input
 * until here).
 */
bool
lf_retired_pin_gone(List *pin, Datum *values, Snapshot snap)
{
	Relation	heap = try_table_open((Oid) intVal(lfourth(pin)), AccessShareLock);
	Relation	index;
	List	   *ops = lsecond(pin);
	List	   *colls = lthird(pin);
	int			n = list_length(ops);
	ScanKeyData keys[INDEX_MAX_KEYS];
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		gone;

	if (heap == NULL)
		return false;
	index = index_open((Oid) intVal(linitial(pin)), AccessShareLock);
	for (int p = 0; p < n; p++)
		ScanKeyEntryInitialize(&keys[p], 0, p + 1, BTEqualStrategyNumber,
							   index->rd_opcintype[p], list_nth_oid(colls, p),
							   get_opcode(list_nth_oid(ops, p)), values[p]);
	slot = table_slot_create(heap, NULL);
	scan = index_beginscan(heap, index, snap, n, 0);
	index_rescan(scan, keys, n, NULL, 0);
	gone = !index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return gone;
}
