/*-------------------------------------------------------------------------
 * compute.c
 *	  Reads that compute the eager state instead of migrating rows.
 *
 * At any snapshot, a row still in its retired table is exactly a row not
 * yet migrated (docs/design.md section 2).  So the eager contents of a new
 * table at that snapshot are its own rows plus its mappings applied to the
 * retired rows: a read can compute them without writing anything.  We do
 * that where a statement cannot or should not write (lf_compute_wanted):
 * on a hot standby, in a read-only transaction, for COPY ... TO (pg_dump),
 * and everywhere with leapfrog.read_mode = compute.
 *
 * The planner hook (relevance.c) hands us the statement's Query; every
 * occurrence of a new table becomes
 *
 *     (SELECT <columns> FROM ONLY new
 *      UNION ALL SELECT <mapping 1 columns> FROM (<mapping 1>) WHERE gate
 *      UNION ALL ...)
 *
 * with the columns in attribute order, so the statement's Vars keep their
 * meaning.  The planner flattens a UNION ALL of simple queries into an
 * append relation and pushes the statement's quals into every branch, and
 * into a GROUP BY mapping when they touch only its grouping columns: a point
 * query stays a point query on both sides.  The gate,
 * leapfrog.sees_start(migration, in_place, anchor), is false under a
 * snapshot older than start(), to which eagerly the new table was still
 * empty (an input altered in place raises the error the migrating path
 * raises); anchored to a column, it filters the rows (branch_gate).
 *
 * A computed row must also pass the new table's NOT NULL and CHECK
 * constraints, as migrating it would (leapfrog.check_computed).
 *
 * A read whose every branch pins one group of a mapping tracked by keys, or
 * one join unit of a retired input (probe.c), may run the plan of the
 * statement as written instead: where its snapshot sees those units
 * migrated, the branches would compute nothing.  With values known at
 * planning (literals, a custom plan's parameters) the planning snapshot
 * chooses the one plan to make; a generic plan carries both; either way the
 * run's snapshot has the last word (lf_compute_plan, lf_compute_shortcut).
 *
 * Privileges: the caller's on the new table are checked on the first
 * branch, with the statement's own column set; the retired tables are the
 * extension's, and a user allowed to read the new table may read what the
 * mappings compute from them.  Row security of the new table applies to
 * the whole union.
 *
 * A statement is computed only if it is a plain read of the new tables:
 * SELECT without FOR UPDATE/SHARE on them, without their system columns
 * (a union has none: ctid, xmin... would differ between the branches), and
 * without a new table left in the plan that we did not rewrite (SQL
 * functions the planner inlines).  Otherwise it takes the migrating path,
 * which fails where migrating is impossible.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/table.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/planner.h"
#include "parser/parse_func.h"
#include "parser/parsetree.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteManip.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

bool		lf_compute_forced = false;

typedef struct ComputeCtx
{
	bool		ok;				/* every occurrence can be computed */
	int			rewritten;		/* occurrences replaced */
	List	   *descs;			/* EXPLAIN's "Computes:" lines (String) */
	List	   *pins;			/* per branch that pins one group: (migration
								 * id, mapping id, key values) */
	bool		unpinned;		/* a branch pins no group, or values the
								 * executor cannot compute first */
	bool		rows_pinned;	/* a branch pins a row (lf_retired_pin) */
} ComputeCtx;

/* Where a statement reads without migrating (see the file header). */
bool
lf_compute_wanted(void)
{
	return lf_compute_forced || lf_read_mode == LF_READ_COMPUTE ||
		XactReadOnly || RecoveryInProgress();
}

/* Does the level (or a level below it) use a system column of rti? */
typedef struct BadRef
{
	int			rti;
	int			depth;
} BadRef;

static bool
bad_ref_walker(Node *node, BadRef *br)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;

		return v->varno == br->rti && v->varlevelsup == br->depth && v->varattno < 0;
	}
	if (IsA(node, Query))
	{
		bool		r;

		br->depth++;
		r = query_tree_walker((Query *) node, bad_ref_walker, br, 0);
		br->depth--;
		return r;
	}
	return expression_tree_walker(node, bad_ref_walker, br);
}

static Oid
check_func(void)
{
	Oid			argtypes[4] = {BOOLOID, REGCLASSOID, TEXTOID, BOOLOID};

	return LookupFuncName(list_make2(makeString("leapfrog"), makeString("check_computed")),
						  4, argtypes, false);
}

static Oid
sees_start_func(void)
{
	Oid			argtypes[3] = {INT4OID, BOOLOID, ANYOID};

	return LookupFuncName(list_make2(makeString("leapfrog"), makeString("sees_start")),
						  3, argtypes, false);
}

/* A Query: SELECT tlist FROM rte [WHERE quals] */
static bool rewrite_walker(Node *node, ComputeCtx *cx);

static bool
reads_system_column(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
		return ((Var *) node)->varattno < 0;
	return expression_tree_walker(node, reads_system_column, cx);
}

