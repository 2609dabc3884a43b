/*-------------------------------------------------------------------------
 * relevance.c
 *	  Planner hook: derive, from a statement, which input rows it needs.
 *
 * For every occurrence of a table under migration in a statement, we build
 * a *relevance query*: the statement's own query level with that occurrence
 * replaced by its mapping over the retired input (which holds exactly the
 * unmigrated rows), projecting the input rows' ctids.  The statement's
 * joins, sub-queries and WHERE clause so restrict the rows migrated; a
 * point query by key migrates one row.  INSERT (and UPDATE of a unique key)
 * also need the rows whose unique keys could conflict.
 *
 * Soundness rule: a relevance query may return more rows than needed, never
 * fewer.  So we only ever *drop* restrictions when unsure:
 *  - conjuncts with volatile functions (they would evaluate differently);
 *  - conjuncts above an outer join that reference its nullable side (the
 *    mere existence of a matching row changes the result, e.g. anti-joins);
 *  - correlated query levels fall back to their own single-table filters;
 *  - when all else fails, the whole input ("whole table").
 * Other occurrences of tables under migration in the same query level are
 * expanded both ways (physical table, and mapping), so a join between two
 * unmigrated rows is found; occurrences in other levels read the physical
 * table, and the executor hook iterates until no relevance query returns
 * anything (migrate.c), which makes those converge.
 *
 * The relevance queries are planned here, with the statement, and carried
 * by the LeapfrogMigrate node (scan.c).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteManip.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "access/stratnum.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opfamily.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "catalog/pg_am.h"
#include "commands/defrem.h"

#define MAX_COMBOS 16
#define MAX_ITEMS 64

static planner_hook_type prev_planner = NULL;

typedef struct RelCtx
{
	List	   *found;			/* OIDs of targets met in the Query */
	List	   *queries;		/* relevance Query per item */
	List	   *inputs;			/* input OID per item */
	List	   *descs;			/* description per item */
	List	   *kinds;			/* LfItemKind per item */
	List	   *mappings;		/* per item: the mapping id whose groups its rows
								 * need, of a live input tracked in place; or 0 */
	List	   *pinned;			/* per item: LF_ITEM_PINNED */
	List	   *fkeys;			/* LfForeignKey * whose referencing rows are needed */
	Oid			only;			/* if set, the one target collect_level looks
								 * for (an upstream level, nest_upstream) */
} RelCtx;

static void collect_level(Query *level, RelCtx *cx);
static List *plan_items(RelCtx *cx, PlannedStmt *stmt, ParamListInfo boundParams);
static bool on_grouping_columns(Node *c, int rti, Query *level);
static bool is_grouping_expr(TargetEntry *tle, Query *level);

/* ---------------------------------------------------------------------
 * Small tree tools
 * ---------------------------------------------------------------------
 */
typedef struct VarCheck
{
	int			varno;			/* 0: check correlation only */
	int			depth;
	bool		found;
} VarCheck;

/* Does the tree reference a query level above its own (depth 0)? */
static bool
outer_ref_walker(Node *node, VarCheck *vc)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		if (((Var *) node)->varlevelsup > vc->depth)
			return true;
		if (vc->varno && ((Var *) node)->varno == vc->varno &&
			((Var *) node)->varlevelsup == vc->depth &&
			((Var *) node)->varattno <= 0)
			return true;		/* whole-row or system column of the occurrence */
		return false;
	}
	if (IsA(node, Aggref) && ((Aggref *) node)->agglevelsup > vc->depth)
		return true;
	if (IsA(node, GroupingFunc) && ((GroupingFunc *) node)->agglevelsup > vc->depth)
		return true;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		return rte->rtekind == RTE_CTE && rte->ctelevelsup > vc->depth;
	}
	if (IsA(node, Query))
	{
		bool		r;

		vc->depth++;
		r = query_tree_walker((Query *) node, outer_ref_walker, vc, QTW_EXAMINE_RTES_BEFORE);
		vc->depth--;
		return r;
	}
	return expression_tree_walker(node, outer_ref_walker, vc);
}

/* References to levels above, or whole-row/system columns of rtindex varno. */
static bool
has_outer_or_bad_refs(Node *node, int varno)
{
	VarCheck	vc = {varno, 0, false};

	if (node && IsA(node, Query))
		return query_tree_walker((Query *) node, outer_ref_walker, &vc, QTW_EXAMINE_RTES_BEFORE);
	return outer_ref_walker(node, &vc);
}

/* An integer column of the input, widened or narrowed by the mapping? */
static Var *
integer_cast_of_column(Expr *e)
{
	Node	   *arg;

	if (!IsA(e, FuncExpr) || ((FuncExpr *) e)->funcformat == COERCE_EXPLICIT_CALL ||
		list_length(((FuncExpr *) e)->args) != 1)
		return NULL;
	arg = linitial(((FuncExpr *) e)->args);
	if (!IsA(arg, Var))
		return NULL;
	if (!OidIsValid(get_opfamily_member(INTEGER_BTREE_FAM_OID, exprType(arg),
										((FuncExpr *) e)->funcresulttype,
										BTEqualStrategyNumber)))
		return NULL;
	return (Var *) arg;
}

/*
 * The mapping as a sub-query RTE standing for an occurrence of its target:
 * columns 1..natts are the target's, natts + 1 is the input row's ctid.
 * After them come "raw" columns: for a target column that is an integer
 * cast of an input column (int -> bigint, the most common type change),
 * the input column itself, named lf_raw_<attno>.  rewrite_integer_quals()
 * uses them so that a comparison on the target column can use the input's
 * index.
 */
static RangeTblEntry *
make_map_rte(LfMapping *m, RangeTblEntry *orig)
{
	RangeTblEntry *sub = makeNode(RangeTblEntry);
	List	   *colnames = list_copy(orig->eref->colnames);
	ListCell   *lc;
	List	   *raw = NIL;

	sub->rtekind = RTE_SUBQUERY;
	/* a live input tracked in place: the groups not migrated (live.c) */
	sub->subquery = copyObject(m->unmigrated ? m->unmigrated : m->query);
	/* lf_ctid, and a GROUP BY's lf_key columns */
	foreach(lc, sub->subquery->targetList)
		if (((TargetEntry *) lfirst(lc))->resno > m->natts)
			colnames = lappend(colnames,
							   makeString(pstrdup(((TargetEntry *) lfirst(lc))->resname)));
	foreach(lc, sub->subquery->targetList)
	{
		TargetEntry *tle = lfirst(lc);
		Var		   *v;

		if (tle->resno > m->natts || (v = integer_cast_of_column(tle->expr)) == NULL)
			continue;
		raw = lappend(raw, makeTargetEntry((Expr *) copyObject(v),
										   list_length(sub->subquery->targetList) + list_length(raw) + 1,
										   psprintf("lf_raw_%d", tle->resno), false));
		colnames = lappend(colnames, makeString(psprintf("lf_raw_%d", tle->resno)));
	}
	sub->subquery->targetList = list_concat(sub->subquery->targetList, raw);
	sub->alias = orig->alias ? copyObject(orig->alias) : NULL;
	sub->eref = makeAlias(orig->eref->aliasname, colnames);
	sub->inFromCl = orig->inFromCl;
	sub->securityQuals = copyObject(orig->securityQuals);
	sub->security_barrier = orig->securityQuals != NIL || lf_mapping_filters(m);
	return sub;
}

/*
 * Does the mapping leave input rows out (a filter, a HAVING, a join)?  Then
 * its sub-query is a security barrier, as a view's would be: a caller's
 * leaky function in the statement's quals must not see the rows left out,
 * which it could not see eagerly (the caller may have no right to read the
 * input; the sub-query reads it as the migration's owner).  Leakproof
 * operators, the ones index lookups use, are still pushed down.
 */
bool
lf_mapping_filters(LfMapping *m)
{
	return m->query->jointree->quals != NULL || m->query->havingQual != NULL ||
		m->kind == LF_MAP_JOIN;
}

/*
 * Is rti a plain member of q's FROM list (no outer join above it), under a
 * WHERE clause?
 */
static bool
filtered_member(Query *q, int rti)
{
	ListCell   *lc;

	if (q->jointree == NULL || q->jointree->quals == NULL)
		return false;
	foreach(lc, q->jointree->fromlist)
		if (IsA(lfirst(lc), RangeTblRef) && ((RangeTblRef *) lfirst(lc))->rtindex == rti)
			return true;
	return false;
}

/*
 * The WHERE conjuncts of level q on occurrence rti alone, where rti is a
 * plain member of the FROM list (no outer join above it): they restrict its
 * rows, in any branch.
 */
List *
lf_own_conjuncts(Query *q, int rti)
{
	List	   *result = NIL;
	ListCell   *lc;

	if (!filtered_member(q, rti))
		return NIL;
	foreach(lc, make_ands_implicit((Expr *) q->jointree->quals))
	{
		Node	   *c = lfirst(lc);
		Relids		rels = pull_varnos_of_level(NULL, c, 0);

		if (bms_membership(rels) == BMS_SINGLETON && bms_is_member(rti, rels) &&
			!contain_volatile_functions(c) && !checkExprHasSubLink(c) &&
			!lf_has_outer_refs(c))
			result = lappend(result, c);
	}
	return result;
}

/*
 * Replace occurrence rti of a migrating table by its mapping m.  The
 * original entry is kept at the end of the range table, outside the join
 * tree, so the executor still checks the caller's privileges on the table
 * exactly as the statement itself will.
 */
static void
replace_with_map(Query *q, int rti, LfMapping *m)
{
	RangeTblEntry *orig = rt_fetch(rti, q->rtable);
	RangeTblEntry *perm = copyObject(orig);
	RangeTblEntry *map = make_map_rte(m, orig);
	Node	   *gate = m->unmigrated ? lf_live_pinned_gate(m, lf_own_conjuncts(q, rti), rti) : NULL;

	perm->inFromCl = false;
	perm->securityQuals = NIL;
	q->rtable = lappend(q->rtable, perm);
	/* a group the statement pins: skip its rows if it is migrated (live.c) */
	if (gate)
		lf_live_pin(map->subquery, m, gate);
	list_nth_cell(q->rtable, rti - 1)->ptr_value = map;
}

static Var *
ctid_var(int rti, LfMapping *m)
{
	return makeVar(rti, m->natts + 1, TIDOID, -1, InvalidOid, 0);
}

