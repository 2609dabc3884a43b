/*-------------------------------------------------------------------------
 * scan.c
 *	  The LeapfrogMigrate custom scan: a pass-through node at the top of a
 *	  plan that touches tables under migration.
 *
 * It carries the relevance plans computed by the planner hook (relevance.c)
 * in custom_private, so they live and die with the plan: prepared
 * statements, PL/pgSQL and the plan cache keep them without knowing.  The
 * ExecutorStart hook (migrate.c) finds them there and runs them before the
 * executor starts.  A plan that computes the new tables' rows instead
 * (compute.c) carries no relevance plan, only what EXPLAIN says of it.  At
 * run time the node only forwards its child's tuples; EXPLAIN shows what the
 * statement migrates or computes.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "commands/explain.h"
#include "executor/executor.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "lib/stringinfo.h"

static Node *lf_create_scan_state(CustomScan *cscan);
static void lf_begin(CustomScanState *node, EState *estate, int eflags);
static TupleTableSlot *lf_exec(CustomScanState *node);
static void lf_end(CustomScanState *node);
static void lf_rescan(CustomScanState *node);
static void lf_explain(CustomScanState *node, List *ancestors, ExplainState *es);

static CustomScanMethods lf_scan_methods = {
	.CustomName = "LeapfrogMigrate",
	.CreateCustomScanState = lf_create_scan_state,
};

static CustomExecMethods lf_exec_methods = {
	.CustomName = "LeapfrogMigrate",
	.BeginCustomScan = lf_begin,
	.ExecCustomScan = lf_exec,
	.EndCustomScan = lf_end,
	.ReScanCustomScan = lf_rescan,
	.ExplainCustomScan = lf_explain,
};

void
lf_register_scan_methods(void)
{
	RegisterCustomScanMethods(&lf_scan_methods);
}

/*
 * custom_private: (items, computes, query, shortcut).  items: the relevance
 * plans (LfItemField); computes: EXPLAIN's lines for the new tables the
 * plan computes instead (compute.c); query: for a plain read planned the
 * migrating way, its Query, which migrate.c plans the computing way when
 * the plan runs where it cannot migrate; shortcut: for a computing plan
 * whose branches each pin one group, (pins, the plain plan) that runs
 * instead when those groups are migrated (lf_compute_shortcut).
 */
PlannedStmt *
lf_wrap_plan(PlannedStmt *stmt, List *items, List *computes, Query *query, List *shortcut)
{
	Plan	   *child = stmt->planTree;
	CustomScan *cs = makeNode(CustomScan);
	List	   *tlist = NIL;
	List	   *scan_tlist = NIL;
	ListCell   *lc;

	/*
	 * The node's output is its child's output: its target list points at
	 * custom_scan_tlist (INDEX_VAR), whose entries point at the child
	 * (OUTER_VAR), which is also what EXPLAIN VERBOSE needs to deparse it.
	 */
	foreach(lc, child->targetlist)
	{
		TargetEntry *tle = lfirst(lc);

		scan_tlist = lappend(scan_tlist,
							 makeTargetEntry((Expr *) makeVarFromTargetEntry(OUTER_VAR, tle),
											 tle->resno, tle->resname, tle->resjunk));
		tlist = lappend(tlist,
						makeTargetEntry((Expr *) makeVarFromTargetEntry(INDEX_VAR, tle),
										tle->resno, tle->resname, tle->resjunk));
	}
	cs->scan.plan.startup_cost = child->startup_cost;
	cs->scan.plan.total_cost = child->total_cost;
	cs->scan.plan.plan_rows = child->plan_rows;
	cs->scan.plan.plan_width = child->plan_width;
	cs->scan.plan.plan_node_id = -1;	/* never in a parallel worker */
	cs->scan.plan.targetlist = tlist;
	cs->scan.plan.lefttree = child;
	cs->scan.plan.extParam = bms_copy(child->extParam);
	cs->scan.plan.allParam = bms_copy(child->allParam);
	cs->scan.scanrelid = 0;
	cs->flags = ExecSupportsBackwardScan(child) ? CUSTOMPATH_SUPPORT_BACKWARD_SCAN : 0;
	cs->custom_scan_tlist = scan_tlist;
	cs->custom_private = list_make4(items, computes, query, shortcut);
	cs->methods = &lf_scan_methods;
	stmt->planTree = (Plan *) cs;
	return stmt;
}