static Query *
simple_select(RangeTblEntry *rte, List *tlist, Node *quals)
{
	Query	   *q = makeNode(Query);
	RangeTblRef *rtr = makeNode(RangeTblRef);

	q->commandType = CMD_SELECT;
	q->querySource = QSRC_ORIGINAL;
	q->canSetTag = true;
	q->rtable = list_make1(rte);
	rtr->rtindex = 1;
	q->jointree = makeFromExpr(list_make1(rtr), quals);
	q->targetList = tlist;
	return q;
}

static RangeTblEntry *
subquery_rte(Query *sub, const char *name)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ListCell   *lc;

	rte->rtekind = RTE_SUBQUERY;
	rte->subquery = sub;
	rte->eref = makeAlias(name, NIL);
	foreach(lc, sub->targetList)
		rte->eref->colnames = lappend(rte->eref->colnames,
									  makeString(pstrdup(((TargetEntry *) lfirst(lc))->resname)));
	rte->inFromCl = true;
	return rte;
}

/* The extension reads the retired tables: no privilege check on them. */
static bool
clear_perms_walker(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind == RTE_RELATION)
			rte->requiredPerms = 0;
		return false;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, clear_perms_walker, cx,
								 QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, clear_perms_walker, cx);
}

/*
 * Whether check (of constraint_quals) holds for every row mapping sub
 * computes: a NOT NULL check of a column that is a column of sub's only
 * input, read as it is, which that input declares NOT NULL.  (An outer
 * join's nullable side, a grouping set's rolled-up key or a cast could be
 * NULL: their checks stay.)  Each check kept is a function call set up
 * with every read that computes; a key read of the TPC-C split had three.
 */
static bool
check_holds(Node *check, Query *sub)
{
	FuncExpr   *call = (FuncExpr *) check;
	NullTest   *nt = linitial(call->args);
	Const	   *not_null = lfourth(call->args);
	RangeTblRef *only;
	RangeTblEntry *rte;
	TargetEntry *tle;
	Node	   *e;
	Var		   *v;

	if (!IsA(nt, NullTest) || !IsA(nt->arg, Var) || !DatumGetBool(not_null->constvalue) ||
		sub->groupingSets != NIL || sub->setOperations != NULL ||
		list_length(sub->jointree->fromlist) != 1 ||
		!IsA(linitial(sub->jointree->fromlist), RangeTblRef))
		return false;
	only = linitial(sub->jointree->fromlist);
	tle = list_nth(sub->targetList, ((Var *) nt->arg)->varattno - 1);
	e = (Node *) tle->expr;
	while (IsA(e, RelabelType))
		e = (Node *) ((RelabelType *) e)->arg;
	if (!IsA(e, Var))
		return false;
	v = (Var *) e;
	if (v->varlevelsup != 0 || v->varno != only->rtindex || v->varattno <= 0)
		return false;
	rte = rt_fetch(v->varno, sub->rtable);
	return rte->rtekind == RTE_RELATION && lf_column_not_null(rte->relid, v->varattno);
}

/*
 * The gate of mapping m's branch, leapfrog.sees_start(migration, in_place,
 * anchor).  Anchored to a column of the branch's FROM that is a column of
 * the input read as it is, the call is a filter on the input's rows, first
 * among the branch's (the planner orders a scan's filters by cost, then as
 * written), and the function answers once per snapshot: a one-time filter
 * was a Result node set up with every read that computes, a tenth of the
 * instructions of a TPC-C point read of the split.  A NULL anchor makes it
 * a test before any row is read, as before: for an input altered in place
 * (its 40001 must not depend on a row being found), and for a mapping that
 * filters (its own conditions would run first, on rows a snapshot older
 * than start() must not compute).
 */
static Node *
branch_gate(Oid gate, LfMigration *mig, LfMapping *m, Query *from_sub, bool in_place)
{
	Node	   *anchor = NULL;

	for (int attno = 1; !in_place && !lf_mapping_filters(m) && attno <= m->natts; attno++)
	{
		Node	   *col = (Node *) ((TargetEntry *) list_nth(from_sub->targetList, attno - 1))->expr;
		Node	   *e = col;

		while (IsA(e, RelabelType))
			e = (Node *) ((RelabelType *) e)->arg;
		if (IsA(e, Var) && ((Var *) e)->varlevelsup == 0)
		{
			anchor = (Node *) makeVar(1, attno, exprType(col), exprTypmod(col),
									  exprCollation(col), 0);
			break;
		}
	}
	if (anchor == NULL)
		anchor = (Node *) makeNullConst(INT4OID, -1, InvalidOid);
	return (Node *) makeFuncExpr(gate, BOOLOID,
								 list_make3(makeConst(INT4OID, -1, InvalidOid, 4,
													  Int32GetDatum(mig->id), false, true),
											makeBoolConst(in_place, false),
											anchor),
								 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
}

/* The Vars of vars as columns of sub-query 1 (split_barrier) */
static Node *
vars_to_columns(Node *node, List *vars)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var) && ((Var *) node)->varlevelsup == 0)
	{
		ListCell   *lc;

		foreach(lc, vars)
			if (equal(node, lfirst(lc)))
				return (Node *) makeVar(1, foreach_current_index(lc) + 1, exprType(node),
										exprTypmod(node), exprCollation(node), 0);
		elog(ERROR, "leapfrog: mapping column not found below the barrier");
	}
	return expression_tree_mutator(node, vars_to_columns, vars);
}

