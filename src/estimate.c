/*-------------------------------------------------------------------------
 * estimate.c
 *	  Planner estimates for the new tables of a running migration: their
 *	  size and the statistics of the columns they copy.
 *
 * A new table starts empty and fills as rows are migrated, but every
 * statement that reads it first migrates the rows it needs (or computes
 * them): to the statement, the table is as large as it will be when the
 * migration is done.  The planner, though, sees an empty or small table,
 * and with every index equally cheap it may pick one that matches fewer
 * columns (a lookup by key scanning a whole key prefix).  Such a plan is
 * cached by prepared statements and PL/pgSQL, and gets slower as the table
 * fills.  So the get_relation_info hook sizes a new table as its own rows
 * plus what its mappings will bring: the input's rows, or for a GROUP BY
 * mapping its groups (the product of the key columns' distinct counts in
 * the input, at most its rows).
 *
 * Column statistics are lent the same way (get_relation_stats_hook).
 * ANALYZE of a new table while it fills samples the rows migrated so far:
 * the groups and rows the application touched first, which say little of
 * the whole (the TPC-C aggregate's order_total, analyzed at 13k of its
 * 300k rows, had 187 distinct order ids where the whole has 3000, so a
 * lookup by its primary key was estimated at 161 rows, and PL/pgSQL kept
 * re-planning it with custom plans).  Where a column of the new table is
 * an unchanged copy of an input column (same type and collation, the only
 * mapping into the table, no WHERE or HAVING to make the copied rows a
 * subset), the planner gets the input column's statistics instead, until
 * the migration completes and its ANALYZE (lf_analyze_targets) gives the
 * table its own.  For a GROUP BY mapping that holds for the grouping
 * columns: their distinct values are the input's, their frequencies those
 * of rows rather than groups.  A column that converts an input column by a
 * cast that keeps order and tells values apart (an int retyped to bigint,
 * the commonest migration of all: cast_keeps_statistics) gets the input's
 * statistics converted: its most common values and histogram bounds cast,
 * with the new type's operators.  Whether a user may see those statistics
 * (leaky operators) is decided as for the new table's own.
 *
 * Cost when no migration runs: one test of the catalog cache.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_statistic.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/plancat.h"
#include "parser/parsetree.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

static get_relation_info_hook_type prev_get_relation_info = NULL;
static get_relation_stats_hook_type prev_get_relation_stats = NULL;

/* relpages and reltuples of a table as of its last VACUUM or ANALYZE */
static void
stored_size(Oid relid, double *pages, double *tuples)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));

	*pages = *tuples = 0;
	if (!HeapTupleIsValid(tup))
		return;					/* dropped: completed meanwhile */
	*pages = ((Form_pg_class) GETSTRUCT(tup))->relpages;
	*tuples = ((Form_pg_class) GETSTRUCT(tup))->reltuples;
	ReleaseSysCache(tup);
	if (*tuples < 0)			/* never vacuumed or analyzed */
		*tuples = *pages * (BLCKSZ / 128);
}

/*
 * The groups of GROUP BY mapping m, from its input's statistics: the
 * product of the key columns' distinct counts, at most the input's rows
 * (tuples).  Without statistics for a key column: tuples.
 */
static double
group_count(LfMapping *m, double tuples)
{
	double		groups = 1;

	for (int k = 0; k < m->nkeys; k++)
	{
		HeapTuple	tup = SearchSysCache3(STATRELATTINH, ObjectIdGetDatum(m->inputs[0]),
										  Int16GetDatum(m->keys[0][k]), BoolGetDatum(false));
		double		nd;

		if (!HeapTupleIsValid(tup))
			return tuples;
		nd = ((Form_pg_statistic) GETSTRUCT(tup))->stadistinct;
		ReleaseSysCache(tup);
		if (nd < 0)
			nd = -nd * tuples;
		if (nd <= 0)
			return tuples;		/* unknown */
		groups *= nd;
		if (groups >= tuples)
			return tuples;
	}
	return groups;
}

