/*-------------------------------------------------------------------------
 * catalog.c
 *	  Backend-local cache of the active migrations of this database.
 *
 * The durable record is in the extension's tables (leapfrog.migration,
 * leapfrog.input, leapfrog.mapping).  Every statement asks "is a relation
 * it touches under migration?", so each backend keeps the answer in local
 * memory and rereads the catalog only when told to.
 *
 * Invalidation rule: whoever changes the set of active migrations (start(),
 * completion, failure) calls CacheInvalidateRelcacheByRelid() on
 * leapfrog.migration in the same transaction.  The message goes out at
 * commit, before that transaction releases its locks.  A backend can only
 * use a new table after locking it, and lock acquisition processes pending
 * invalidations, so by the time a statement on a new table is planned or
 * executed, this cache has been marked stale and is reloaded.  With no
 * active migration the hooks cost one test of a local variable.
 *
 * The cache also keeps the migrations completed so recently that some
 * snapshot may not see their completion (lf_recent_done): a REPEATABLE
 * READ transaction whose snapshot predates a completion cannot see every
 * row the migration moved, and its statements on the new tables must know
 * (snapshot.c).  They drop out at the next reload after every snapshot sees
 * the completion, or sooner (lf_completions_visible).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "nodes/nodeFuncs.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/xid8.h"
#include "storage/lmgr.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "utils/fmgroids.h"

bool		lf_cache_valid = false;
List	   *lf_active = NIL;
List	   *lf_recent_done = NIL;

/* Attribute numbers of the catalog tables (sql/leapfrog--0.1.sql) */
#define Anum_migration_id			1
#define Anum_migration_name			2
#define Anum_migration_owner		3
#define Anum_migration_state		4
#define Anum_migration_started_at	6
#define Anum_migration_start_xid	10
#define Anum_migration_done_xid		11
#define Anum_input_migration_id		1
#define Anum_input_relid			2
#define Anum_mapping_id				1
#define Anum_mapping_migration_id	2
#define Anum_mapping_input_relid	3
#define Anum_mapping_target_relid	4
#define Anum_mapping_query			5

static MemoryContext lf_cache_cxt = NULL;
static Oid	lf_catalog_oid = InvalidOid;

static void
lf_relcache_cb(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == lf_catalog_oid ||
		!OidIsValid(lf_catalog_oid))
		lf_cache_valid = false;
}

void
lf_cache_init(void)
{
	CacheRegisterRelcacheCallback(lf_relcache_cb, (Datum) 0);
}

void
lf_invalidate_all(void)
{
	Oid			cat = lf_catalog_relid();

	if (OidIsValid(cat))
		CacheInvalidateRelcacheByRelid(cat);
	lf_cache_valid = false;
}

Oid
lf_retired_namespace(void)
{
	return get_namespace_oid("leapfrog_retired", true);
}

/* A table of the extension's catalog (schema leapfrog), or InvalidOid. */
Oid
lf_catalog_table(const char *name)
{
	Oid			nsp = get_namespace_oid("leapfrog", true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	return get_relname_relid(name, nsp);
}

/* The owner of the extension's catalog: it alone may write it. */
Oid
lf_catalog_owner(void)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(lf_catalog_relid()));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "leapfrog catalog not found");
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

Oid
lf_catalog_relid(void)
{
	return lf_catalog_table("migration");
}

/* Make every relation the mapping reads checked as the migration owner. */
static bool
lf_set_owner_walker(Node *node, void *owner)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind == RTE_RELATION)
			rte->checkAsUser = *(Oid *) owner;
		return false;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, lf_set_owner_walker, owner,
								 QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, lf_set_owner_walker, owner);
}

static LfMigration *
migration_in(List *list, int id)
{
	ListCell   *lc;

	foreach(lc, list)
	{
		LfMigration *m = lfirst(lc);

		if (m->id == id)
			return m;
	}
	return NULL;
}

LfMigration *
lf_migration_by_id(int id)
{
	return migration_in(lf_active, id);
}

/* Scan one of our catalog tables, calling fn for each visible row. */
static void
scan_table(Oid relid, Snapshot snap, void (*fn) (HeapTuple, TupleDesc))
{
	Relation	rel = table_open(relid, AccessShareLock);
	SysScanDesc scan = systable_beginscan(rel, InvalidOid, false, snap, 0, NULL);
	HeapTuple	tup;

	while (HeapTupleIsValid(tup = systable_getnext(scan)))
		fn(tup, RelationGetDescr(rel));
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
}