static void
make_select(Query *q, Var *ctid)
{
	q->commandType = CMD_SELECT;
	q->querySource = QSRC_ORIGINAL;
	q->canSetTag = true;
	q->utilityStmt = NULL;
	q->resultRelation = 0;
	q->hasAggs = q->hasWindowFuncs = q->hasTargetSRFs = false;
	q->hasDistinctOn = q->hasForUpdate = false;
	q->groupClause = q->groupingSets = q->windowClause = NIL;
	q->distinctClause = q->sortClause = NIL;
	q->groupDistinct = false;
	q->havingQual = NULL;
	q->limitCount = q->limitOffset = NULL;
	q->limitOption = LIMIT_OPTION_DEFAULT;
	q->rowMarks = NIL;
	q->returningList = NIL;
	q->onConflict = NULL;
	q->withCheckOptions = NIL;
	q->mergeActionList = NIL;
	q->mergeUseOuterJoin = false;
	q->constraintDeps = NIL;
	q->targetList = list_make1(makeTargetEntry((Expr *) ctid, 1, pstrdup("lf_ctid"), false));
}

/* What EXPLAIN adds for the rows of a group or join mapping: their units. */
static const char *
unit_desc(Oid input)
{
	LfMigration *mig = lf_migration_by_input(input);
	LfMapping  *m = mig ? lf_unit_mapping(mig, input) : NULL;

	if (m == NULL || m->kind == LF_MAP_ROWS)
		return "";
	return m->kind == LF_MAP_GROUPS ? ", whole groups" : ", whole join keys";
}

/*
 * Relevance query q, which finds rows of input `input` of mapping m, as an
 * item (an input tracked in place may be read by several GROUP BY
 * mappings, each migrating its own groups: the item names m).  pinned:
 * where q finds rows of one group of live mapping m at most, the key values
 * of that group (LF_ITEM_PINNED), or NIL.
 */
static void
add_input_item(RelCtx *cx, Query *q, LfMapping *m, Oid input, const char *target,
			   const char *how, LfItemKind kind, List *pinned)
{
	LfMigration *mig;
	LfMapping  *carrier;
	ListCell   *lc;

	/*
	 * Normally locked already by lf_planner; gone means completed.  A join's
	 * relevance query reads its other input too, which the planner opens
	 * without a lock: lock every input of the migration, or a completion
	 * could drop one under the planner (a statement on the parent of a new
	 * table's foreign key names no new table, so lf_planner locked none).
	 */
	if (!lf_lock_input_if_exists(input, AccessShareLock))
		return;
	mig = lf_migration_by_input(input);
	if (mig && list_length(mig->inputs) > 1)
		foreach(lc, mig->inputs)
			if (!lf_lock_input_if_exists(lfirst_oid(lc), AccessShareLock))
				return;
	if (mig)
		foreach(lc, mig->live_keys)
			if (!lf_lock_input_if_exists(lfirst_oid(lc), AccessShareLock))
				return;
	cx->queries = lappend(cx->queries, q);
	cx->inputs = lappend_oid(cx->inputs, input);
	cx->kinds = lappend_int(cx->kinds, kind);
	carrier = mig ? lf_keys_carrier(mig, m) : NULL;
	cx->mappings = lappend_int(cx->mappings, carrier ? carrier->id : 0);
	cx->pinned = lappend(cx->pinned, carrier == m ? pinned : NIL);
	cx->descs = lappend(cx->descs,
						psprintf("%s from %s (%s%s)", target, lf_relation_name(input), how,
								 unit_desc(input)));
}

/* An item of q, which finds rows of m's input (add_input_item) */
static void
add_pinned_item(RelCtx *cx, Query *q, LfMapping *m, const char *target, const char *how,
				LfItemKind kind, List *pinned)
{
	add_input_item(cx, q, m, m->input, target, how, kind, pinned);
}

/* An item whose query may find rows of any group (add_pinned_item) */
static void
add_item(RelCtx *cx, Query *q, LfMapping *m, const char *target, const char *how,
		 LfItemKind kind)
{
	add_pinned_item(cx, q, m, target, how, kind, NIL);
}

/* SELECT lf_ctid FROM <mapping> [WHERE quals over rtindex 1] */
static Query *
single_table_query(LfMapping *m, RangeTblEntry *orig, Node *quals)
{
	Query	   *q = makeNode(Query);
	RangeTblEntry *perm = copyObject(orig);
	RangeTblRef *rtr = makeNode(RangeTblRef);

	perm->inFromCl = false;
	perm->securityQuals = NIL;
	q->rtable = list_make2(make_map_rte(m, orig), perm);
	rtr->rtindex = 1;
	q->jointree = makeFromExpr(list_make1(rtr), quals);
	make_select(q, ctid_var(1, m));
	return q;
}

/*
 * A range table entry for a target the statement does not name: what
 * make_map_rte needs (its column names).  requiredPerms as given.
 */
static RangeTblEntry *
target_rte(Oid target, AclMode perms)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	Relation	rel = table_open(target, AccessShareLock);
	int			i;

	rte->rtekind = RTE_RELATION;
	rte->relid = target;
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = AccessShareLock;
	rte->requiredPerms = perms;
	rte->eref = makeAlias(pstrdup(RelationGetRelationName(rel)), NIL);
	for (i = 0; i < RelationGetNumberOfAttributes(rel); i++)
		rte->eref->colnames = lappend(rte->eref->colnames,
									  makeString(pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel), i)->attname))));
	table_close(rel, AccessShareLock);
	return rte;
}

/*
 * Every unmigrated row of target.  orig: the statement's entry for it, or
 * NULL (then the caller's SELECT privilege is checked, as a read of the
 * table would).
 */
static void
whole_table(RelCtx *cx, Oid target, RangeTblEntry *orig, LfItemKind kind)
{
	ListCell   *lc;

	if (orig == NULL)
		orig = target_rte(target, ACL_SELECT);
	foreach(lc, lf_mappings_for_target(target))
	{
		LfMapping  *m = lfirst(lc);

		add_item(cx, single_table_query(m, orig, NULL), m,
				 get_rel_name(target), "whole table", kind);
	}
}

/* ---------------------------------------------------------------------
 * Join tree surgery for the statement-level relevance query
 * ---------------------------------------------------------------------
 */
static Node *
filter_conjuncts(Node *quals, Relids drop_refs)
{
	List	   *kept = NIL;
	ListCell   *lc;

	if (quals == NULL)
		return NULL;
	foreach(lc, make_ands_implicit((Expr *) quals))
	{
		Node	   *c = lfirst(lc);

		if (contain_volatile_functions(c))
			continue;
		if (drop_refs && bms_overlap(pull_varnos_of_level(NULL, c, 0), drop_refs))
			continue;
		kept = lappend(kept, c);
	}
	return kept ? (Node *) make_ands_explicit(kept) : NULL;
}

/*
 * Make the occurrence `o` inner-joined where an outer join made it
 * nullable, and drop the qualifications that test the nullable side of an
 * outer join above it.  Returns the rels below jt; *nullable gets the rels
 * made nullable by outer joins within jt.  *ok is cleared where a FULL join
 * contains o.
 */
static Relids
fix_jointree(Query *q, Node *jt, int o, Relids *nullable, bool *ok)
{
	*nullable = NULL;
	if (jt == NULL)
		return NULL;
	if (IsA(jt, RangeTblRef))
		return bms_make_singleton(((RangeTblRef *) jt)->rtindex);
	if (IsA(jt, FromExpr))
	{
		FromExpr   *f = (FromExpr *) jt;
		Relids		rels = NULL;
		ListCell   *lc;

		foreach(lc, f->fromlist)
		{
			Relids		n;

			rels = bms_add_members(rels, fix_jointree(q, lfirst(lc), o, &n, ok));
			*nullable = bms_add_members(*nullable, n);
		}
		f->quals = filter_conjuncts(f->quals, *nullable);
		return rels;
	}
	if (IsA(jt, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) jt;
		Relids		nl,
					nr;
		Relids		l = fix_jointree(q, j->larg, o, &nl, ok);
		Relids		r = fix_jointree(q, j->rarg, o, &nr, ok);
		Relids		below = bms_union(nl, nr);
		JoinType	jtype = j->jointype;

		j->quals = filter_conjuncts(j->quals, below);
		*nullable = below;
		switch (jtype)
		{
			case JOIN_INNER:
				break;
			case JOIN_LEFT:
				*nullable = bms_add_members(*nullable, r);
				if (bms_is_member(o, r))
					j->jointype = JOIN_INNER;
				break;
			case JOIN_RIGHT:
				*nullable = bms_add_members(*nullable, l);
				if (bms_is_member(o, l))
					j->jointype = JOIN_INNER;
				break;
			default:			/* FULL */
				*nullable = bms_add_members(*nullable, bms_union(l, r));
				if (bms_is_member(o, l) || bms_is_member(o, r))
					*ok = false;
				break;
		}
		if (j->rtindex)
		{
			RangeTblEntry *jrte = rt_fetch(j->rtindex, q->rtable);

			jrte->jointype = j->jointype;
			if (bms_overlap(*nullable, bms_union(l, r)) && jtype != JOIN_INNER)
				*nullable = bms_add_member(*nullable, j->rtindex);
		}
		l = bms_union(l, r);
		if (j->rtindex)
			l = bms_add_member(l, j->rtindex);
		return l;
	}
	elog(ERROR, "unrecognized join tree node: %d", (int) nodeTag(jt));
	return NULL;
}

/* Is occurrence o on the nullable side of an outer join of q? */
static bool
is_nullable(Query *q, int o)
{
	Query	   *copy = copyObject(q);
	Relids		nullable;
	bool		ok = true;

	(void) fix_jointree(copy, (Node *) copy->jointree, 0, &nullable, &ok);
	return bms_is_member(o, nullable);
}

/* ---------------------------------------------------------------------
 * Relevance of one occurrence
 * ---------------------------------------------------------------------
 */
/*
 * The statement's own conditions on occurrence o, over rtindex 1: the
 * conjuncts of its WHERE that read o alone (none where an outer join makes
 * o nullable), without volatile functions, sub-queries or outer references.
 */
static List *
own_quals(Query *level, int o)
{
	List	   *kept = NIL;
	ListCell   *lc;

	if (level->jointree && level->jointree->quals && !is_nullable(level, o))
	{
		foreach(lc, make_ands_implicit((Expr *) level->jointree->quals))
		{
			Node	   *c = lfirst(lc);
			Relids		rels = pull_varnos_of_level(NULL, c, 0);

			if (bms_num_members(rels) != 1 || !bms_is_member(o, rels))
				continue;
			if (contain_volatile_functions(c) || checkExprHasSubLink(c) ||
				has_outer_or_bad_refs(c, o))
				continue;
			c = copyObject(c);
			ChangeVarNodes(c, o, 1, 0);
			kept = lappend(kept, c);
		}
	}
	return kept;
}