static void
lf_get_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	LfMigration *mig;
	double		pages = 0,
				tuples = 0;
	ListCell   *lc;

	if (prev_get_relation_info)
		prev_get_relation_info(root, relid, inhparent, rel);
	if (!lf_any_active() || (mig = lf_migration_by_target(relid)) == NULL)
		return;

	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);
		double		p,
					t;

		if (m->target != relid)
			continue;
		stored_size(m->input, &p, &t);
		if (m->kind == LF_MAP_GROUPS && t > 0)
		{
			double		g = group_count(m, t);

			p *= g / t;
			t = g;
		}
		pages += p;
		tuples += t;
	}
	if (tuples <= 0)
		return;
	rel->pages = (BlockNumber) Min(rel->pages + pages, (double) MaxBlockNumber);
	rel->tuples += tuples;
	foreach(lc, rel->indexlist)
	{
		IndexOptInfo *index = lfirst(lc);

		if (index->indpred != NIL)
			continue;			/* partial: size unknown, left as is */
		index->tuples = Max(index->tuples, rel->tuples);
	}
}

/*
 * Does a cast from type `from` to type `to` keep an input column's
 * statistics true, once its values are cast: the same order, and no two
 * values made one?  Integer widening and exact conversions to numeric and
 * float8; not float8 from bigint (two bigints may become one float), nor
 * anything through text.
 */
static bool
cast_keeps_statistics(Oid from, Oid to)
{
	switch (to)
	{
		case INT4OID:
			return from == INT2OID;
		case INT8OID:
			return from == INT2OID || from == INT4OID;
		case NUMERICOID:
			return from == INT2OID || from == INT4OID || from == INT8OID;
		case FLOAT8OID:
			return from == INT2OID || from == INT4OID || from == FLOAT4OID;
		default:
			return false;
	}
}

/*
 * The input column that column attnum of table relid copies (see the file
 * header), as *input and *inattr, and the cast that converts it as *cast
 * (NULL: copied unchanged); false if none, or if relid is not a new table.
 */
static bool
copied_column(Oid relid, AttrNumber attnum, Oid *input, AttrNumber *inattr, FuncExpr **cast)
{
	List	   *mappings = lf_mappings_for_target(relid);
	LfMapping  *m;
	TargetEntry *tle;
	Var		   *var;
	RangeTblEntry *rte;
	Oid			typid,
				collid;
	int32		typmod;

	if (list_length(mappings) != 1)
		return false;
	m = linitial(mappings);
	if (m->kind == LF_MAP_JOIN || attnum <= 0 || attnum > m->natts ||
		m->query->jointree->quals != NULL || m->query->havingQual != NULL)
		return false;
	tle = list_nth(m->query->targetList, attnum - 1);
	get_atttypetypmodcoll(relid, attnum, &typid, &typmod, &collid);
	*cast = NULL;
	if (IsA(tle->expr, FuncExpr))
	{
		/* a cast of the column alone (one argument: no typmod to apply) */
		FuncExpr   *f = (FuncExpr *) tle->expr;

		if ((f->funcformat != COERCE_IMPLICIT_CAST && f->funcformat != COERCE_EXPLICIT_CAST) ||
			f->funcretset || list_length(f->args) != 1 || !IsA(linitial(f->args), Var) ||
			f->funcresulttype != typid ||
			!cast_keeps_statistics(((Var *) linitial(f->args))->vartype, typid))
			return false;
		*cast = f;
		var = linitial(f->args);
	}
	else if (IsA(tle->expr, Var))
	{
		var = (Var *) tle->expr;
		if (typid != var->vartype || collid != var->varcollid)
			return false;
	}
	else
		return false;
	if (var->varlevelsup != 0 || var->varattno <= 0)
		return false;
	rte = rt_fetch(var->varno, m->query->rtable);
	if (rte->rtekind != RTE_RELATION)
		return false;
	*input = rte->relid;
	*inattr = var->varattno;
	return true;
}

/*
 * A copy of statistics tuple tup of an input column, as the statistics of
 * the column that cast fills from it: its most common values and histogram
 * bounds cast, with the operators of the cast's type (the planner checks a
 * histogram's operator against the query's); slots of other kinds (of
 * arrays, ranges) left out.
 */