/*
 * A mapping that leaves rows out is a security barrier (lf_mapping_filters):
 * the statement's leaky conditions stay above it.  But its sub-query then
 * computed every mapping column of every row its filter passed, before
 * those conditions: a column that cannot be computed on a row the statement
 * does not read (a row that cannot be migrated: '500' into varchar(2))
 * failed the read, where a migrating read, which reads its own rows only,
 * succeeds.  So the barrier goes below the columns: the sub-query, still a
 * barrier, passes up the input columns the mapping reads, and the mapping's
 * columns are computed above it from them, after the statement's
 * conditions.  Not for a GROUP BY (its columns are its groups') or a
 * mapping with sub-links.
 */
static void
split_barrier(RangeTblEntry *from)
{
	Query	   *q = from->subquery;
	List	   *vars = NIL;
	List	   *tlist = NIL;
	List	   *colnames = NIL;
	Query	   *inner;
	RangeTblEntry *below;
	ListCell   *lc;

	if (!from->security_barrier || from->securityQuals != NIL || q->hasAggs ||
		q->groupClause != NIL || q->hasSubLinks || q->hasWindowFuncs ||
		q->hasTargetSRFs || q->setOperations != NULL || q->distinctClause != NIL ||
		q->havingQual != NULL)
		return;
	foreach(lc, pull_var_clause((Node *) q->targetList, 0))
		if (((Var *) lfirst(lc))->varlevelsup == 0 && !list_member(vars, lfirst(lc)))
			vars = lappend(vars, lfirst(lc));
	foreach(lc, vars)
	{
		char	   *name = psprintf("lf_in_%d", foreach_current_index(lc) + 1);

		tlist = lappend(tlist, makeTargetEntry(copyObject(lfirst(lc)),
											   foreach_current_index(lc) + 1, name, false));
		colnames = lappend(colnames, makeString(name));
	}
	inner = copyObject(q);
	inner->targetList = tlist;
	below = makeNode(RangeTblEntry);
	below->rtekind = RTE_SUBQUERY;
	below->subquery = inner;
	below->eref = makeAlias("lf_filtered", colnames);
	below->inFromCl = true;
	below->security_barrier = true;
	from->subquery = simple_select(below,
								   (List *) vars_to_columns((Node *) q->targetList, vars),
								   NULL);
	from->security_barrier = false;
}

/*
 * The branch of mapping m: SELECT <its natts columns, with the target's
 * collations> FROM (<m>) WHERE <gate> [AND conjuncts].
 * conjuncts: the statement's conditions on occurrence rti that a mapping
 * column's integer cast would keep off the input's index (int -> bigint, the
 * most common change): the planner pushes them down as they are, and we add
 * them on the input's column (relevance.c's lf_raw_quals).  NULL if a
 * column does not have the target's type (never expected: start() coerces).
 *
 * Of a row mapping whose gate filters rows (one that copies a column as it
 * is and filters none: a split's, say), the branch has no WHERE: *keeps is
 * set to its conditions, in their order, and the union filters on them
 * (union_rte says why).  Not if one is volatile or has a sub-query (a
 * CHECK constraint's, a statement's condition): the planner flattens no
 * branch with such a column, and the WHERE keeps the order it always had.
 */