/* Relevance of occurrence o through mappings maps, by its own conditions */
static void
local_relevance(Query *level, int o, List *maps, RelCtx *cx, const char *target)
{
	RangeTblEntry *orig = rt_fetch(o, level->rtable);
	List	   *kept = own_quals(level, o);
	ListCell   *lc;

	foreach(lc, maps)
	{
		LfMapping  *m = lfirst(lc);

		add_item(cx, single_table_query(m, orig,
										kept ? (Node *) make_ands_explicit(copyObject(kept)) : NULL),
				 m, target, kept ? "own filter" : "whole table", LF_NEEDS_ROWS);
	}
}

/* input_conds' walk: Vars of the new table (varno) to input rti's columns */
typedef struct InputVars
{
	LfMapping  *m;
	int			varno;
	int			rti;
	bool		ok;
} InputVars;

static Node *
input_vars_mutator(Node *node, InputVars *iv)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;
		TargetEntry *tle = v->varno == iv->varno && v->varlevelsup == 0 && v->varattno > 0 &&
			v->varattno <= iv->m->natts ? get_tle_by_resno(iv->m->query->targetList, v->varattno) : NULL;
		Var		   *in = tle ? (Var *) tle->expr : NULL;

		if (in == NULL || !IsA(in, Var) || in->varno != iv->rti || in->varlevelsup != 0 ||
			in->vartype != v->vartype)
		{
			iv->ok = false;
			return node;
		}
		return (Node *) makeVar(1, in->varattno, in->vartype, in->vartypmod, in->varcollid, 0);
	}
	return expression_tree_mutator(node, input_vars_mutator, iv);
}

/*
 * The conditions of conds (on the new table: Vars varno) that read only
 * columns copied unchanged from input j of m, as conditions on that input
 * (rtindex 1), and pass them to no leaky function.  A row of the new table
 * computed from a row of the input has those columns' values: the row
 * meets the condition where the input's row does.
 */
static List *
input_conds(LfMapping *m, int j, List *conds, int varno)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, conds)
	{
		InputVars	iv = {m, varno, m->rtis[j], true};
		Node	   *c;

		if (contain_leaked_vars(lfirst(lc)))
			continue;
		c = input_vars_mutator(copyObject(lfirst(lc)), &iv);
		if (iv.ok)
			result = lappend(result, c);
	}
	return result;
}

/*
 * SELECT ctid FROM input j of m WHERE the conditions conds (Vars varno) that
 * input_conds carries over: those pin_unit found the look-up by among them,
 * so the planner's plan is that index's scan.  orig: the statement's entry
 * for the new table, whose privileges the executor checks as the
 * statement's own; the input's entry is the mapping's, checked as the
 * mapping's is.  NULL if none carries over (never expected).
 */
static Query *
unit_key_query(LfMapping *m, int j, RangeTblEntry *orig, List *conds, int varno)
{
	List	   *quals = input_conds(m, j, conds, varno);
	Query	   *q;
	RangeTblEntry *from;
	RangeTblEntry *perm;
	RangeTblRef *rtr;

	if (quals == NIL)
		return NULL;
	q = makeNode(Query);
	from = copyObject(rt_fetch(m->rtis[j], m->query->rtable));
	perm = copyObject(orig);
	rtr = makeNode(RangeTblRef);
	from->inFromCl = true;
	perm->inFromCl = false;
	perm->securityQuals = NIL;
	q->rtable = list_make2(from, perm);
	rtr->rtindex = 1;
	q->jointree = makeFromExpr(list_make1(rtr), (Node *) make_ands_explicit(quals));
	make_select(q, makeVar(1, SelfItemPointerAttributeNumber, TIDOID, -1, InvalidOid, 0));
	return q;
}

/*
 * The relevance query of the join unit of mapping m that conds (conditions
 * on the new table, whose Vars varno read its columns) pin, or NULL:
 * lf_retired_pin's look-up, an index of input j whose leading columns conds
 * give, each copied unchanged into the new table.  Every row of the new
 * table that meets conds was computed from rows of that input with those
 * values (a row NULL-extended by an outer join has NULL there, which no
 * strict equality meets), so the input's rows with them, whose units
 * migrate whole, are enough (unit_key_query).  The look-up sees rows the
 * mapping leaves out: only with operators that are leakproof.  *input: the
 * input whose rows it finds.
 */
static Query *
pin_unit(LfMapping *m, List *conds, int varno, RangeTblEntry *orig, Oid *input)
{
	LfMigration *mig = m->kind == LF_MAP_JOIN ? lf_migration_by_input(m->input) : NULL;
	List	   *values;
	List	   *probe = mig ? lf_retired_pin(mig, m, conds, varno, &values) : NIL;
	ListCell   *lc;

	if (probe == NIL)
		return NULL;
	foreach(lc, (List *) lsecond(probe))
	{
		RegProcedure f = get_opcode(lfirst_oid(lc));

		if (!func_strict(f) || !get_func_leakproof(f))
			return NULL;
	}
	*input = (Oid) intVal(lfourth(probe));
	return unit_key_query(m, *input == m->inputs[0] ? 0 : 1, orig, conds, varno);
}

/*
 * Occurrence o's join units that its own conditions pin (pin_unit): the
 * relevance query is one look-up of an input's index, which probe.c runs
 * without the executor, where the statement's own query over the mapping
 * starts a plan of the join (about 80k instructions a statement, most of
 * the relevance cost on TPC-C's join).  It may find more rows than the
 * statement needs (its conditions that input_conds cannot carry over, on
 * the other input's columns for one, are left out), never fewer.  Not
 * where the new table has row security.  Returns the mappings of o it did
 * not pin.
 */
static List *
pinned_units(Query *level, int o, RelCtx *cx, const char *target)
{
	RangeTblEntry *orig = rt_fetch(o, level->rtable);
	List	   *maps = lf_mappings_for_target(orig->relid);
	List	   *rest = NIL;
	List	   *conds;
	bool		joins = false;
	ListCell   *lc;

	foreach(lc, maps)
		joins |= ((LfMapping *) lfirst(lc))->kind == LF_MAP_JOIN;
	if (!joins || orig->securityQuals != NIL || level->hasModifyingCTE ||
		(conds = own_quals(level, o)) == NIL)
		return maps;
	foreach(lc, maps)
	{
		LfMapping  *m = lfirst(lc);
		Oid			input;
		Query	   *q = pin_unit(m, conds, 1, orig, &input);

		if (q)
			add_input_item(cx, q, m, input, target, "key", LF_NEEDS_ROWS, NIL);
		else
			rest = lappend(rest, m);
	}
	return rest;
}

static void
statement_relevance(Query *level, int o, List *occ, List *maps, RelCtx *cx)
{
	RangeTblEntry *orig = rt_fetch(o, level->rtable);
	const char *target = get_rel_name(orig->relid);
	List	   *others = NIL;
	int			choices[8];
	int			counter[8];
	int			nothers = 0;
	int			combos = 1;
	ListCell   *lc;
	bool		ok = true;
	List	   *built = NIL;
	List	   *built_maps = NIL;

	if (has_outer_or_bad_refs((Node *) level->jointree, o) || level->hasModifyingCTE ||
		(level->commandType != CMD_SELECT && level->commandType != CMD_UPDATE &&
		 level->commandType != CMD_DELETE))
		ok = false;
	foreach(lc, occ)
	{
		int			x = lfirst_int(lc);

		if (x == o)
			continue;

		/*
		 * Another new table's occurrence is swapped for its mapping too: a
		 * system column or whole row of it has no counterpart there (ctid
		 * failed to plan; a whole row got the mapping's extra columns).
		 */
		if (nothers == 8 || has_outer_or_bad_refs((Node *) level->jointree, x))
		{
			ok = false;
			break;
		}
		others = lappend_int(others, x);
		choices[nothers] = 1 + list_length(lf_mappings_for_target(rt_fetch(x, level->rtable)->relid));
		combos *= choices[nothers];
		nothers++;
	}
	if (combos * list_length(maps) > MAX_COMBOS)
		ok = false;

	if (ok)
	{
		foreach(lc, maps)
		{
			LfMapping  *m = lfirst(lc);
			int			c;

			memset(counter, 0, sizeof(counter));
			for (c = 0; c < combos && ok; c++)
			{
				Query	   *q = copyObject(level);
				Relids		nullable;
				int			k;
				int			rest = c;

				for (k = 0; k < nothers; k++)
				{
					counter[k] = rest % choices[k];
					rest /= choices[k];
				}
				make_select(q, ctid_var(o, m));
				(void) fix_jointree(q, (Node *) q->jointree, o, &nullable, &ok);
				if (!ok)
					break;
				if (contain_volatile_functions((Node *) q))
				{
					ok = false;
					break;
				}
				replace_with_map(q, o, m);
				for (k = 0; k < nothers; k++)
				{
					int			x = list_nth_int(others, k);

					if (counter[k] > 0)
						replace_with_map(q, x,
										 list_nth(lf_mappings_for_target(rt_fetch(x, level->rtable)->relid),
												  counter[k] - 1));
				}
				built = lappend(built, q);
				built_maps = lappend(built_maps, m);
			}
		}
	}
	if (!ok)
	{
		local_relevance(level, o, maps, cx, target);
		return;
	}
	{
		ListCell   *lc2;

		forboth(lc, built, lc2, built_maps)
			add_item(cx, lfirst(lc), lfirst(lc2), target, "statement", LF_NEEDS_ROWS);
	}
}

static bool
multiexpr_walker(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param) && ((Param *) node)->paramkind == PARAM_MULTIEXPR)
		return true;
	return expression_tree_walker(node, multiexpr_walker, cx);
}

static bool
contain_multiexpr(Node *node)
{
	return multiexpr_walker(node, NULL);
}

/*
 * Does an UPDATE's target list (tlist: an UPDATE's, or an upsert's DO
 * UPDATE SET) write a column that index idx reads: a key column, or one
 * its expressions or its predicate use?  If not, no updated row gets a new
 * entry in it, so none can conflict.
 */