/*
 * A transaction id of the catalog.  One that every snapshot already sees
 * (or none recorded) needs no test later.
 */
static LfXact
load_xact(HeapTuple tup, int attnum, TupleDesc desc)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, attnum, desc, &isnull);
	LfXact		x = {InvalidFullTransactionId, true};

	if (!isnull)
	{
		x.fxid = DatumGetFullTransactionId(d);
		x.all_see = GlobalVisCheckRemovableFullXid(NULL, x.fxid);
	}
	return x;
}

/*
 * Running and failed migrations go to lf_active.  A done one goes to
 * lf_recent_done for as long as some snapshot may not see its completion
 * (snapshot.c); once all do, it no longer matters to any statement.
 */
static void
load_migration(HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	char	   *state;
	LfMigration *m;
	LfXact		done = {InvalidFullTransactionId, true};

	state = TextDatumGetCString(heap_getattr(tup, Anum_migration_state, desc, &isnull));
	if (strcmp(state, "done") == 0)
	{
		done = load_xact(tup, Anum_migration_done_xid, desc);
		if (done.all_see)
			return;
	}
	m = palloc0(sizeof(LfMigration));
	m->id = DatumGetInt32(heap_getattr(tup, Anum_migration_id, desc, &isnull));
	m->name = TextDatumGetCString(heap_getattr(tup, Anum_migration_name, desc, &isnull));
	m->owner = DatumGetObjectId(heap_getattr(tup, Anum_migration_owner, desc, &isnull));
	m->failed = (strcmp(state, "failed") == 0);
	m->started_at = DatumGetTimestampTz(heap_getattr(tup, Anum_migration_started_at, desc, &isnull));
	m->started = load_xact(tup, Anum_migration_start_xid, desc);
	m->done = done;
	if (strcmp(state, "done") == 0)
		lf_recent_done = lappend(lf_recent_done, m);
	else
		lf_active = lappend(lf_active, m);
}

static void
load_input(HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	LfMigration *m = lf_migration_by_id(DatumGetInt32(heap_getattr(tup, Anum_input_migration_id,
																	desc, &isnull)));

	if (m)
		m->inputs = lappend_oid(m->inputs,
								DatumGetObjectId(heap_getattr(tup, Anum_input_relid, desc, &isnull)));
}

static void
load_mapping(HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	int			mig_id = DatumGetInt32(heap_getattr(tup, Anum_mapping_migration_id, desc, &isnull));
	Oid			target = DatumGetObjectId(heap_getattr(tup, Anum_mapping_target_relid, desc, &isnull));
	LfMigration *m = lf_migration_by_id(mig_id);
	LfMapping  *map;

	if (!m)
	{
		/* a recently completed migration: only its targets matter */
		m = migration_in(lf_recent_done, mig_id);
		if (m)
			m->targets = list_append_unique_oid(m->targets, target);
		return;
	}
	m->targets = list_append_unique_oid(m->targets, target);
	map = palloc0(sizeof(LfMapping));
	map->id = DatumGetInt32(heap_getattr(tup, Anum_mapping_id, desc, &isnull));
	map->input = DatumGetObjectId(heap_getattr(tup, Anum_mapping_input_relid, desc, &isnull));
	map->target = target;
	map->query = stringToNode(TextDatumGetCString(heap_getattr(tup, Anum_mapping_query, desc, &isnull)));
	lf_set_owner_walker((Node *) map->query, &m->owner);
	map->natts = list_length(map->query->targetList) - 1;
	m->mappings = lappend(m->mappings, map);
}

/*
 * The foreign keys of m's new tables.  They cannot change while the
 * migration runs (DDL on its tables is refused, utility.c); one that goes
 * with a dropped parent leaves an entry that matches nothing.
 */
static void
load_fkeys(LfMigration *m, Snapshot snap)
{
	Relation	conrel = table_open(ConstraintRelationId, AccessShareLock);
	ListCell   *lc;

	foreach(lc, m->targets)
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tup;

		ScanKeyInit(&key, Anum_pg_constraint_conrelid, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(lfirst_oid(lc)));
		scan = systable_beginscan(conrel, ConstraintRelidTypidNameIndexId, true, snap, 1, &key);
		while (HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);
			LfForeignKey *fk;

			if (con->contype != CONSTRAINT_FOREIGN)
				continue;
			fk = palloc0(sizeof(LfForeignKey));
			fk->child = lfirst_oid(lc);
			fk->parent = con->confrelid;
			DeconstructFkConstraintRow(tup, &fk->nkeys, fk->child_keys, fk->parent_keys,
									   fk->eqops, NULL, NULL, NULL, NULL);
			m->fkeys = lappend(m->fkeys, fk);
		}
		systable_endscan(scan);
	}
	table_close(conrel, AccessShareLock);
}