static Query *
mapping_branch(LfMapping *m, LfMigration *mig, RangeTblEntry *orig, int rti,
			   List *conjuncts, List *checks, List *types, List *collations, Oid gate,
			   ComputeCtx *cx, List **keeps)
{
	RangeTblEntry *from = lf_map_rte(m, orig);
	Query	   *branch;
	List	   *tlist = NIL;
	List	   *quals;
	List	   *mine = NIL;		/* conjuncts, on the branch's FROM */
	Node	   *gate_done;
	List	   *probe;
	List	   *values;
	ListCell   *lc;
	int			attno;
	/* the copy of a table altered in place, which eagerly held its rows */
	bool		in_place = list_member_oid(mig->in_place_targets, m->target);

	foreach(lc, conjuncts)
	{
		Node	   *c = copyObject(lfirst(lc));

		ChangeVarNodes(c, rti, 1, 0);
		mine = lappend(mine, c);
	}
	/*
	 * A group the statement pins: skip its rows if it is migrated (live.c),
	 * and if the executor can compute the key first, let it skip the branch
	 * (lf_compute_shortcut).
	 */
	if ((gate_done = lf_live_pinned_gate(m, mine, 1)) != NULL)
	{
		List	   *values = lf_live_pinned_values(m, mine, 1);

		lf_live_pin(from->subquery, m, gate_done);
		if (values != NIL)
			cx->pins = lappend(cx->pins, list_make3(makeInteger(mig->id), makeInteger(m->id),
													values));
		else
			cx->unpinned = true;
	}
	else if ((probe = lf_retired_pin(mig, m, mine, 1, &values)) != NIL)
	{
		/* a join unit or a row of a retired input (probe.c) */
		cx->pins = lappend(cx->pins, list_make4(makeInteger(mig->id), makeInteger(m->id),
												values, probe));
		cx->rows_pinned |= m->kind == LF_MAP_ROWS;
	}
	else
		cx->unpinned = true;
	from->alias = NULL;
	from->securityQuals = NIL;
	from->security_barrier = lf_mapping_filters(m);	/* relevance.c */
	from->inFromCl = true;
	(void) query_tree_walker(from->subquery, clear_perms_walker, NULL, QTW_EXAMINE_RTES_BEFORE);
	/*
	 * lf_ctid (ctid, or a GROUP BY's min(ctid)): unused here, and a system
	 * column, which the union standing for an input still being filled
	 * (chained migrations) does not have.
	 */
	foreach(lc, from->subquery->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resno > m->natts && reads_system_column((Node *) tle->expr, NULL))
			tle->expr = (Expr *) makeNullConst(exprType((Node *) tle->expr), -1, InvalidOid);
	}
	for (attno = 1; attno <= m->natts; attno++)
	{
		TargetEntry *tle = list_nth(from->subquery->targetList, attno - 1);
		Oid			type = list_nth_oid(types, attno - 1);
		Oid			coll = list_nth_oid(collations, attno - 1);
		Expr	   *e;

		if (exprType((Node *) tle->expr) != type)
			return NULL;
		e = (Expr *) makeVar(1, attno, type, exprTypmod((Node *) tle->expr),
							 exprCollation((Node *) tle->expr), 0);
		if (exprCollation((Node *) e) != coll)
			e = (Expr *) makeRelabelType(e, type, exprTypmod((Node *) e), coll,
										 COERCE_IMPLICIT_CAST);
		tlist = lappend(tlist, makeTargetEntry(e, attno, pstrdup(tle->resname), false));
	}
	quals = list_make1(branch_gate(gate, mig, m, from->subquery, in_place));
	foreach(lc, checks)
	{
		if (!check_holds(lfirst(lc), from->subquery))
			quals = lappend(quals, copyObject(lfirst(lc)));
	}
	split_barrier(from);
	branch = simple_select(from, tlist, NULL);
	foreach(lc, mine)
	{
		Node	   *c = lfirst(lc);
		Node	   *raw = lf_raw_quals(branch, c);

		if (!equal(raw, c))
			quals = lappend(quals, raw);
	}
	*keeps = NIL;
	if (m->kind == LF_MAP_ROWS && types != NIL &&
		IsA(lthird(((FuncExpr *) linitial(quals))->args), Var) &&
		!contain_volatile_functions((Node *) quals) && !contain_subplans((Node *) quals))
		*keeps = quals;
	else
		branch->jointree->quals = (Node *) make_ands_explicit(quals);
	return branch;
}

/*
 * The target's NOT NULL and CHECK constraints on a computed row, as quals
 * leapfrog.check_computed(ok, target, name, not_null) that raise the error
 * inserting the row would raise: a row migrating would fail must not be
 * shown computed.  The constraints' Vars (varno 1, the target's attnos)
 * read the branch's mapping columns, which have the same numbers.  Unique
 * and foreign keys are not checked (README, limits).
 */
static Node *
check_call(Oid fn, Relation rel, Node *ok, const char *name, bool not_null)
{
	return (Node *) makeFuncExpr(fn, BOOLOID,
								 list_make4(ok,
											makeConst(REGCLASSOID, -1, InvalidOid, 4,
													  ObjectIdGetDatum(RelationGetRelid(rel)),
													  false, true),
											makeConst(TEXTOID, -1, DEFAULT_COLLATION_OID, -1,
													  CStringGetTextDatum(name), false, false),
											makeBoolConst(not_null, false)),
								 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
}

static List *
constraint_quals(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			fn = check_func();
	List	   *quals = NIL;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		NullTest   *nt;

		if (att->attisdropped || !att->attnotnull)
			continue;
		nt = makeNode(NullTest);
		nt->arg = (Expr *) makeVar(1, i + 1, att->atttypid, att->atttypmod, att->attcollation, 0);
		nt->nulltesttype = IS_NOT_NULL;
		nt->location = -1;
		quals = lappend(quals, check_call(fn, rel, (Node *) nt, NameStr(att->attname), true));
	}
	for (int i = 0; desc->constr && i < desc->constr->num_check; i++)
	{
		ConstrCheck *cc = &desc->constr->check[i];

		quals = lappend(quals, check_call(fn, rel, stringToNode(cc->ccbin), cc->ccname, false));
	}
	return quals;
}

/*
 * Add columns lf_keep_1 to lf_keep_n to a union branch's sub-query
 * (union_rte): the conditions keeps, then true.
 */
static void
add_keep_columns(RangeTblEntry *rte, List *keeps, int n)
{
	Query	   *q = rte->subquery;

	for (int i = 0; i < n; i++)
	{
		char	   *name = psprintf("lf_keep_%d", i + 1);
		Node	   *keep = i < list_length(keeps) ? list_nth(keeps, i)
			: (Node *) makeBoolConst(true, false);

		q->targetList = lappend(q->targetList,
								makeTargetEntry((Expr *) keep, list_length(q->targetList) + 1,
												name, false));
		rte->eref->colnames = lappend(rte->eref->colnames, makeString(name));
	}
}

/*
 * The union standing for occurrence orig of a new table, or NULL if it
 * cannot be built.
 */