static bool
writes_index_columns(List *tlist, Relation idx)
{
	Bitmapset  *cols = NULL;
	Form_pg_index ind = idx->rd_index;
	ListCell   *lc;

	for (int k = 0; k < ind->indnatts; k++)
		if (ind->indkey.values[k] != 0)	/* 0: an expression, below */
			cols = bms_add_member(cols, ind->indkey.values[k] - FirstLowInvalidHeapAttributeNumber);
	pull_varattnos((Node *) RelationGetIndexExpressions(idx), 1, &cols);
	pull_varattnos((Node *) RelationGetIndexPredicate(idx), 1, &cols);
	/* a whole-row Var (0) in an expression reads every column */
	if (bms_is_member(InvalidAttrNumber - FirstLowInvalidHeapAttributeNumber, cols))
		return true;
	foreach(lc, tlist)
	{
		TargetEntry *tle = lfirst(lc);

		if (!tle->resjunk &&
			bms_is_member(tle->resno - FirstLowInvalidHeapAttributeNumber, cols))
			return true;
	}
	return false;
}

static Expr *
is_null(Expr *arg)
{
	NullTest   *nt = makeNode(NullTest);

	nt->arg = arg;
	nt->nulltesttype = IS_NULL;
	nt->location = -1;
	return (Expr *) nt;
}

/*
 * The conflict condition of one unique index of the result relation r:
 * the AND of "mapping key column = key written" (mapping at range table
 * index mrti), or NIL if the statement can add no entry to the index (an
 * UPDATE that writes none of the columns it reads) or writes a NULL key
 * into an index whose NULLs are distinct (never conflicts).  A partial
 * index's predicate is left out: rows outside it are migrated for nothing,
 * never missed.  NULLS NOT DISTINCT: a NULL key column also matches NULL.
 * *unknown: a key cannot be computed before the statement runs (volatile,
 * correlated, exclusion or expression indexes).
 */
static List *
index_conflict(Query *level, int r, Relation rel, Relation idx, int mrti, bool *unknown)
{
	Form_pg_index ind = idx->rd_index;
	bool		is_insert = (level->commandType == CMD_INSERT);
	List	   *conj = NIL;
	int			k;

	if (!ind->indisunique && !ind->indisexclusion)
		return NIL;
	if (!is_insert && !writes_index_columns(level->targetList, idx))
		return NIL;
	/*
	 * An upsert's DO UPDATE SET that writes a column the index reads gives
	 * the row that met the conflict a key that may depend on it (EXCLUDED,
	 * or the row's own columns): not computable beforehand.
	 */
	if (is_insert && level->onConflict && level->onConflict->action == ONCONFLICT_UPDATE &&
		writes_index_columns(level->onConflict->onConflictSet, idx))
	{
		*unknown = true;
		return NIL;
	}
	if (ind->indisexclusion ||
		!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL))
	{
		*unknown = true;
		return NIL;
	}
	for (k = 0; k < ind->indnkeyatts; k++)
	{
		AttrNumber	attno = ind->indkey.values[k];
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attno - 1);
		Expr	   *e = NULL;
		Expr	   *col;
		ListCell   *lc;
		Oid			opno;
		Expr	   *clause;

		foreach(lc, level->targetList)
		{
			TargetEntry *tle = lfirst(lc);

			if (tle->resno == attno && !tle->resjunk)
				e = copyObject(tle->expr);
		}
		if (e == NULL)
		{
			if (is_insert && !ind->indnullsnotdistinct)
				return NIL;		/* NULL: never conflicts */
			e = is_insert ?
				(Expr *) makeNullConst(att->atttypid, att->atttypmod, att->attcollation) :
				(Expr *) makeVar(r, attno, att->atttypid, att->atttypmod, att->attcollation, 0);
		}
		opno = get_opfamily_member(idx->rd_opfamily[k], idx->rd_opcintype[k],
								   idx->rd_opcintype[k], BTEqualStrategyNumber);
		if (contain_volatile_functions((Node *) e) || has_outer_or_bad_refs((Node *) e, 0) ||
			contain_multiexpr((Node *) e) || !OidIsValid(opno))
		{
			*unknown = true;	/* a key we cannot compute beforehand */
			return NIL;
		}
		col = (Expr *) makeVar(mrti, attno, att->atttypid, att->atttypmod, att->attcollation, 0);
		clause = make_opclause(opno, BOOLOID, false, col, e, InvalidOid, idx->rd_indcollation[k]);
		set_opfuncid((OpExpr *) clause);
		if (ind->indnullsnotdistinct)
			clause = make_orclause(list_make2(clause,
											  make_andclause(list_make2(is_null(copyObject(col)),
																		is_null(copyObject(e))))));
		conj = lappend(conj, clause);
	}
	return conj;
}

/*
 * Rows whose unique keys could conflict with the keys an INSERT writes, or
 * an UPDATE writes into a unique column.  r is the result relation.
 */
static void
key_relevance(Query *level, int r, RelCtx *cx)
{
	RangeTblEntry *orig = rt_fetch(r, level->rtable);
	Relation	rel = table_open(orig->relid, AccessShareLock);
	int			mrti = list_length(level->rtable) + 1;
	List	   *disjuncts = NIL;
	List	   *only = NIL;		/* the conjuncts of the one disjunct */
	bool		unknown = false;
	ListCell   *lc;

	foreach(lc, RelationGetIndexList(rel))
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		List	   *conj = index_conflict(level, r, rel, idx, mrti, &unknown);

		index_close(idx, AccessShareLock);
		if (unknown)
			break;
		if (conj != NIL)
		{
			disjuncts = lappend(disjuncts, make_ands_explicit(conj));
			only = conj;
		}
	}
	table_close(rel, AccessShareLock);

	if (unknown || level->hasModifyingCTE)
	{
		whole_table(cx, orig->relid, orig, LF_NEEDS_KEYS);
		return;
	}
	if (disjuncts == NIL)
		return;
	foreach(lc, lf_mappings_for_target(orig->relid))
	{
		LfMapping  *m = lfirst(lc);
		Query	   *q;
		RangeTblRef *rtr = makeNode(RangeTblRef);
		Node	   *keys = (Node *) (list_length(disjuncts) == 1 ? linitial(disjuncts)
									 : make_orclause(copyObject(disjuncts)));
		Node	   *where;
		Oid			input;

		/* one unique key, pinning a join unit: a look-up (pinned_units) */
		q = list_length(disjuncts) == 1 && orig->securityQuals == NIL
			? pin_unit(m, only, mrti, orig, &input) : NULL;
		if (q)
		{
			add_input_item(cx, q, m, input, get_rel_name(orig->relid),
						   "conflicting keys, key", LF_NEEDS_KEYS, NIL);
			continue;
		}
		q = copyObject(level);
		make_select(q, ctid_var(mrti, m));
		q->rtable = lappend(q->rtable, make_map_rte(m, orig));
		rtr->rtindex = mrti;
		if (q->jointree == NULL)
			q->jointree = makeFromExpr(NIL, NULL);
		q->jointree->fromlist = lappend(q->jointree->fromlist, rtr);
		where = filter_conjuncts(q->jointree->quals, NULL);
		q->jointree->quals = where ? (Node *) make_andclause(list_make2(where, copyObject(keys)))
			: copyObject(keys);
		if (contain_volatile_functions((Node *) q))
		{
			whole_table(cx, orig->relid, orig, LF_NEEDS_KEYS);
			return;
		}
		/* one unique key, a live mapping's group key: one group at most */
		add_pinned_item(cx, q, m, get_rel_name(orig->relid), "conflicting keys", LF_NEEDS_KEYS,
						list_length(disjuncts) == 1 ? lf_live_pinned_values(m, only, mrti) : NIL);
	}
}

/* ---------------------------------------------------------------------
 * Rows that reference the rows a statement deletes or updates
 * ---------------------------------------------------------------------
 */

/* Does the level assign one of the attributes keys[0..n) of its result relation? */
static bool
assigns_any(List *targetList, const AttrNumber *keys, int n)
{
	ListCell   *lc;
	int			i;

	foreach(lc, targetList)
	{
		TargetEntry *tle = lfirst(lc);

		for (i = 0; i < n && !tle->resjunk; i++)
			if (tle->resno == keys[i])
				return true;
	}
	return false;
}

/*
 * The rows of fk's child that reference the rows of the result relation r
 * that level deletes or updates: SELECT the mapping's ctids FROM the
 * level's own FROM, joined with the mapping on the key, WHERE the level's
 * conjuncts; whole, or where that cannot be built: the whole child table
 * (level is then not read).  No privilege
 * of the caller's is checked on the child: the key's own statements run as
 * the table's owner.
 */
static void
referencing_rows(Query *level, int r, LfForeignKey *fk, bool whole, RelCtx *cx)
{
	RangeTblEntry *child = target_rte(fk->child, 0);
	Oid			parent = whole ? InvalidOid : rt_fetch(r, level->rtable)->relid;
	ListCell   *lc;

	cx->fkeys = list_append_unique_ptr(cx->fkeys, fk);

	foreach(lc, lf_mappings_for_target(fk->child))
	{
		LfMapping  *m = lfirst(lc);
		Query	   *q;
		int			mrti;
		RangeTblRef *rtr = makeNode(RangeTblRef);
		List	   *keys = NIL;
		Node	   *where;
		int			i;

		if (whole)
		{
			q = makeNode(Query);
			q->rtable = list_make1(make_map_rte(m, child));
			rtr->rtindex = 1;
			q->jointree = makeFromExpr(list_make1(rtr), NULL);
			make_select(q, ctid_var(1, m));
			add_item(cx, q, m, get_rel_name(fk->child), "whole table", LF_NEEDS_REFERENCING);
			continue;
		}
		q = copyObject(level);
		mrti = list_length(q->rtable) + 1;
		make_select(q, ctid_var(mrti, m));
		q->rtable = lappend(q->rtable, make_map_rte(m, child));
		rtr->rtindex = mrti;
		if (q->jointree == NULL)
			q->jointree = makeFromExpr(NIL, NULL);
		q->jointree->fromlist = lappend(q->jointree->fromlist, rtr);
		for (i = 0; i < fk->nkeys; i++)
		{
			Oid			ptype,
						ctype,
						pcoll,
						ccoll;
			int32		ptypmod,
						ctypmod;
			Expr	   *clause;

			get_atttypetypmodcoll(parent, fk->parent_keys[i], &ptype, &ptypmod, &pcoll);
			get_atttypetypmodcoll(fk->child, fk->child_keys[i], &ctype, &ctypmod, &ccoll);
			clause = make_opclause(fk->eqops[i], BOOLOID, false,
								   (Expr *) makeVar(r, fk->parent_keys[i], ptype, ptypmod, pcoll, 0),
								   (Expr *) makeVar(mrti, fk->child_keys[i], ctype, ctypmod, ccoll, 0),
								   InvalidOid, pcoll);
			set_opfuncid((OpExpr *) clause);
			keys = lappend(keys, clause);
		}
		where = filter_conjuncts(q->jointree->quals, NULL);
		if (where)
			keys = lcons(where, keys);
		q->jointree->quals = (Node *) make_ands_explicit(keys);
		if (contain_volatile_functions((Node *) q))
		{
			referencing_rows(level, r, fk, true, cx);
			return;
		}
		add_item(cx, q, m, get_rel_name(fk->child), "referencing rows", LF_NEEDS_REFERENCING);
	}
}