void
lf_cache_load(void)
{
	MemoryContext old;
	Snapshot	snap;
	ListCell   *lc;

	/*
	 * Callers may hold pointers into the previous cache for the rest of
	 * their transaction (a reload can happen in any nested statement), so
	 * the old cache is freed with the transaction, not now.
	 */
	if (lf_cache_cxt != NULL)
	{
		if (IsTransactionState())
			MemoryContextSetParent(lf_cache_cxt, TopTransactionContext);
		else
			MemoryContextDelete(lf_cache_cxt);
	}
	lf_cache_cxt = AllocSetContextCreate(CacheMemoryContext, "leapfrog cache",
										 ALLOCSET_SMALL_SIZES);
	lf_active = NIL;
	lf_recent_done = NIL;

	/* An invalidation arriving while we read sets this back to false. */
	lf_cache_valid = true;
	lf_catalog_oid = lf_catalog_relid();
	if (!OidIsValid(lf_catalog_oid))
		return;

	old = MemoryContextSwitchTo(lf_cache_cxt);
	/*
	 * A fresh catalog-style snapshot: it sees every committed migration and
	 * our own earlier commands, and unlike GetLatestSnapshot() it does not
	 * fix the transaction snapshot (a BEGIN ISOLATION LEVEL may follow).
	 */
	InvalidateCatalogSnapshot();
	snap = RegisterSnapshot(GetCatalogSnapshot(lf_catalog_oid));
	PG_TRY();
	{
		scan_table(lf_catalog_oid, snap, load_migration);
		if (lf_active != NIL)
			scan_table(lf_catalog_table("input"), snap, load_input);
		if (lf_active != NIL || lf_recent_done != NIL)
			scan_table(lf_catalog_table("mapping"), snap, load_mapping);
		foreach(lc, lf_active)
			load_fkeys(lfirst(lc), snap);
	}
	PG_CATCH();
	{
		lf_cache_valid = false;
		lf_active = NIL;
		lf_recent_done = NIL;
		PG_RE_THROW();
	}
	PG_END_TRY();
	UnregisterSnapshot(snap);
	MemoryContextSwitchTo(old);
}

LfMigration *
lf_migration_by_input(Oid input)
{
	ListCell   *lc;

	foreach(lc, lf_active)
	{
		LfMigration *m = lfirst(lc);

		if (list_member_oid(m->inputs, input))
			return m;
	}
	return NULL;
}

LfMigration *
lf_migration_by_target(Oid target)
{
	ListCell   *lc;

	foreach(lc, lf_active)
	{
		LfMigration *m = lfirst(lc);

		if (list_member_oid(m->targets, target))
			return m;
	}
	return NULL;
}

List *
lf_mappings_for_target(Oid target)
{
	List	   *result = NIL;
	ListCell   *lc,
			   *lc2;

	foreach(lc, lf_active)
	{
		LfMigration *m = lfirst(lc);

		foreach(lc2, m->mappings)
		{
			LfMapping  *map = lfirst(lc2);

			if (map->target == target)
				result = lappend(result, map);
		}
	}
	return result;
}

bool
lf_is_target(Oid relid)
{
	return lf_migration_by_target(relid) != NULL;
}

/* The foreign keys of new tables that reference parent. */
List *
lf_fkeys_referencing(Oid parent)
{
	List	   *result = NIL;
	ListCell   *lc,
			   *lc2;

	foreach(lc, lf_active)
		foreach(lc2, ((LfMigration *) lfirst(lc))->fkeys)
			if (((LfForeignKey *) lfirst(lc2))->parent == parent)
				result = lappend(result, lfirst(lc2));
	return result;
}

/*
 * Lock a retired input and tell whether it still exists: a migration seen
 * as running may be completed, and its inputs dropped, by another session
 * at any moment before the lock is held.
 */
bool
lf_lock_input_if_exists(Oid relid, LOCKMODE mode)
{
	LockRelationOid(relid, mode);
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		return true;
	UnlockRelationOid(relid, mode);
	return false;
}

bool
lf_is_input(Oid relid)
{
	return lf_migration_by_input(relid) != NULL;
}