static RangeTblEntry *
union_rte(RangeTblEntry *orig, int rti, List *conjuncts, List *mappings, ComputeCtx *cx)
{
	Relation	rel = table_open(orig->relid, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	List	   *types = NIL,
			   *typmods = NIL,
			   *collations = NIL,
			   *own_tlist = NIL,
			   *top_tlist = NIL;
	RangeTblEntry *own = copyObject(orig);
	Query	   *u = makeNode(Query);
	Node	   *setop = NULL;
	RangeTblEntry *result;
	Oid			gate = sees_start_func();
	List	   *checks = constraint_quals(rel);
	List	   *keeps = NIL;	/* per mapping branch: its conditions as columns */
	int			nkeeps = 0;
	ListCell   *lc;
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Expr	   *e;
		char	   *name = pstrdup(NameStr(att->attname));

		/* start() maps a dropped column to NULL::int4 */
		if (att->attisdropped)
			e = (Expr *) makeNullConst(INT4OID, -1, InvalidOid);
		else
			e = (Expr *) makeVar(1, i + 1, att->atttypid, att->atttypmod, att->attcollation, 0);
		types = lappend_oid(types, exprType((Node *) e));
		typmods = lappend_int(typmods, exprTypmod((Node *) e));
		collations = lappend_oid(collations, exprCollation((Node *) e));
		own_tlist = lappend(own_tlist, makeTargetEntry(e, i + 1, name, false));
		top_tlist = lappend(top_tlist,
							makeTargetEntry((Expr *) makeVar(1, i + 1, exprType((Node *) e),
															 exprTypmod((Node *) e),
															 exprCollation((Node *) e), 0),
											i + 1, name, false));
	}

	/* the table's own rows; the caller's privileges are checked here */
	own->inFromCl = true;
	own->securityQuals = NIL;
	own->alias = NULL;
	u->rtable = list_make1(subquery_rte(simple_select(own, own_tlist, NULL), "lf_rows"));

	foreach(lc, mappings)
	{
		LfMapping  *m = lfirst(lc);
		LfMigration *mig = lf_migration_by_input(m->input);
		List	   *keep = NIL;
		Query	   *branch = mig ? mapping_branch(m, mig, orig, rti, conjuncts, checks, types,
												  collations, gate, cx, &keep) : NULL;
		SetOperationStmt *op;
		RangeTblRef *l,
				   *r = makeNode(RangeTblRef);

		/*
		 * Chained migrations: the input may be a table an earlier migration
		 * still fills, computed in turn.
		 */
		if (branch)
			(void) rewrite_walker((Node *) branch, cx);
		if (branch == NULL || !cx->ok)
		{
			table_close(rel, NoLock);
			return NULL;
		}
		u->rtable = lappend(u->rtable, subquery_rte(branch, "lf_mapped"));
		keeps = lappend(keeps, keep);
		nkeeps = Max(nkeeps, list_length(keep));
		r->rtindex = list_length(u->rtable);
		if (setop == NULL)
		{
			l = makeNode(RangeTblRef);
			l->rtindex = 1;
			setop = (Node *) l;
		}
		op = makeNode(SetOperationStmt);
		op->op = SETOP_UNION;
		op->all = true;
		op->larg = setop;
		op->rarg = (Node *) r;
		op->colTypes = types;
		op->colTypmods = typmods;
		op->colCollations = collations;
		setop = (Node *) op;
		cx->descs = lappend(cx->descs,
							makeString(psprintf("%s from %s", RelationGetRelationName(rel),
												lf_relation_name(m->input))));
	}
	table_close(rel, NoLock);
	if (setop == NULL)
		return NULL;			/* no mapping left: the migration completed */

	u->commandType = CMD_SELECT;
	u->querySource = QSRC_ORIGINAL;
	u->canSetTag = true;
	u->jointree = makeFromExpr(NIL, NULL);
	u->targetList = top_tlist;
	u->setOperations = setop;

	/*
	 * A branch with a condition in its WHERE is never flattened into the
	 * union's append relation (is_safe_append_member): it stays a sub-query,
	 * and every read that computes starts a Subquery Scan node over the
	 * input's scan, whose target list is all the table's columns.  So the
	 * branches of mapping_branch's *keeps give their conditions as columns
	 * instead, lf_keep_1 to lf_keep_n (true in the other branches), and the
	 * union is read as SELECT <columns> FROM (union) WHERE lf_keep_1 AND ...
	 * The planner then scans the input as a member of the append relation,
	 * with those conditions first among its filters, in their order (a
	 * sub-query's conditions are placed before the statement's, and the
	 * filters are ordered by cost, stably), as a branch's WHERE had them;
	 * it drops them where they are true.
	 */
	if (nkeeps > 0)
	{
		List	   *tlist = list_copy(top_tlist);
		List	   *quals = NIL;
		int			natts = list_length(top_tlist);

		add_keep_columns(linitial(u->rtable), NIL, nkeeps);
		foreach(lc, keeps)
			add_keep_columns(list_nth(u->rtable, foreach_current_index(lc) + 1),
							 lfirst(lc), nkeeps);
		for (i = 1; i <= nkeeps; i++)
		{
			Var		   *v = makeVar(1, natts + i, BOOLOID, -1, InvalidOid, 0);

			types = lappend_oid(types, BOOLOID);
			typmods = lappend_int(typmods, -1);
			collations = lappend_oid(collations, InvalidOid);
			u->targetList = lappend(u->targetList,
									makeTargetEntry((Expr *) v, natts + i,
													psprintf("lf_keep_%d", i), false));
			quals = lappend(quals, copyObject(v));
		}
		/* the set operations, a left-deep chain, take the longer column lists */
		for (Node *n = setop; IsA(n, SetOperationStmt); n = ((SetOperationStmt *) n)->larg)
		{
			((SetOperationStmt *) n)->colTypes = types;
			((SetOperationStmt *) n)->colTypmods = typmods;
			((SetOperationStmt *) n)->colCollations = collations;
		}
		u = simple_select(subquery_rte(u, "lf_union"), tlist, (Node *) make_ands_explicit(quals));
	}

	result = makeNode(RangeTblEntry);
	result->rtekind = RTE_SUBQUERY;
	result->subquery = u;
	result->alias = orig->alias ? copyObject(orig->alias) : NULL;
	result->eref = copyObject(orig->eref);
	result->inFromCl = orig->inFromCl;
	result->securityQuals = copyObject(orig->securityQuals);
	result->security_barrier = orig->securityQuals != NIL;
	return result;
}