/*
 * A DELETE, or an UPDATE of referenced columns, of rows that rows of new
 * tables reference through a foreign key: those rows are migrated first,
 * so that the key's action (CASCADE, SET NULL, SET DEFAULT) or check (NO
 * ACTION, RESTRICT) finds them in the new table, as eagerly.  Left to the
 * key's own statement, they would be migrated after the parent row is
 * gone, and fail their own foreign-key check.  A key's statements are
 * statements too: a cascade one level down migrates the next level.
 */
static void
referencing_relevance(Query *level, RelCtx *cx)
{
	int			r = level->resultRelation;
	bool		upsert = level->commandType == CMD_INSERT && level->onConflict &&
		level->onConflict->action == ONCONFLICT_UPDATE;
	ListCell   *lc;

	if (r <= 0 || rt_fetch(r, level->rtable)->rtekind != RTE_RELATION ||
		(level->commandType != CMD_DELETE && level->commandType != CMD_UPDATE &&
		 level->commandType != CMD_MERGE && !upsert))
		return;
	foreach(lc, lf_fkeys_referencing(rt_fetch(r, level->rtable)->relid))
	{
		LfForeignKey *fk = lfirst(lc);

		if (level->commandType == CMD_UPDATE &&
			!assigns_any(level->targetList, fk->parent_keys, fk->nkeys))
			continue;
		if (upsert && !assigns_any(level->onConflict->onConflictSet, fk->parent_keys, fk->nkeys))
			continue;
		referencing_rows(level, r, fk,
						 level->commandType == CMD_MERGE || upsert || level->hasModifyingCTE ||
						 has_outer_or_bad_refs((Node *) level, 0),
						 cx);
	}
}

/* ---------------------------------------------------------------------
 * Walking all query levels
 * ---------------------------------------------------------------------
 */
static bool
nested_walker(Node *node, RelCtx *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		collect_level((Query *) node, cx);
		return false;
	}
	return expression_tree_walker(node, nested_walker, cx);
}

static void
collect_level(Query *level, RelCtx *cx)
{
	List	   *occ = NIL;
	ListCell   *lc;
	int			rti = 0;

	foreach(lc, level->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		rti++;
		if (rte->rtekind == RTE_RELATION && lf_is_target(rte->relid) &&
			(!OidIsValid(cx->only) || rte->relid == cx->only))
		{
			cx->found = list_append_unique_oid(cx->found, rte->relid);
			occ = lappend_int(occ, rti);
		}
	}

	foreach(lc, occ)
	{
		int			o = lfirst_int(lc);
		RangeTblEntry *rte = rt_fetch(o, level->rtable);

		if (level->commandType == CMD_INSERT)
		{
			if (o == level->resultRelation)
				key_relevance(level, o, cx);
			/* other entries of an INSERT level (EXCLUDED) are not read */
		}
		else if (level->commandType == CMD_MERGE)
			whole_table(cx, rte->relid, rte, LF_NEEDS_KEYS);
		else
		{
			bool		correlated = has_outer_or_bad_refs((Node *) level, 0);
			const char *target = get_rel_name(rte->relid);
			List	   *maps = pinned_units(level, o, cx, target);

			if (maps == NIL)
				;
			else if (correlated)
				local_relevance(level, o, maps, cx, target);
			else
				statement_relevance(level, o, occ, maps, cx);
			if (level->commandType == CMD_UPDATE && o == level->resultRelation)
				key_relevance(level, o, cx);
		}
	}

	referencing_relevance(level, cx);
	(void) query_tree_walker(level, nested_walker, cx, 0);
}

/* ---------------------------------------------------------------------
 * Integer casts: comparisons that can use the input's index
 * ---------------------------------------------------------------------
 */
typedef struct RawCtx
{
	Query	   *q;
} RawCtx;

/* The raw column standing for v, if v is an integer-cast mapping column. */
static Var *
raw_var_for(Query *q, Var *v)
{
	RangeTblEntry *rte;
	ListCell   *lc;
	char		name[32];

	if (v->varlevelsup != 0 || v->varno <= 0 || v->varno > list_length(q->rtable))
		return NULL;
	rte = rt_fetch(v->varno, q->rtable);
	if (rte->rtekind != RTE_SUBQUERY || rte->subquery == NULL)
		return NULL;
	snprintf(name, sizeof(name), "lf_raw_%d", v->varattno);
	foreach(lc, rte->subquery->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resname && strcmp(tle->resname, name) == 0)
			return makeVar(v->varno, tle->resno, exprType((Node *) tle->expr),
						   exprTypmod((Node *) tle->expr), InvalidOid, 0);
	}
	return NULL;
}

/*
 * Rewrite "column op expr", where column is an integer cast of an input
 * column c, into "c op' expr" with op' the operator of the same strategy in
 * integer_ops for c's type.  Integer casts are exact (or fail), so the two
 * are equivalent, and the second can use an index on c.
 */
static Node *
raw_quals_mutator(Node *node, RawCtx *cx)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, OpExpr) && list_length(((OpExpr *) node)->args) == 2)
	{
		OpExpr	   *op = (OpExpr *) node;
		Node	   *l = linitial(op->args);
		Node	   *r = lsecond(op->args);
		int			strategy = get_op_opfamily_strategy(op->opno, INTEGER_BTREE_FAM_OID);
		Var		   *raw = NULL;
		bool		left = false;

		if (strategy != 0)
		{
			if (IsA(l, Var) && (raw = raw_var_for(cx->q, (Var *) l)) != NULL &&
				!bms_is_member(((Var *) l)->varno, pull_varnos_of_level(NULL, r, 0)))
				left = true;
			else if (IsA(r, Var) && (raw = raw_var_for(cx->q, (Var *) r)) != NULL &&
					 !bms_is_member(((Var *) r)->varno, pull_varnos_of_level(NULL, l, 0)))
				left = false;
			else
				raw = NULL;
		}
		if (raw)
		{
			Oid			opno = left
				? get_opfamily_member(INTEGER_BTREE_FAM_OID, raw->vartype, exprType(r), strategy)
				: get_opfamily_member(INTEGER_BTREE_FAM_OID, exprType(l), raw->vartype, strategy);

			if (OidIsValid(opno))
			{
				OpExpr	   *n = (OpExpr *) make_opclause(opno, BOOLOID, false,
														 left ? (Expr *) raw : (Expr *) copyObject(l),
														 left ? (Expr *) copyObject(r) : (Expr *) raw,
														 InvalidOid, InvalidOid);

				set_opfuncid(n);
				return (Node *) n;
			}
		}
	}
	if (IsA(node, ScalarArrayOpExpr))
	{
		ScalarArrayOpExpr *sa = (ScalarArrayOpExpr *) node;
		Node	   *l = linitial(sa->args);
		Node	   *r = lsecond(sa->args);
		int			strategy = get_op_opfamily_strategy(sa->opno, INTEGER_BTREE_FAM_OID);
		Var		   *raw;

		if (strategy != 0 && IsA(l, Var) && (raw = raw_var_for(cx->q, (Var *) l)) != NULL &&
			OidIsValid(get_element_type(exprType(r))))
		{
			Oid			opno = get_opfamily_member(INTEGER_BTREE_FAM_OID, raw->vartype,
												   get_element_type(exprType(r)), strategy);

			if (OidIsValid(opno))
			{
				ScalarArrayOpExpr *n = copyObject(sa);

				n->opno = opno;
				n->opfuncid = get_opcode(opno);
				n->hashfuncid = InvalidOid;
				n->negfuncid = InvalidOid;
				linitial(n->args) = raw;
				return (Node *) n;
			}
		}
	}
	if (IsA(node, Query) || IsA(node, SubLink))
		return node;			/* only this query level */
	return expression_tree_mutator(node, raw_quals_mutator, cx);
}

static void
rewrite_integer_quals(Query *q)
{
	RawCtx		cx = {q};

	q->jointree = (FromExpr *) raw_quals_mutator((Node *) q->jointree, &cx);
}

/* Does the tree reference a query level above its own? */
bool
lf_has_outer_refs(Node *node)
{
	return has_outer_or_bad_refs(node, 0);
}

/* quals over q's mapping RTEs (lf_map_rte), with integer casts rewritten */
Node *
lf_raw_quals(Query *q, Node *quals)
{
	RawCtx		cx = {q};

	return raw_quals_mutator(quals, &cx);
}

RangeTblEntry *
lf_map_rte(LfMapping *m, RangeTblEntry *orig)
{
	return make_map_rte(m, orig);
}

/* ---------------------------------------------------------------------
 * Only the columns a relevance query reads
 * ---------------------------------------------------------------------
 * A mapping that leaves rows out is a security barrier (lf_mapping_filters),
 * which the planner keeps as a sub-query scan.  The planner computes only
 * the columns the query reads (the others become NULL), but the sub-plan's
 * top node still has them all: a tuple descriptor entry and a projection
 * step each, built with every run.  A relevance query reads a few (keys,
 * lf_ctid): the others leave the sub-query, and the query's Vars are
 * renumbered.  (A relevance query of TPC-C's orderline_stock, a join
 * mapping, carried 27 columns and read 3.)
 */
typedef struct ColUse
{
	int			rti;
	int			depth;
	Bitmapset  *used;			/* attnos of rti read */
	bool		whole;			/* a whole-row or system column of rti */
	AttrNumber *map;			/* old attno -> new (renumber_mutator) */
} ColUse;

static bool
col_use_walker(Node *node, ColUse *cu)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;

		if (v->varno == cu->rti && v->varlevelsup == cu->depth)
		{
			if (v->varattno <= 0)
				cu->whole = true;
			else
				cu->used = bms_add_member(cu->used, v->varattno);
		}
		return false;
	}
	if (IsA(node, Query))
	{
		bool		r;

		cu->depth++;
		r = query_tree_walker((Query *) node, col_use_walker, cu, 0);
		cu->depth--;
		return r;
	}
	return expression_tree_walker(node, col_use_walker, cu);
}

