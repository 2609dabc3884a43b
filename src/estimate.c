/*-------------------------------------------------------------------------
 * estimate.c
 *	  Planner size estimates for the new tables of a running migration.
 *
 * A new table starts empty and fills as rows are migrated, but every
 * statement that reads it first migrates the rows it needs: to the
 * statement, the table is as large as it will be when the migration is
 * done.  The planner, though, sees an empty or small table, and with every
 * index equally cheap it may pick one that matches fewer columns (a lookup
 * by key scanning a whole key prefix).  Such a plan is cached by prepared
 * statements and PL/pgSQL, and gets slower as the table fills.  So the
 * get_relation_info hook sizes a new table as its own rows plus the rows
 * still in the inputs mapped into it, which is what the eager script would
 * leave behind.  Column statistics are left alone: ANALYZE of the new table
 * provides them as it fills.
 *
 * Cost when no migration runs: one test of the catalog cache.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "optimizer/plancat.h"
#include "utils/syscache.h"

static get_relation_info_hook_type prev_get_relation_info = NULL;

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

void
lf_install_estimate_hook(void)
{
	prev_get_relation_info = get_relation_info_hook;
	get_relation_info_hook = lf_get_relation_info;
}