/*
 * Replace, in q and every level below it, each occurrence of a new table by
 * its union.  The levels below are done first, so the unions we build are
 * never visited.
 */
static bool
rewrite_walker(Node *node, ComputeCtx *cx)
{
	Query	   *q;
	ListCell   *lc;

	if (node == NULL || !cx->ok)
		return false;
	if (!IsA(node, Query))
		return expression_tree_walker(node, rewrite_walker, cx);
	q = (Query *) node;
	(void) query_tree_walker(q, rewrite_walker, cx, 0);
	foreach(lc, q->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);
		int			rti = foreach_current_index(lc) + 1;
		BadRef		br = {rti, 0};
		RangeTblEntry *u;

		if (rte->rtekind != RTE_RELATION || !lf_is_target(rte->relid))
			continue;
		if (q->resultRelation == rti || get_parse_rowmark(q, rti) != NULL ||
			rte->tablesample != NULL ||
			query_tree_walker(q, bad_ref_walker, &br, 0))
		{
			cx->ok = false;
			return false;
		}
		u = union_rte(rte, rti, lf_own_conjuncts(q, rti), lf_mappings_for_target(rte->relid), cx);
		if (u == NULL)
		{
			cx->ok = false;
			return false;
		}
		lfirst(lc) = u;
		cx->rewritten++;
	}
	return false;
}

/* How many times the plan reads new tables */
static int
target_scans(PlannedStmt *stmt)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, stmt->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		if (rte->rtekind == RTE_RELATION && lf_is_target(rte->relid))
			n++;
	}
	return n;
}

/*
 * Set while a plain plan is planned again for a snapshot that sees a unit it
 * pins retired (lf_compute_shortcut): plan the computing way, no look-up.
 */
static bool replanning_retired = false;

/* Does a value pins pin hold a parameter of the statement? */
static bool
pins_have_parameter(List *pins)
{
	ListCell   *lc;

	foreach(lc, pins)
	{
		if (lf_has_parameter((Node *) lthird((List *) lfirst(lc))))
			return true;
	}
	return false;
}

/*
 * Are the pins' values known as the statement is planned: literals, or
 * parameters whose values the planner has (a custom plan)?
 */
static bool
pins_known(List *pins, ParamListInfo params)
{
	ListCell   *lc;
	ListCell   *lv;

	foreach(lc, pins)
	{
		foreach(lv, (List *) lthird((List *) lfirst(lc)))
		{
			Datum		value;
			bool		isnull;

			if (!lf_simple_value(lfirst(lv), params, true, &value, &isnull))
				return false;
		}
	}
	return true;
}

/*
 * Does snap see every unit pins pins migrated: each join unit's retired
 * input without a row for it (lf_retired_pin_gone), each group among the
 * migrated keys (lf_live_done_at)?  Not if a migration completed meanwhile
 * or a value is NULL.
 */
static bool
pins_gone(List *pins, ParamListInfo params, Snapshot snap)
{
	EState	   *estate = NULL;
	ListCell   *lc;
	bool		all = true;

	if (!lf_cache_valid)
		lf_cache_load();
	foreach(lc, pins)
	{
		List	   *pin = lfirst(lc);
		LfMigration *mig = lf_migration_by_id(intVal(linitial(pin)));
		LfMapping  *m = mig ? lf_mapping_by_id(mig, intVal(lsecond(pin))) : NULL;
		/* of a retired input: its look-up (lf_retired_pin) */
		List	   *probe = list_length(pin) > 3 ? lfourth(pin) : NIL;
		Datum		key[LF_KEY_MAX];
		bool		nulls[INDEX_MAX_KEYS];

		if (m == NULL || (probe == NIL && list_length(lthird(pin)) != m->nkeys))
		{
			all = false;
			break;
		}
		lf_live_eval_pinned(lthird(pin), params, &estate, key, nulls);
		for (int k = 0; k < list_length(lthird(pin)); k++)
			all &= !nulls[k];
		if (!all)
			break;
		if (probe != NIL)
			all = lf_retired_pin_gone(probe, key, snap);
		else
		{
			key[m->nkeys] = UInt32GetDatum(0);
			lf_key_set_row(m->nkeys, key, 0, NULL);
			all = lf_live_done_at(m, key, snap);
		}
		if (!all)
			break;
	}
	if (estate)
		FreeExecutorState(estate);
	return all;
}