static Node *
renumber_mutator(Node *node, ColUse *cu)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var))
	{
		Var		   *v = copyObject((Var *) node);

		if (v->varno == cu->rti && v->varlevelsup == cu->depth)
		{
			Assert(v->varattno > 0 && cu->map[v->varattno] > 0);
			if (v->varnosyn == v->varno && v->varattnosyn == v->varattno)
				v->varattnosyn = cu->map[v->varattno];
			v->varattno = cu->map[v->varattno];
		}
		return (Node *) v;
	}
	if (IsA(node, Query))
	{
		Query	   *r;

		cu->depth++;
		r = query_tree_mutator((Query *) node, renumber_mutator, cu, 0);
		cu->depth--;
		return (Node *) r;
	}
	return expression_tree_mutator(node, renumber_mutator, cu);
}

/*
 * Drop the columns q does not read from its security-barrier sub-query rti.
 * A column stays if the sub-query itself needs it: a grouping or sort key,
 * something volatile, all of them under DISTINCT, a set operation, or a
 * set-returning function (which would change the rows).
 */
static void
narrow_barrier(Query *q, int rti)
{
	Query	   *sub = rt_fetch(rti, q->rtable)->subquery;
	RangeTblEntry *rte;
	ColUse		cu = {rti, 0};
	List	   *tlist = NIL;
	List	   *names = NIL;
	ListCell   *lc,
			   *lcn;
	int			kept = 0;

	if (sub->setOperations || sub->distinctClause || sub->hasTargetSRFs ||
		list_length(rt_fetch(rti, q->rtable)->eref->colnames) != list_length(sub->targetList))
		return;
	(void) query_tree_walker(q, col_use_walker, &cu, 0);
	if (cu.whole)
		return;
	cu.map = palloc0((list_length(sub->targetList) + 1) * sizeof(AttrNumber));
	foreach(lc, sub->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resjunk)
			return;				/* eref->colnames would not match */
		if (tle->ressortgroupref || bms_is_member(tle->resno, cu.used) ||
			contain_volatile_functions((Node *) tle->expr))
			cu.map[tle->resno] = ++kept;
	}
	if (kept == list_length(sub->targetList))
		return;

	(void) query_tree_mutator(q, renumber_mutator, &cu, QTW_DONT_COPY_QUERY);
	rte = rt_fetch(rti, q->rtable);
	forboth(lc, rte->subquery->targetList, lcn, rte->eref->colnames)
	{
		TargetEntry *tle = lfirst(lc);

		if (cu.map[tle->resno] == 0)
			continue;
		tle->resno = cu.map[tle->resno];
		tlist = lappend(tlist, tle);
		names = lappend(names, lfirst(lcn));
	}
	rte->subquery->targetList = tlist;
	rte->eref->colnames = names;
}

/* narrow_barrier on every security-barrier sub-query of q's level */
static void
narrow_barriers(Query *q)
{
	for (int rti = 1; rti <= list_length(q->rtable); rti++)
	{
		RangeTblEntry *rte = rt_fetch(rti, q->rtable);

		if (rte->rtekind == RTE_SUBQUERY && rte->security_barrier)
			narrow_barrier(q, rti);
	}
}

/* ---------------------------------------------------------------------
 * The hook
 * ---------------------------------------------------------------------
 */
/* Does the tree name a table that a foreign key of a new table references? */
static bool
refs_parent_walker(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		return rte->rtekind == RTE_RELATION && lf_fkeys_referencing(rte->relid) != NIL;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, refs_parent_walker, cx,
								 QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, refs_parent_walker, cx);
}

/*
 * A function that is not immutable and not the extension's own (sees_start,
 * group_migrated: their answers only turn from "not migrated" to
 * "migrated"), so it may read another table.
 */
static bool
foreign_mutable_func(Oid funcid, void *cx)
{
	return func_volatile(funcid) != PROVOLATILE_IMMUTABLE &&
		get_func_namespace(funcid) != get_namespace_oid("leapfrog", true);
}

/*
 * Does the relevance query read nothing but its input?  Then the set of rows
 * it returns can only shrink (inputs only lose rows, the mapping is
 * immutable), and once its rows are migrated, running it again would find
 * nothing: the executor skips that confirming round (migrate.c).  1 if so;
 * 2 if, besides, a condition calls a function that is not immutable (WHERE
 * id = f(), f reading another table): under READ COMMITTED each round's
 * snapshot is newer, its value may change, and the statement runs in the
 * last round's snapshot, so the confirming round must run there (a
 * transaction snapshot does not change: lf_item_standalone); 0 otherwise.
 */
static int
standalone(Query *q)
{
	RangeTblRef *rtr;
	RangeTblEntry *rte;

	if (q->hasSubLinks || q->cteList != NIL || q->jointree == NULL ||
		list_length(q->jointree->fromlist) != 1 ||
		!IsA(linitial(q->jointree->fromlist), RangeTblRef))
		return 0;
	rtr = linitial(q->jointree->fromlist);
	rte = rt_fetch(rtr->rtindex, q->rtable);
	/* the mapping, or the retired input itself (unit_key_query) */
	if (rte->rtekind != RTE_SUBQUERY && rte->rtekind != RTE_RELATION)
		return 0;
	return lf_calls_function((Node *) q, foreign_mutable_func, NULL) ? 2 : 1;
}

/*
 * The new tables a plan reads.  The plan's flattened range table also holds
 * the tables of inlined SQL functions.  (Not relationOids: it also lists
 * regclass constants.)
 */
static List *
targets_in_plan(PlannedStmt *stmt)
{
	List	   *targets = NIL;
	ListCell   *lc;

	foreach(lc, stmt->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		if (rte->rtekind == RTE_RELATION && lf_is_target(rte->relid))
			targets = list_append_unique_oid(targets, rte->relid);
	}
	return targets;
}

/*
 * Lock the retired inputs of the targets, and their tables of done keys,
 * before reading or planning over them: the planner opens relations it did
 * not get from the rewriter without a lock, and a migration seen as running may be completing right
 * now (completion drops the inputs only when it can lock them, which these
 * locks, held to transaction end, prevent).  Taking the locks also
 * processes invalidations, so the cache may say the migration is done:
 * the targets still under migration.
 */
static List *
lock_live_targets(List *targets)
{
	List	   *live = NIL;
	ListCell   *lc;

	/*
	 * Chained migrations: an input may be a table an earlier migration
	 * fills, whose own inputs the plan reads too (nest_upstream, compute.c):
	 * those are locked as well, up the chain.  A lock that brings news
	 * (a completion) makes the cache reload and the walk start again with
	 * what it says now; locks already held stay.
	 */
	for (;;)
	{
		List	   *todo = list_copy(targets);

		foreach(lc, todo)
		{
			LfMigration *mig = lf_migration_by_target(lfirst_oid(lc));
			ListCell   *li;

			if (mig)
				foreach(li, mig->inputs)
				{
					(void) lf_lock_input_if_exists(lfirst_oid(li), AccessShareLock);
					if (!lf_cache_valid)
						break;
					if (lf_is_target(lfirst_oid(li)))
						todo = list_append_unique_oid(todo, lfirst_oid(li));
				}
			/* and the tables of done keys the mappings' anti-joins read */
			if (mig && lf_cache_valid)
				foreach(li, mig->live_keys)
				{
					(void) lf_lock_input_if_exists(lfirst_oid(li), AccessShareLock);
					if (!lf_cache_valid)
						break;
				}
			if (!lf_cache_valid)
				break;
		}
		list_free(todo);
		if (lf_cache_valid)
			break;
		lf_cache_load();
	}
	foreach(lc, targets)
		if (lf_is_target(lfirst_oid(lc)))
			live = lappend_oid(live, lfirst_oid(lc));
	return live;
}

/*
 * Is the mapping sub-query a plain projection of one relation: no filter,
 * no security barrier, nothing volatile?  Substituting its output
 * expressions then flattens it exactly, as the planner's own pull-up does.
 * (upstream_level has already turned away set operations, DISTINCT,
 * LIMIT, window functions, SRFs, sub-links and CTEs.)
 */
static bool
projection_only(RangeTblEntry *sub)
{
	Query	   *s = sub->subquery;

	if (sub->security_barrier || sub->securityQuals != NIL || s->commandType != CMD_SELECT ||
		list_length(s->rtable) != 1 || s->jointree == NULL || s->jointree->quals != NULL ||
		list_length(s->jointree->fromlist) != 1 ||
		!IsA(linitial(s->jointree->fromlist), RangeTblRef) ||
		s->hasAggs || s->groupClause || s->havingQual || s->hasForUpdate ||
		s->hasRowSecurity || contain_volatile_functions((Node *) s->targetList))
		return false;
	return rt_fetch(1, s->rtable)->rtekind == RTE_RELATION;
}

/*
 * Is occurrence rti a plain member of q's FROM list that a WHERE conjunct
 * joins to another relation?
 */
static bool
joins_others(Query *q, int rti)
{
	ListCell   *lc;

	if (!filtered_member(q, rti))
		return false;
	foreach(lc, make_ands_implicit((Expr *) q->jointree->quals))
	{
		Relids		rels = pull_varnos_of_level(NULL, lfirst(lc), 0);

		if (bms_is_member(rti, rels) && bms_num_members(rels) > 1)
			return true;
	}
	return false;
}

/*
 * Item q with its mapping sub-query sub (occurrence rti, projection_only)
 * pulled up: rti reads the input itself, and every column of the mapping
 * becomes its expression over the input.
 */
static Query *
pull_up_mapping(Query *q, int rti, RangeTblEntry *sub)
{
	List	   *tlist = copyObject(sub->subquery->targetList);
	RangeTblEntry *rel = copyObject(rt_fetch(1, sub->subquery->rtable));
	Query	   *level;

	ChangeVarNodes((Node *) tlist, 1, rti, 0);
	level = (Query *) ReplaceVarsFromTargetList((Node *) copyObject(q), rti, 0, sub, tlist,
												REPLACEVARS_REPORT_ERROR, 0, NULL);
	rel->inFromCl = true;
	list_nth_cell(level->rtable, rti - 1)->ptr_value = rel;
	return level;
}

/*
 * Does opno, on two values of type under collation coll, say they are
 * equal only when they are identical?  It must be the type's default btree
 * equality, and the opclass must say "equalimage" (as for deduplication in
 * B-tree indexes): integers, dates, text under a deterministic collation;
 * not numeric (1.0 = 1.00) nor a case-insensitive collation.
 */