static HeapTuple
cast_statistics(HeapTuple tup, FuncExpr *cast)
{
	Oid			to = cast->funcresulttype;
	Relation	rel = table_open(StatisticRelationId, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	TypeCacheEntry *tc = lookup_type_cache(to, TYPECACHE_EQ_OPR | TYPECACHE_LT_OPR);
	Datum		values[Natts_pg_statistic];
	bool		nulls[Natts_pg_statistic];
	FmgrInfo	flinfo;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	HeapTuple	result;

	heap_deform_tuple(tup, desc, values, nulls);
	fmgr_info(cast->funcid, &flinfo);
	get_typlenbyvalalign(to, &typlen, &typbyval, &typalign);
	if (typlen > 0)
		values[Anum_pg_statistic_stawidth - 1] = Int32GetDatum(typlen);
	for (int k = 0; k < STATISTIC_NUM_SLOTS; k++)
	{
		int			kind = DatumGetInt16(values[Anum_pg_statistic_stakind1 - 1 + k]);
		int			vi = Anum_pg_statistic_stavalues1 - 1 + k;
		int			oi = Anum_pg_statistic_staop1 - 1 + k;

		if (kind == 0)
			continue;
		if (kind == STATISTIC_KIND_MCV || kind == STATISTIC_KIND_HISTOGRAM ||
			kind == STATISTIC_KIND_CORRELATION)
		{
			values[oi] = ObjectIdGetDatum(kind == STATISTIC_KIND_MCV ? tc->eq_opr : tc->lt_opr);
			if (!nulls[vi])
			{
				ArrayType  *arr = DatumGetArrayTypeP(values[vi]);
				int16		elmlen;
				bool		elmbyval;
				char		elmalign;
				Datum	   *elems;
				int			n;

				get_typlenbyvalalign(ARR_ELEMTYPE(arr), &elmlen, &elmbyval, &elmalign);
				deconstruct_array(arr, ARR_ELEMTYPE(arr), elmlen, elmbyval, elmalign,
								  &elems, NULL, &n);
				for (int e = 0; e < n; e++)
					elems[e] = FunctionCall1(&flinfo, elems[e]);
				values[vi] = PointerGetDatum(construct_array(elems, n, to, typlen, typbyval,
															 typalign));
			}
			continue;
		}
		/* a kind of statistics of other types: left out */
		values[Anum_pg_statistic_stakind1 - 1 + k] = Int16GetDatum(0);
		values[oi] = ObjectIdGetDatum(InvalidOid);
		values[Anum_pg_statistic_stacoll1 - 1 + k] = ObjectIdGetDatum(InvalidOid);
		nulls[Anum_pg_statistic_stanumbers1 - 1 + k] = true;
		nulls[vi] = true;
	}
	result = heap_form_tuple(desc, values, nulls);
	table_close(rel, AccessShareLock);
	return result;
}

static bool
lf_get_relation_stats(PlannerInfo *root, RangeTblEntry *rte, AttrNumber attnum,
					  VariableStatData *vardata)
{
	Oid			input;
	AttrNumber	inattr;
	FuncExpr   *cast;
	HeapTuple	tup;
	Oid			userid;

	if (prev_get_relation_stats && prev_get_relation_stats(root, rte, attnum, vardata))
		return true;
	if (!lf_any_active() || rte->inh ||
		!copied_column(rte->relid, attnum, &input, &inattr, &cast))
		return false;
	tup = SearchSysCache3(STATRELATTINH, ObjectIdGetDatum(input), Int16GetDatum(inattr),
						  BoolGetDatum(false));
	if (!HeapTupleIsValid(tup))
		return false;			/* the input was never analyzed: the table's own */
	if (cast)
	{
		HeapTuple	converted = cast_statistics(tup, cast);

		ReleaseSysCache(tup);
		vardata->statsTuple = converted;
		vardata->freefunc = heap_freetuple;
	}
	else
	{
		vardata->statsTuple = tup;
		vardata->freefunc = ReleaseSysCache;
	}
	/* as examine_simple_variable decides for the table's own statistics */
	userid = OidIsValid(rte->checkAsUser) ? rte->checkAsUser : GetUserId();
	vardata->acl_ok = rte->securityQuals == NIL &&
		(pg_class_aclcheck(rte->relid, userid, ACL_SELECT) == ACLCHECK_OK ||
		 pg_attribute_aclcheck(rte->relid, attnum, userid, ACL_SELECT) == ACLCHECK_OK);
	return true;
}

void
lf_install_estimate_hook(void)
{
	prev_get_relation_info = get_relation_info_hook;
	get_relation_info_hook = lf_get_relation_info;
	prev_get_relation_stats = get_relation_stats_hook;
	get_relation_stats_hook = lf_get_relation_stats;
}