/*
 * Plan parse (a plain read of new tables, not modified) the computing way,
 * or return NULL if it cannot be computed.  The caller has locked the
 * retired inputs of the new tables it reads, and the cache is current.
 *
 * Where every branch pins one unit (a group, a join unit), the statement
 * as written, on the new tables alone, reads the same rows once those units
 * are migrated.  If the pinned values are known now (literals, a custom
 * plan's parameters: a plan made for one run, mostly), the active snapshot
 * decides which one plan to make: the plain one where it sees the units
 * migrated (keeping parse, to plan the computing way at executor start if
 * the run's snapshot does not: the plan may be kept, and run after a
 * rollback), else the computing one.  Otherwise (a generic plan, whose
 * parameters come at each run) both are made, and each run's snapshot
 * chooses (lf_compute_shortcut); not for values that hold no parameter (a
 * stable function of literals), which would pay the second plan at every
 * planning for one run, nor where a branch pins a row (probe.c says why).
 */
PlannedStmt *
lf_compute_plan(Query *parse, const char *query_string, int cursorOptions,
				ParamListInfo boundParams, planner_hook_type next)
{
	Query	   *copy;
	ComputeCtx	cx = {true, 0, NIL, NIL, false, false};
	PlannedStmt *stmt;
	PlannedStmt *plain;
	bool		pinned;
	bool		known;

	if (parse->commandType != CMD_SELECT || parse->hasModifyingCTE || parse->hasForUpdate)
		return NULL;
	copy = copyObject(parse);
	(void) rewrite_walker((Node *) copy, &cx);
	if (!cx.ok || cx.rewritten == 0)
		return NULL;
	pinned = cx.pins != NIL && !cx.unpinned;
	known = pinned && pins_known(cx.pins, boundParams);
	if (known && !replanning_retired && ActiveSnapshotSet() &&
		pins_gone(cx.pins, boundParams, GetActiveSnapshot()))
	{
		ListCell   *lc;

		plain = next ? next(copyObject(parse), query_string, cursorOptions, boundParams)
			: standard_planner(copyObject(parse), query_string, cursorOptions, boundParams);
		/* a new table read by an inlined SQL function (as below) */
		if (target_scans(plain) != cx.rewritten)
			return NULL;
		/* the inputs' end (complete()) ends the plan */
		foreach(lc, cx.pins)
		{
			LfMapping  *m = lf_mapping_by_id(lf_migration_by_id(intVal(linitial((List *) lfirst(lc)))),
											 intVal(lsecond((List *) lfirst(lc))));

			for (int j = 0; j < m->ninputs; j++)
				plain->relationOids = list_append_unique_oid(plain->relationOids, m->inputs[j]);
		}
		return lf_wrap_plan(plain, NIL, NIL, parse, list_make2(cx.pins, NULL));
	}
	stmt = next ? next(copy, query_string, cursorOptions, boundParams)
		: standard_planner(copy, query_string, cursorOptions, boundParams);
	/* a new table read by an inlined SQL function was not rewritten */
	if (target_scans(stmt) != cx.rewritten)
		return NULL;
	if (!pinned || known || cx.rows_pinned || !pins_have_parameter(cx.pins))
		return lf_wrap_plan(stmt, NIL, cx.descs, NULL, NIL);

	/* the plan of the statement as written, for runs that see the units migrated */
	plain = next ? next(parse, query_string, cursorOptions, boundParams)
		: standard_planner(parse, query_string, cursorOptions, boundParams);
	stmt->relationOids = list_concat_unique_oid(stmt->relationOids, plain->relationOids);
	stmt->invalItems = list_concat(stmt->invalItems, plain->invalItems);
	stmt->transientPlan |= plain->transientPlan;
	stmt->dependsOnRole |= plain->dependsOnRole;
	stmt = lf_wrap_plan(stmt, NIL, cx.descs, NULL, list_make2(cx.pins, plain));

	/*
	 * The plan cache keeps a generic plan only if it costs less than the
	 * custom plans did, and a custom plan made where the units were migrated
	 * is the plain plan alone.  This one runs that plan wherever they are,
	 * and the computing one (a custom plan's too) where they are not: it
	 * costs what the plain plan costs.
	 */
	stmt->planTree->startup_cost = Min(stmt->planTree->startup_cost,
									   plain->planTree->startup_cost);
	stmt->planTree->total_cost = Min(stmt->planTree->total_cost, plain->planTree->total_cost);
	return stmt;
}