static bool
equal_means_identical(Oid opno, Oid type, Oid coll)
{
	Oid			opclass = GetDefaultOpClass(type, BTREE_AM_OID);
	Oid			family;
	Oid			proc;

	if (!OidIsValid(opclass))
		return false;
	family = get_opclass_family(opclass);
	if (get_opfamily_member(family, type, type, BTEqualStrategyNumber) != opno)
		return false;
	proc = get_opfamily_proc(family, type, type, BTEQUALIMAGE_PROC);
	return OidIsValid(proc) &&
		DatumGetBool(OidFunctionCall1Coll(proc, coll, ObjectIdGetDatum(type)));
}

typedef struct SwapVar
{
	Var		   *from;
	Var		   *to;
	bool		other;			/* from's relation read in another column */
} SwapVar;

static Node *
swap_var_mutator(Node *node, SwapVar *sv)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var) && ((Var *) node)->varlevelsup == 0 &&
		((Var *) node)->varno == sv->from->varno)
	{
		if (((Var *) node)->varattno != sv->from->varattno)
			sv->other = true;
		return copyObject((Node *) sv->to);
	}
	return expression_tree_mutator(node, swap_var_mutator, sv);
}

/* The plain Var under a binary-compatible relabelling, or NULL */
static Var *
bare_var(Node *n)
{
	while (n && IsA(n, RelabelType))
		n = (Node *) ((RelabelType *) n)->arg;
	return n && IsA(n, Var) && ((Var *) n)->varlevelsup == 0 && ((Var *) n)->varattno > 0 ?
		(Var *) n : NULL;
}

/* Is n column y (under a binary-compatible relabelling)? */
static bool
is_column(Node *n, Var *y)
{
	Var		   *v = bare_var(n);

	return v != NULL && v->varno == y->varno && v->varattno == y->varattno;
}

/* The btree families in which equality operator opno is the equality */
static List *
equality_families(Oid opno)
{
	List	   *out = NIL;
	ListCell   *lc;

	foreach(lc, get_op_btree_interpretation(opno))
	{
		OpBtreeInterpretation *bi = lfirst(lc);

		if (bi->strategy == BTEqualStrategyNumber)
			out = lappend_oid(out, bi->opfamily_id);
	}
	return out;
}

/*
 * Is c a comparison of column y with a value that does not read the row
 * ("y < $1", "10 >= y", "y = ANY ('{1.0,2}')", or an AND of them), under
 * collation coll, by an operator of one of families, the btree families
 * of an equality "x = y" under coll?  Then "x = y AND c" implies c with x
 * for y, whatever the type: a btree family's operators are transitive
 * across its members ("x = y and y < z" gives "x < z"; the rules of its
 * opclasses, nbtree's README), so values equal but not identical (numeric
 * 1.0 and 1.00, 'a' and 'A' under a case-insensitive collation) compare
 * alike.
 */
static bool
family_comparison(Node *c, Var *y, Oid coll, List *families)
{
	Oid			opno;
	Node	   *value;
	ListCell   *lc;

	if (is_andclause(c))		/* BETWEEN, as the parser leaves it */
	{
		foreach(lc, ((BoolExpr *) c)->args)
			if (!family_comparison(lfirst(lc), y, coll, families))
				return false;
		return true;
	}
	if (IsA(c, OpExpr) && list_length(((OpExpr *) c)->args) == 2 &&
		((OpExpr *) c)->inputcollid == coll)
	{
		List	   *args = ((OpExpr *) c)->args;

		opno = ((OpExpr *) c)->opno;
		if (is_column(linitial(args), y))
			value = lsecond(args);
		else if (is_column(lsecond(args), y))
			value = linitial(args);
		else
			return false;
	}
	else if (IsA(c, ScalarArrayOpExpr) && ((ScalarArrayOpExpr *) c)->useOr &&
			 ((ScalarArrayOpExpr *) c)->inputcollid == coll &&
			 is_column(linitial(((ScalarArrayOpExpr *) c)->args), y))
	{
		opno = ((ScalarArrayOpExpr *) c)->opno;
		value = lsecond(((ScalarArrayOpExpr *) c)->args);
	}
	else
		return false;
	if (contain_vars_of_level(value, 0))
		return false;
	foreach(lc, families)
		if (get_op_opfamily_strategy(opno, lfirst_oid(lc)) != 0)
			return true;
	return false;
}

/*
 * Conditions on occurrence rti that an item's conjuncts (row_conjuncts)
 * imply through an equality with another relation's column: from "rti.x = o.y AND
 * cond(o.y)", cond(rti.x).  Sound where equal means identical
 * (equal_means_identical): cond cannot tell x from y.  Where equal values
 * may differ, only a comparison in the equality's btree family carries
 * over (family_comparison).  A join of two new tables of a chain
 * restricted by one side (UPDATE a ... FROM b WHERE a.id = b.id AND b.id
 * BETWEEN 1 AND 3) then restricts the other's earlier migration too,
 * instead of taking all its rows.
 */
static List *
implied_conjuncts(List *conj, int rti)
{
	List	   *out = NIL;
	ListCell   *lc;

	foreach(lc, conj)
	{
		OpExpr	   *op = lfirst(lc);
		Var		   *l,
				   *r,
				   *mine,
				   *other;
		bool		identical;
		List	   *families;	/* where equal may not mean identical */
		ListCell   *lc2;

		if (!IsA(op, OpExpr) || list_length(op->args) != 2 ||
			(l = bare_var(linitial(op->args))) == NULL ||
			(r = bare_var(lsecond(op->args))) == NULL)
			continue;
		if (l->varno == rti && r->varno != rti)
			mine = l, other = r;
		else if (r->varno == rti && l->varno != rti)
			mine = r, other = l;
		else
			continue;
		if (mine->vartype != other->vartype || mine->varcollid != other->varcollid ||
			exprType(linitial(op->args)) != exprType(lsecond(op->args)))
			continue;
		identical = equal_means_identical(op->opno, exprType(linitial(op->args)),
										  op->inputcollid);
		families = identical ? NIL : equality_families(op->opno);
		if (!identical && families == NIL)
			continue;			/* not a btree equality: implies nothing */
		foreach(lc2, conj)
		{
			Node	   *c = lfirst(lc2);
			Relids		varnos = pull_varnos(NULL, c);
			SwapVar		sv = {other, mine, false};
			Node	   *implied;

			if (c == (Node *) op || bms_membership(varnos) != BMS_SINGLETON ||
				bms_singleton_member(varnos) != other->varno ||
				contain_volatile_functions(c) || checkExprHasSubLink(c) ||
				has_outer_or_bad_refs(c, 0) ||
				(!identical && !family_comparison(c, other, op->inputcollid, families)))
				continue;
			implied = swap_var_mutator(c, &sv);
			if (!sv.other)
				out = lappend(out, implied);
		}
	}
	return out;
}

/*
 * The conjuncts every row of a query satisfies: its WHERE, and the ON
 * conditions of the joins reached from it through inner joins only (an
 * outer join's condition does not filter its preserved side, and nothing
 * under its nullable side is certain).  Appended to *conj.
 */
static void
row_conjuncts(Node *jt, List **conj)
{
	if (jt == NULL || IsA(jt, RangeTblRef))
		return;
	if (IsA(jt, FromExpr))
	{
		ListCell   *lc;

		*conj = list_concat(*conj, make_ands_implicit((Expr *) ((FromExpr *) jt)->quals));
		foreach(lc, ((FromExpr *) jt)->fromlist)
			row_conjuncts(lfirst(lc), conj);
	}
	else if (IsA(jt, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) jt;

		if (j->jointype == JOIN_INNER)
		{
			*conj = list_concat(*conj, make_ands_implicit((Expr *) j->quals));
			row_conjuncts(j->larg, conj);
			row_conjuncts(j->rarg, conj);
		}
		else if (j->jointype == JOIN_LEFT)
			row_conjuncts(j->larg, conj);
		else if (j->jointype == JOIN_RIGHT)
			row_conjuncts(j->rarg, conj);
	}
}

/*
 * Chained migrations.  An item's input may be a table an earlier migration
 * still fills (that migration's target, retired by a later one): rows the
 * earlier migration moves into it after our round would be missed.  So the
 * item's mapping, as a statement on that table, gets the earlier
 * migration's relevance queries too: the mapping sub-query of the item,
 * with the item's conditions that read only it pushed in (a row mapping:
 * plain SELECT ... WHERE, where substituting its output expressions is
 * exact).  Not found, or not a plain mapping: all the earlier migration's
 * rows for it.  The rounds (migrate.c) run the earlier migration's items
 * first and repeat until nothing is found, which reaches up a chain.
 *
 * An item that joins the mapping to rows the statement's other items bring
 * (may_pull: the keys a write may conflict with, the rows referencing rows
 * it changes) is restricted by that join too, when the mapping only
 * projects its input (no filter: the planner would flatten it anyway): it
 * is pulled up into the item (*pulled), so that "input.id = r.id + 1"
 * finds the one row an UPDATE's new key can meet, where pushing nothing
 * took all of them.  Not for the statement's own items: two new tables
 * joined would each wait for the other's rows, which may both still be
 * up the chain, and a round would find nothing too soon.
 */
static Query *
upstream_level(Query *q, Oid input, bool may_pull, bool *pulled)
{
	RangeTblEntry *sub = NULL;
	Query	   *level;
	int			rti = 0;
	List	   *pushed = NIL;
	List	   *conj = NIL;
	ListCell   *lc;

	foreach(lc, q->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);
		ListCell   *li;

		if (rte->rtekind != RTE_SUBQUERY)
			continue;
		foreach(li, rte->subquery->rtable)
			if (((RangeTblEntry *) lfirst(li))->rtekind == RTE_RELATION &&
				((RangeTblEntry *) lfirst(li))->relid == input)
			{
				if (sub != NULL)
					return NULL;	/* two: which one the item reads is unclear */
				sub = rte;
				rti = foreach_current_index(lc) + 1;
			}
	}
	if (sub == NULL)
		return NULL;
	level = sub->subquery;
	if (level->setOperations || level->hasSubLinks || level->groupingSets ||
		level->distinctClause || level->hasWindowFuncs || level->hasTargetSRFs ||
		level->limitCount || level->limitOffset || level->cteList)
		return copyObject(level);
	if (may_pull && projection_only(sub) && joins_others(q, rti))
	{
		*pulled = true;
		return pull_up_mapping(q, rti, sub);
	}
	level = copyObject(level);
	/* (the pushed conditions are copies: ReplaceVarsFromTargetList, swap_var_mutator) */
	row_conjuncts((Node *) q->jointree, &conj);
	foreach(lc, list_concat(implied_conjuncts(conj, rti), conj))
	{
		Node	   *c = lfirst(lc);
		Relids		varnos = pull_varnos(NULL, c);

		if (bms_membership(varnos) != BMS_SINGLETON || bms_singleton_member(varnos) != rti ||
			contain_volatile_functions(c) || checkExprHasSubLink(c) ||
			has_outer_or_bad_refs(c, 0))
			continue;
		/* under a GROUP BY, only a condition on grouping columns moves to WHERE */
		if ((level->groupClause || level->hasAggs) && !on_grouping_columns(c, rti, level))
			continue;
		pushed = lappend(pushed, ReplaceVarsFromTargetList(c, rti, 0, sub, level->targetList,
														   REPLACEVARS_REPORT_ERROR, 0, NULL));
	}
	if (pushed)
		level->jointree->quals = make_and_qual(level->jointree->quals,
											   (Node *) make_ands_explicit(pushed));
	return level;
}