static List *
plan_private(PlannedStmt *stmt)
{
	Plan	   *top = stmt->planTree;

	if (top && IsA(top, CustomScan) &&
		((CustomScan *) top)->methods == &lf_scan_methods)
		return ((CustomScan *) top)->custom_private;
	return NIL;
}

/* Is stmt one of ours (planned through the hook, reading new tables)? */
bool
lf_plan_wrapped(PlannedStmt *stmt)
{
	return plan_private(stmt) != NIL;
}

List *
lf_plan_items(PlannedStmt *stmt)
{
	List	   *priv = plan_private(stmt);

	return priv ? linitial(priv) : NIL;
}

/* The Query of a plain read planned the migrating way, or NULL */
Query *
lf_plan_query(PlannedStmt *stmt)
{
	List	   *priv = plan_private(stmt);

	return priv ? lthird(priv) : NULL;
}

/* A computing plan's (pins, plain plan), or NIL */
List *
lf_plan_shortcut(PlannedStmt *stmt)
{
	List	   *priv = plan_private(stmt);

	return priv ? lfourth(priv) : NIL;
}

/* The node's state: what it computes, for the CONTEXT line of errors */
typedef struct LfScanState
{
	CustomScanState css;
	char	   *computes;		/* "t from leapfrog_retired.x; ...", or NULL */
} LfScanState;

static Node *
lf_create_scan_state(CustomScan *cscan)
{
	LfScanState *st = (LfScanState *) newNode(sizeof(LfScanState), T_CustomScanState);
	List	   *computes = lsecond(cscan->custom_private);
	ListCell   *lc;

	st->css.methods = &lf_exec_methods;
	if (computes != NIL)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		foreach(lc, computes)
			appendStringInfo(&buf, "%s%s", foreach_current_index(lc) ? "; " : "",
							 strVal(lfirst(lc)));
		st->computes = buf.data;
	}
	return (Node *) st;
}

/*
 * An error while the rows not migrated yet are computed (a row the mapping
 * cannot convert, as migrating it would fail) says so: the statement itself
 * may hold no cast or function that could fail.
 */
static void
lf_compute_error_context(void *arg)
{
	errcontext("leapfrog: computing the rows not migrated yet of %s", (char *) arg);
}

static void
lf_begin(CustomScanState *node, EState *estate, int eflags)
{
	Plan	   *plan = node->ss.ps.plan;

	outerPlanState(node) = ExecInitNode(outerPlan(plan), estate, eflags);
}

static TupleTableSlot *
lf_exec(CustomScanState *node)
{
	LfScanState *st = (LfScanState *) node;
	ErrorContextCallback cb;
	TupleTableSlot *slot;

	if (st->computes == NULL)
		return ExecProcNode(outerPlanState(node));
	cb.callback = lf_compute_error_context;
	cb.arg = st->computes;
	cb.previous = error_context_stack;
	error_context_stack = &cb;
	slot = ExecProcNode(outerPlanState(node));
	error_context_stack = cb.previous;
	return slot;
}

static void
lf_end(CustomScanState *node)
{
	ExecEndNode(outerPlanState(node));
}

static void
lf_rescan(CustomScanState *node)
{
	PlanState  *outer = outerPlanState(node);

	/* as nodeMaterial: a child with changed parameters rescans by itself */
	if (outer->chgParam == NULL)
		ExecReScan(outer);
}

static void
lf_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	List	   *priv = ((CustomScan *) node->ss.ps.plan)->custom_private;
	List	   *descs = NIL;
	ListCell   *lc;

	foreach(lc, (List *) linitial(priv))
		descs = lappend(descs, lf_item_desc((List *) lfirst(lc)));
	if (descs != NIL)
		ExplainPropertyList("Migrates", descs, es);
	descs = NIL;
	foreach(lc, (List *) lsecond(priv))
		descs = lappend(descs, strVal(lfirst(lc)));
	if (descs != NIL)
		ExplainPropertyList("Computes", descs, es);
}