/*
 * The plan qd should run instead of the one it has, or NULL.  A computing
 * plan that also carries the plain one (lf_compute_plan) runs the plain one
 * where qd's snapshot sees every unit it pins migrated: the branches would
 * compute nothing (their gates, lf_live_pinned_gate, would find the keys
 * with that snapshot; a join unit's retired input has no row for it), and
 * the statement as written, on the new tables alone, reads the same rows.
 * Their set-up was most of a key read's cost: TPC-C's Delivery reads an
 * order's total just after its UPDATE of the order's lines migrated it.  A
 * plain plan made because the planning snapshot saw the units migrated is
 * planned again where qd's snapshot does not (a kept plan run after the
 * rollback of the transaction that migrated them, or on an older
 * snapshot): the computing way, or the migrating way if reads migrate now.
 * The snapshot decides, not the trigger's memo of the groups this
 * transaction migrated: a function of the writing statement reads on a
 * snapshot that cannot see the group it migrated.
 */
PlannedStmt *
lf_compute_shortcut(QueryDesc *qd, int eflags)
{
	List	   *shortcut = lf_plan_shortcut(qd->plannedstmt);
	PlannedStmt *stmt = NULL;

	if (shortcut == NIL || qd->snapshot == InvalidSnapshot)
		return NULL;
	if (pins_gone(linitial(shortcut), qd->params, qd->snapshot))
	{
		if (lsecond(shortcut) != NULL)
			return lsecond(shortcut);
		/* this plain plan, without our node (the executor never writes a plan) */
		stmt = palloc(sizeof(PlannedStmt));
		memcpy(stmt, qd->plannedstmt, sizeof(PlannedStmt));
		stmt->planTree = outerPlan(stmt->planTree);
		return stmt;
	}
	if (lsecond(shortcut) != NULL)
		return NULL;
	replanning_retired = true;
	PG_TRY();
	{
		stmt = lf_replan(qd, lf_plan_query(qd->plannedstmt), eflags);
	}
	PG_FINALLY();
	{
		replanning_retired = false;
	}
	PG_END_TRY();
	return stmt;
}

/*
 * leapfrog.sees_start(migration, in_place): may the statement's snapshot see
 * the rows a mapping computes?  Not if it predates start(): eagerly, the new
 * table was empty to it; and for a table altered in place it would see the
 * rows in the table itself, which is the error the migrating path gives.
 */
typedef struct SeesStartMemo
{
	Snapshot	snap;			/* the answer's snapshot: pointer, xmin, xmax, */
	TransactionId xmin;			/* command */
	TransactionId xmax;
	CommandId	curcid;
	bool		sees;
} SeesStartMemo;

PG_FUNCTION_INFO_V1(leapfrog_sees_start);
Datum
leapfrog_sees_start(PG_FUNCTION_ARGS)
{
	LfMigration *mig;
	SeesStartMemo *memo = fcinfo->flinfo->fn_extra;
	Snapshot	snap;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	if (!ActiveSnapshotSet())
		PG_RETURN_BOOL(true);
	snap = GetActiveSnapshot();

	/*
	 * A filter on the rows (branch_gate) is called for every row: the answer
	 * holds for the snapshot, which one executor run keeps.
	 */
	if (memo != NULL && memo->snap == snap && memo->xmin == snap->xmin &&
		memo->xmax == snap->xmax && memo->curcid == snap->curcid)
		PG_RETURN_BOOL(memo->sees);

	/*
	 * A parallel worker runs the gate too, with an empty cache: load it, or
	 * the migration is not found and a snapshot older than start() sees the
	 * computed rows.  The worker's fresh catalog snapshot finds the migration
	 * the leader planned with: it cannot complete meanwhile, as the leader
	 * holds its retired inputs.
	 */
	(void) lf_any_active();
	mig = lf_migration_by_id(PG_GETARG_INT32(0));
	if (mig != NULL && !lf_xact_visible(&mig->started, snap) && PG_GETARG_BOOL(1))
		lf_snapshot_predates(mig->name,
							 "the transaction's snapshot predates its start, and eagerly it "
							 "would see the rows of the table altered in place.");
	if (memo == NULL)
		memo = fcinfo->flinfo->fn_extra = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt,
															 sizeof(SeesStartMemo));
	memo->snap = snap;
	memo->xmin = snap->xmin;
	memo->xmax = snap->xmax;
	memo->curcid = snap->curcid;
	memo->sees = mig == NULL || lf_xact_visible(&mig->started, snap);
	PG_RETURN_BOOL(memo->sees);
}

/*
 * leapfrog.check_computed(ok, target, name, not_null): raise what inserting
 * a computed row into target would raise, when a NOT NULL (not_null) or
 * CHECK constraint name of it is false for the row; true otherwise.
 */
PG_FUNCTION_INFO_V1(leapfrog_check_computed);
Datum
leapfrog_check_computed(PG_FUNCTION_ARGS)
{
	char	   *relname;
	char	   *name;

	if (PG_ARGISNULL(0) || PG_GETARG_BOOL(0))
		PG_RETURN_BOOL(true);
	relname = get_rel_name(PG_GETARG_OID(1));
	name = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (PG_GETARG_BOOL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
						name, relname ? relname : "?"),
				 errdetail("A row not migrated yet would violate it once migrated.")));
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("new row for relation \"%s\" violates check constraint \"%s\"",
					relname ? relname : "?", name),
			 errdetail("A row not migrated yet would violate it once migrated.")));
	PG_RETURN_BOOL(false);
}