/* Does c read, of rtindex rti, only columns that are level's grouping columns? */
static bool
on_grouping_columns(Node *c, int rti, Query *level)
{
	List	   *vars = pull_var_clause(c, PVC_RECURSE_AGGREGATES | PVC_RECURSE_WINDOWFUNCS |
									   PVC_RECURSE_PLACEHOLDERS);
	ListCell   *lc;

	foreach(lc, vars)
	{
		Var		   *v = lfirst(lc);
		TargetEntry *tle;

		if (v->varno != rti || v->varattno <= 0 ||
			(tle = get_tle_by_resno(level->targetList, v->varattno)) == NULL ||
			!is_grouping_expr(tle, level))
			return false;
	}
	return true;
}

/*
 * Is the output column tle one of level's grouping expressions?  A
 * mapping groups by its own lf_key entries (start.c), so the output column
 * may be another entry with the same expression.
 */
static bool
is_grouping_expr(TargetEntry *tle, Query *level)
{
	ListCell   *lc;

	foreach(lc, level->targetList)
	{
		TargetEntry *g = lfirst(lc);

		if (g->ressortgroupref != 0 &&
			get_sortgroupref_clause_noerr(g->ressortgroupref, level->groupClause) != NULL &&
			(g == tle || equal(g->expr, tle->expr)))
			return true;
	}
	return false;
}

/*
 * Any input of the item's migration may be a table still being filled, not
 * only the item's own: a join mapping's other side (the preserved side of
 * an outer join is the item's input).  The mapping level is then collected
 * whole, which gives items for every such table it reads.
 */
static void
nest_upstream(RelCtx *cx)
{
	for (int i = 0; i < list_length(cx->queries); i++)
	{
		Oid			input = list_nth_oid(cx->inputs, i);
		LfMigration *mig = lf_migration_by_input(input);
		Query	   *level;
		bool		pulled = false;
		ListCell   *lc;

		if (mig == NULL || !lf_has_upstream(mig))
			continue;
		level = upstream_level(list_nth(cx->queries, i), input,
							   list_nth_int(cx->kinds, i) != LF_NEEDS_ROWS, &pulled);
		if (level)
		{
			/* a pulled-up item also reads other new tables: as they are */
			Oid			only = cx->only;

			if (pulled)
				cx->only = input;
			collect_level(level, cx);
			cx->only = only;
		}
		else
			foreach(lc, mig->inputs)
				if (lf_upstream_of(mig, lfirst_oid(lc)))
					whole_table(cx, lfirst_oid(lc), NULL, LF_NEEDS_ROWS);
	}
}

/*
 * The relevance queries of a statement (copy: its Query, or NULL) that
 * reads the given targets.  Past MAX_ITEMS, whole inputs instead.
 */
static void
collect_items(Query *copy, List *targets, RelCtx *cx)
{
	ListCell   *lc;

	if (copy)
		collect_level(copy, cx);
	/* targets met only in the flattened range table: inlined SQL functions, read only */
	foreach(lc, targets)
		if (!list_member_oid(cx->found, lfirst_oid(lc)))
			whole_table(cx, lfirst_oid(lc), NULL, LF_NEEDS_ROWS);
	if (list_length(cx->queries) > MAX_ITEMS)
	{
		RelCtx		all = {0};

		foreach(lc, targets)
			whole_table(&all, lfirst_oid(lc), NULL, LF_NEEDS_KEYS);
		foreach(lc, cx->fkeys)
			referencing_rows(NULL, 0, lfirst(lc), true, &all);
		*cx = all;
	}
	nest_upstream(cx);
}

/* Plan the relevance queries, as items of the LeapfrogMigrate node. */
static List *
plan_items(RelCtx *cx, PlannedStmt *stmt, ParamListInfo boundParams)
{
	List	   *items = NIL;
	ListCell   *lq,
			   *li,
			   *ld,
			   *lk,
			   *lm;

	Assert(list_length(cx->pinned) == list_length(cx->queries));
	forfive(lq, cx->queries, li, cx->inputs, ld, cx->descs, lk, cx->kinds, lm, cx->mappings)
	{
		List	   *pinned = list_nth(cx->pinned, foreach_current_index(lq));
		Query	   *q = lfirst(lq);
		PlannedStmt *rs;
		LfMigration *mig = lf_migration_by_input(lfirst_oid(li));
		/* an input an earlier migration still fills gains rows: not alone */
		int			alone = mig && !lf_has_upstream(mig) ? standalone(q) : 0;
		List	   *item;

		if (mig == NULL)
			continue;			/* completed while we planned */
		rewrite_integer_quals(q);
		narrow_barriers(q);
		rs = standard_planner(q, "leapfrog relevance", 0, boundParams);
		if (stmt)
		{
			stmt->relationOids = list_concat_unique_oid(stmt->relationOids, rs->relationOids);
			stmt->invalItems = list_concat(stmt->invalItems, rs->invalItems);
		}
		/* in the order of LfItemField */
		item = list_make4(makeInteger((int) lfirst_oid(li)), makeInteger(mig->id), rs,
						  makeString(lfirst(ld)));
		item = lappend(item, makeInteger(alone));
		item = lappend(item, makeInteger(lfirst_int(lk)));
		item = lappend(item, makeInteger(lfirst_int(lm)));
		item = lappend(item, pinned);
		Assert(list_length(item) == LF_ITEM_NFIELDS);
		items = lappend(items, item);
	}
	return items;
}

/* The new tables a Query names, at any level */
static bool
collect_targets_walker(Node *node, List **targets)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind == RTE_RELATION && lf_is_target(rte->relid))
			*targets = list_append_unique_oid(*targets, rte->relid);
		return false;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, collect_targets_walker, targets,
								 QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, collect_targets_walker, targets);
}

static PlannedStmt *
lf_planner(Query *parse, const char *query_string, int cursorOptions,
		   ParamListInfo boundParams)
{
	Query	   *copy = NULL;
	Query	   *plain_read = NULL;
	PlannedStmt *stmt;
	List	   *targets = NIL;
	RelCtx		cx = {0};
	List	   *items;

	if (!lf_any_active())
		return prev_planner ? prev_planner(parse, query_string, cursorOptions, boundParams)
			: standard_planner(parse, query_string, cursorOptions, boundParams);

	(void) collect_targets_walker((Node *) parse, &targets);

	/*
	 * A plain read computes the new tables' rows where it should not migrate
	 * them (compute.c); planned the migrating way, it keeps its Query, in
	 * case the plan runs where it cannot migrate (migrate.c).
	 */
	if (targets != NIL && parse->commandType == CMD_SELECT && !parse->hasModifyingCTE &&
		!parse->hasForUpdate && lock_live_targets(targets) != NIL)
	{
		if (lf_compute_wanted())
		{
			stmt = lf_compute_plan(parse, query_string, cursorOptions, boundParams, prev_planner);
			if (stmt)
				return stmt;
		}
		plain_read = copyObject(parse);
	}

	/* statements on new tables; writes of tables their foreign keys reference */
	if (targets != NIL ||
		((parse->commandType != CMD_SELECT || parse->hasModifyingCTE) &&
		 refs_parent_walker((Node *) parse, NULL)))
		copy = copyObject(parse);
	stmt = prev_planner ? prev_planner(parse, query_string, cursorOptions, boundParams)
		: standard_planner(parse, query_string, cursorOptions, boundParams);
	if (stmt->commandType == CMD_UTILITY)
		return stmt;
	targets = targets_in_plan(stmt);
	if (targets == NIL && copy == NULL)
		return stmt;
	targets = lock_live_targets(targets);
	if (targets == NIL && copy == NULL)
		return stmt;
	collect_items(copy, targets, &cx);
	items = plan_items(&cx, stmt, boundParams);
	return items ? lf_wrap_plan(stmt, items, NIL, plain_read, NIL) : stmt;
}

/*
 * Chained migrations (migrate.c, pull_upstream): the plan of
 * SELECT lf_ctid FROM <m> WHERE quals, quals on the mapping's output columns
 * (varno 1, attribute numbers of m's target): the input rows of m whose
 * images would have those values.
 */
PlannedStmt *
lf_pull_plan(LfMapping *m, Node *quals, List **upstream)
{
	Query	   *q = single_table_query(m, target_rte(m->target, 0), quals);

	/*
	 * The mapping's input may itself be a table still being filled, three
	 * deep: the relevance queries of the migrations up the chain for the
	 * rows this query could return (nest_upstream), to run first.
	 */
	if (upstream)
	{
		RelCtx		cx = {0};
		LfMigration *mig = lf_migration_by_input(m->input);

		*upstream = NIL;
		if (mig && lf_has_upstream(mig))
		{
			cx.queries = list_make1(copyObject(q));
			cx.inputs = list_make1_oid(m->input);
			cx.descs = list_make1(pstrdup("pull"));
			cx.kinds = list_make1_int(LF_NEEDS_ROWS);
			cx.mappings = list_make1_int(lf_keys_carrier(mig, m) ? lf_keys_carrier(mig, m)->id : 0);
			cx.pinned = list_make1(NIL);
			nest_upstream(&cx);
			cx.queries = list_delete_first(cx.queries);
			cx.inputs = list_delete_first(cx.inputs);
			cx.descs = list_delete_first(cx.descs);
			cx.kinds = list_delete_first(cx.kinds);
			cx.mappings = list_delete_first(cx.mappings);
			cx.pinned = list_delete_first(cx.pinned);
			*upstream = plan_items(&cx, NULL, NULL);
		}
	}
	rewrite_integer_quals(q);
	return standard_planner(q, "leapfrog pull", 0, NULL);
}

void
lf_install_planner_hook(void)
{
	prev_planner = planner_hook;
	planner_hook = lf_planner;
}
