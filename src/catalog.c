/*-------------------------------------------------------------------------
 * catalog.c
 *	  The extension's catalog: every read and write of its tables, and the
 *	  backend-local cache of the active migrations of this database.
 *
 * The durable record is in the extension's tables (leapfrog.migration,
 * leapfrog.input, leapfrog.mapping, leapfrog.progress; column numbers
 * below, Anum_*).  Every statement asks "is a relation it touches under
 * migration?", so each backend keeps the answer in local memory and
 * rereads the catalog only when told to.
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
#include "storage/proc.h"
#include "storage/sinvaladt.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/guc.h"
#include "catalog/pg_constraint.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"

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
#define Anum_migration_on_error		12
#define Anum_input_migration_id		1
#define Anum_input_relid			2
#define Anum_input_in_place			4
#define Anum_input_live_keys		5
#define Anum_input_in_place_copy	6
#define Anum_mapping_id				1
#define Anum_mapping_migration_id	2
#define Anum_mapping_input_relid	3
#define Anum_mapping_target_relid	4
#define Anum_mapping_query			5
#define Anum_mapping_done_keys		6

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
static Oid
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

/* The mapping of mig with this id, or NULL (also for 0) */
LfMapping *
lf_mapping_by_id(LfMigration *mig, int id)
{
	ListCell   *lc;

	foreach(lc, mig->mappings)
		if (id != 0 && ((LfMapping *) lfirst(lc))->id == id)
			return lfirst(lc);
	return NULL;
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
	if (desc->natts >= Anum_migration_on_error)
	{
		Datum		on_error = heap_getattr(tup, Anum_migration_on_error, desc, &isnull);

		m->quarantine = !isnull && strcmp(TextDatumGetCString(on_error), "quarantine") == 0;
	}
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

	Oid			relid = DatumGetObjectId(heap_getattr(tup, Anum_input_relid, desc, &isnull));

	if (m == NULL)
	{
		/* a recently completed migration: which inputs were altered in place */
		m = migration_in(lf_recent_done, DatumGetInt32(heap_getattr(tup, Anum_input_migration_id,
																	desc, &isnull)));
		if (m == NULL)
			return;
	}
	else
		m->inputs = lappend_oid(m->inputs, relid);
	if (DatumGetBool(heap_getattr(tup, Anum_input_in_place, desc, &isnull)))
	{
		Datum		copy = (Datum) 0;

		m->in_place = lappend_oid(m->in_place, relid);
		/* the copy that took its name; of an older catalog, unknown */
		if (desc->natts >= Anum_input_in_place_copy)
			copy = heap_getattr(tup, Anum_input_in_place_copy, desc, &isnull);
		if (desc->natts >= Anum_input_in_place_copy && !isnull)
			m->in_place_targets = lappend_oid(m->in_place_targets, DatumGetObjectId(copy));
		else
			m->in_place_unknown = lappend_oid(m->in_place_unknown, relid);
	}
	if (!list_member_ptr(lf_active, m))
		return;
	if (desc->natts >= Anum_input_live_keys)
	{
		Datum		keys = heap_getattr(tup, Anum_input_live_keys, desc, &isnull);

		if (!isnull)
		{
			m->live = lappend_oid(m->live, relid);
			m->live_first_keys = lappend_oid(m->live_first_keys, DatumGetObjectId(keys));
		}
	}
}

/*
 * Parsed mapping queries, by catalog tuple (id and inserting xid: the row is
 * never updated, and a mapping id given again after DROP EXTENSION comes
 * with another xid).  A worker loads the cache twice a batch, and every
 * load detoasted and parsed the stored trees again (pg_strtok was among
 * the top functions of a profile of 100-row batches).  Each load gets a
 * copy (the owner is set in it).  Bounded: the whole map is dropped when it
 * holds LF_PARSED_MAX entries.
 */
#define LF_PARSED_MAX 256

typedef struct ParsedKey
{
	int32		id;
	TransactionId xmin;
} ParsedKey;

typedef struct ParsedMapping
{
	ParsedKey	key;
	Query	   *query;
} ParsedMapping;

static HTAB *parsed_mappings = NULL;
static MemoryContext parsed_cxt = NULL;

static Query *
parsed_mapping_query(HeapTuple tup, TupleDesc desc, int32 id)
{
	ParsedKey	key;
	ParsedMapping *pm;
	bool		found;
	bool		isnull;

	if (parsed_mappings != NULL && hash_get_num_entries(parsed_mappings) >= LF_PARSED_MAX)
	{
		hash_destroy(parsed_mappings);
		parsed_mappings = NULL;
		MemoryContextReset(parsed_cxt);
	}
	if (parsed_mappings == NULL)
	{
		HASHCTL		ctl = {0};

		if (parsed_cxt == NULL)
			parsed_cxt = AllocSetContextCreate(CacheMemoryContext, "leapfrog parsed mappings",
											   ALLOCSET_DEFAULT_SIZES);
		ctl.keysize = sizeof(ParsedKey);
		ctl.entrysize = sizeof(ParsedMapping);
		ctl.hcxt = parsed_cxt;
		parsed_mappings = hash_create("leapfrog parsed mappings", 16, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&key, 0, sizeof(key));
	key.id = id;
	key.xmin = HeapTupleHeaderGetRawXmin(tup->t_data);
	pm = hash_search(parsed_mappings, &key, HASH_FIND, NULL);
	if (pm == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(parsed_cxt);
		Query	   *query = stringToNode(TextDatumGetCString(heap_getattr(tup, Anum_mapping_query,
																		  desc, &isnull)));

		MemoryContextSwitchTo(old);
		/* entered only once parsed: an error leaves no empty entry */
		pm = hash_search(parsed_mappings, &key, HASH_ENTER, &found);
		pm->query = query;
	}
	return copyObject(pm->query);
}

/*
 * The table of done keys of mapping map of m, a GROUP BY mapping of a live
 * input tracked in place, or InvalidOid.
 */
static Oid
mapping_done_keys(HeapTuple tup, TupleDesc desc, LfMigration *m, LfMapping *map)
{
	bool		isnull;
	Datum		keys;
	ListCell   *li,
			   *lk;

	if (desc->natts >= Anum_mapping_done_keys)
	{
		keys = heap_getattr(tup, Anum_mapping_done_keys, desc, &isnull);
		return isnull ? InvalidOid : DatumGetObjectId(keys);
	}
	/* a catalog older than mapping.done_keys: one GROUP BY mapping per input */
	if (map->kind == LF_MAP_GROUPS)
		forboth(li, m->live, lk, m->live_first_keys)
			if (lfirst_oid(li) == map->inputs[0])
				return lfirst_oid(lk);
	return InvalidOid;
}

static void
load_mapping(HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	int			mig_id = DatumGetInt32(heap_getattr(tup, Anum_mapping_migration_id, desc, &isnull));
	Oid			target = DatumGetObjectId(heap_getattr(tup, Anum_mapping_target_relid, desc, &isnull));
	LfMigration *m = lf_migration_by_id(mig_id);
	LfMapping  *map;
	bool		recent = false;

	if (!m)
	{
		/*
		 * A recently completed migration: its targets, and which of them
		 * replace an input altered in place (snapshot.c); and its mappings,
		 * whose tables of done keys a statement that began before the
		 * completion still reads (leapfrog.group_migrated).
		 */
		m = migration_in(lf_recent_done, mig_id);
		if (m == NULL)
			return;
		recent = true;
	}
	m->targets = list_append_unique_oid(m->targets, target);
	if (list_member_oid(m->in_place_unknown,
						DatumGetObjectId(heap_getattr(tup, Anum_mapping_input_relid, desc, &isnull))))
		m->in_place_targets = list_append_unique_oid(m->in_place_targets, target);
	map = palloc0(sizeof(LfMapping));
	map->id = DatumGetInt32(heap_getattr(tup, Anum_mapping_id, desc, &isnull));
	map->input = DatumGetObjectId(heap_getattr(tup, Anum_mapping_input_relid, desc, &isnull));
	map->target = target;
	map->query = parsed_mapping_query(tup, desc, map->id);
	lf_set_owner_walker((Node *) map->query, &m->owner);
	map->natts = lf_mapping_natts(map->query);
	(void) lf_describe_units(map);
	map->done_keys = mapping_done_keys(tup, desc, m, map);
	if (OidIsValid(map->done_keys) && !recent)
		m->live_keys = list_append_unique_oid(m->live_keys, map->done_keys);
	m->mappings = lappend(m->mappings, map);
}

/* The number of columns of relation relid, or 0 if there is none */
static int
relation_natts(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	int			natts = 0;

	if (HeapTupleIsValid(tup))
	{
		natts = ((Form_pg_class) GETSTRUCT(tup))->relnatts;
		ReleaseSysCache(tup);
	}
	return natts;
}

/*
 * The mappings of m tracked by keys read their input through the groups not
 * in their table of done keys (lf_live_unmigrated_query).  A row mapping of
 * such an input shares its carrier's table (start.c, track_by_keys): its
 * rows move with that GROUP BY or join mapping's units, and it reads
 * through the carrier's key (a join's key columns on the row mapping's
 * side).  Of a live input only row mappings read, the first one is
 * the carrier, keyed by the input's primary key (lf_describe_row_keys).
 */
static void
load_unmigrated(LfMigration *m)
{
	ListCell   *lc,
			   *lc2;

	foreach(lc, m->mappings)
	{
		LfMapping  *map = lfirst(lc);
		LfMapping  *carrier = NULL;

		if (!OidIsValid(map->done_keys))
			continue;
		if (map->kind == LF_MAP_ROWS)
		{
			foreach(lc2, m->mappings)
			{
				LfMapping  *other = lfirst(lc2);

				if (other->kind != LF_MAP_ROWS && other->done_keys == map->done_keys)
				{
					carrier = other;
					break;
				}
				if (carrier == NULL && other->kind == LF_MAP_ROWS &&
					other->done_keys == map->done_keys)
					carrier = other;	/* the first row mapping, unless a GROUP BY one */
			}
			/* keyed by the primary key, which DDL cannot change meanwhile */
			if (carrier->kind == LF_MAP_ROWS && !carrier->row_keys &&
				SearchSysCacheExists1(RELOID, ObjectIdGetDatum(carrier->inputs[0])) &&
				lf_describe_row_keys(carrier) != NULL)
				elog(ERROR, "leapfrog: input %u of mapping %d has no primary key",
					 carrier->inputs[0], carrier->id);
			if (carrier != map)
			{
				int			i = lf_unit_input_index(carrier, map->input);

				if (i < 0)
					elog(ERROR, "leapfrog: mapping %d does not read input %u of mapping %d",
						 carrier->id, map->input, map->id);
				carrier->carries_rows[i] = true;
				map->nkeys = carrier->nkeys;
				memcpy(map->keys[0], carrier->keys[i], sizeof(map->keys[0]));
				memcpy(map->eqops, carrier->eqops, sizeof(map->eqops));
				memcpy(map->collations, carrier->collations, sizeof(map->collations));
				/* the carrier's done keys, read from input i's columns */
				memcpy(map->keytypes, carrier->keytypes, sizeof(map->keytypes));
				memcpy(map->keylens, carrier->keylens, sizeof(map->keylens));
				memcpy(map->keybyvals, carrier->keybyvals, sizeof(map->keybyvals));
				memcpy(map->keyeqops, carrier->keyeqops, sizeof(map->keyeqops));
				memcpy(map->keyinops[0], carrier->keyinops[i], sizeof(map->keyinops[0]));
				memcpy(map->keycasts[0], carrier->keycasts[i], sizeof(map->keycasts[0]));
				map->key_types_why = carrier->key_types_why;
				map->row_sides[0] = i;
			}
		}
		/* a join's keys with NULLs are rows (LF_KEY_ROW): its done keys have them */
		map->null_rows = relation_natts(map->done_keys) == map->nkeys + 2;
		/* both are there unless dropped behind the DDL guard's back */
		if (map->nkeys > 0 &&
			SearchSysCacheExists1(RELOID, ObjectIdGetDatum(map->inputs[0])) &&
			SearchSysCacheExists1(RELOID, ObjectIdGetDatum(map->done_keys)))
			map->unmigrated = lf_live_unmigrated_query(map);
	}
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
		if (lf_active != NIL || lf_recent_done != NIL)
			scan_table(lf_catalog_table("input"), snap, load_input);
		if (lf_active != NIL || lf_recent_done != NIL)
			scan_table(lf_catalog_table("mapping"), snap, load_mapping);
		foreach(lc, lf_active)
		{
			load_unmigrated(lfirst(lc));
			load_fkeys(lfirst(lc), snap);
		}
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

/* Is any migration active?  With none, the hooks' whole cost. */
bool
lf_any_active(void)
{
	if (!lf_cache_valid)
		lf_cache_load();
	return lf_active != NIL;
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

/*
 * The running migration (not mig) still filling table relid, an input of
 * mig: mig is chained after it.  NULL if none.
 */
LfMigration *
lf_upstream_of(LfMigration *mig, Oid relid)
{
	LfMigration *up = lf_migration_by_target(relid);

	return up != mig ? up : NULL;
}

/* Is some input of mig still being filled by an earlier migration? */
bool
lf_has_upstream(LfMigration *mig)
{
	ListCell   *lc;

	foreach(lc, mig->inputs)
		if (lf_upstream_of(mig, lfirst_oid(lc)))
			return true;
	return false;
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
 * The processes holding a lock that conflicts with mode on tag, as "pid,
 * pid", or "" (for messages that name who blocks a lock).
 */
char *
lf_lock_holders(const LOCKTAG *tag, LOCKMODE mode)
{
	StringInfoData pids;

	initStringInfo(&pids);
	for (VirtualTransactionId *h = GetLockConflicts(tag, mode, NULL);
		 VirtualTransactionIdIsValid(*h); h++)
	{
		PGPROC	   *proc = BackendIdGetProc(h->backendId);

		if (proc)
			appendStringInfo(&pids, "%s%d", pids.len ? ", " : "", proc->pid);
	}
	return pids.data;
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

/*
 * Is migration migration_id still running (or failed), now that the caller
 * holds a lock on one of its tables?  A lock this transaction held already
 * reads no invalidation, and a table's existence proves nothing (a
 * completion leaves a live input's table of done keys while a writer holds
 * the table): read the invalidations, and ask the cache again.
 */
bool
lf_still_running(int migration_id)
{
	AcceptInvalidationMessages();
	if (!lf_cache_valid)
		lf_cache_load();
	return lf_migration_by_id(migration_id) != NULL;
}

bool
lf_is_input(Oid relid)
{
	return lf_migration_by_input(relid) != NULL;
}

/* The relation's schema-qualified, quoted name. */
char *
lf_relation_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/* ---------------------------------------------------------------------
 * Reads and writes of the catalog tables
 *
 * Every statement on the catalog runs here, through SPI, as the catalog's
 * owner (it alone may write it) and with search_path = pg_catalog, pg_temp,
 * every operator schema-qualified: nothing a caller planted takes part.
 * Each function connects to SPI itself and copies what it returns into the
 * caller's memory context.
 * ---------------------------------------------------------------------
 */
static void
catalog_sql(const char *sql, int nargs, Oid *types, Datum *values, bool read_only,
			int expect)
{
	LfSavedUser saved = lf_become(lf_catalog_owner(), 0);
	int			nest = NewGUCNestLevel();
	int			rc;

	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	rc = SPI_execute_with_args(sql, nargs, types, values, NULL, read_only, 0);
	AtEOXact_GUC(true, nest);
	lf_unbecome(saved);
	if (rc != expect)
		elog(ERROR, "leapfrog catalog statement failed: %s", SPI_result_code_string(rc));
}

static void
spi_connect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/* A new migration, running; its id. */
int
lf_catalog_add_migration(const char *name, Oid owner, const char *script, const char *on_error)
{
	Oid			types[4] = {TEXTOID, OIDOID, TEXTOID, TEXTOID};
	Datum		values[4] = {CStringGetTextDatum(name), ObjectIdGetDatum(owner),
	CStringGetTextDatum(script), CStringGetTextDatum(on_error)};
	bool		isnull;
	int			id;

	spi_connect();
	catalog_sql("INSERT INTO leapfrog.migration (name, owner, script, on_error) VALUES ($1, $2, $3, $4) RETURNING id",
				4, types, values, false, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	return id;
}

void
lf_catalog_add_input(int migration_id, Oid relid, const char *orig_name, bool in_place,
					 Oid live_keys, Oid in_place_copy)
{
	Oid			types[6] = {INT4OID, OIDOID, TEXTOID, BOOLOID, OIDOID, OIDOID};
	Datum		values[6] = {Int32GetDatum(migration_id), ObjectIdGetDatum(relid),
		CStringGetTextDatum(orig_name), BoolGetDatum(in_place), ObjectIdGetDatum(live_keys),
	ObjectIdGetDatum(in_place_copy)};

	spi_connect();

	/*
	 * A finished migration's row for this OID is stale: its retired table
	 * was dropped, or the OID could not name a table again (OIDs wrap
	 * around).  It goes, with its mapping rows, so that the OID is this
	 * migration's input only.
	 */
	catalog_sql("DELETE FROM leapfrog.input i USING leapfrog.migration m "
				"WHERE i.relid OPERATOR(pg_catalog.=) $2 "
				"AND m.id OPERATOR(pg_catalog.=) i.migration_id "
				"AND m.state OPERATOR(pg_catalog.=) 'done' "
				"AND $1 OPERATOR(pg_catalog.<>) i.migration_id",
				2, types, values, false, SPI_OK_DELETE);
	if (get_attnum(lf_catalog_table("input"), "in_place_copy") != InvalidAttrNumber)
		catalog_sql("INSERT INTO leapfrog.input (migration_id, relid, orig_name, in_place, live_keys, in_place_copy) "
					"VALUES ($1, $2, $3, $4, NULLIF($5, '0'::pg_catalog.oid), NULLIF($6, '0'::pg_catalog.oid))",
					6, types, values, false, SPI_OK_INSERT);
	else
		catalog_sql("INSERT INTO leapfrog.input (migration_id, relid, orig_name, in_place, live_keys) "
					"VALUES ($1, $2, $3, $4, NULLIF($5, '0'::pg_catalog.oid))", 5, types, values, false,
					SPI_OK_INSERT);
	SPI_finish();
}

/* Whether the catalog has mapping.done_keys (a 0.1 catalog from before it has not). */
static bool
mapping_has_done_keys(void)
{
	return get_attnum(lf_catalog_table("mapping"), "done_keys") != InvalidAttrNumber;
}

void
lf_catalog_add_mapping(int migration_id, Oid input, Oid target, const char *query,
					   Oid done_keys)
{
	Oid			types[5] = {INT4OID, OIDOID, OIDOID, TEXTOID, OIDOID};
	Datum		values[5] = {Int32GetDatum(migration_id), ObjectIdGetDatum(input),
		ObjectIdGetDatum(target), CStringGetTextDatum(query), ObjectIdGetDatum(done_keys)};

	spi_connect();
	if (!mapping_has_done_keys())
	{
		/* a catalog older than mapping.done_keys: input.live_keys only */
		catalog_sql("SELECT FROM leapfrog.input WHERE relid OPERATOR(pg_catalog.=) $2 "
					"AND live_keys IS DISTINCT FROM NULLIF($5, '0'::pg_catalog.oid)",
					5, types, values, true, SPI_OK_SELECT);
		if (OidIsValid(done_keys) && SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("the extension's catalog predates several GROUP BY mappings of one live table"),
					 errhint("Recreate the extension when no migration runs: DROP EXTENSION leapfrog; CREATE EXTENSION leapfrog;")));
		catalog_sql("INSERT INTO leapfrog.mapping (migration_id, input_relid, target_relid, query) "
					"VALUES ($1, $2, $3, $4)", 4, types, values, false, SPI_OK_INSERT);
	}
	else
		catalog_sql("INSERT INTO leapfrog.mapping (migration_id, input_relid, target_relid, query, done_keys) "
					"VALUES ($1, $2, $3, $4, NULLIF($5, '0'::pg_catalog.oid))", 5, types, values, false,
					SPI_OK_INSERT);
	SPI_finish();
}

bool
lf_catalog_name_taken(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	bool		taken;

	spi_connect();
	catalog_sql("SELECT 1 FROM leapfrog.migration WHERE name OPERATOR(pg_catalog.=) $1",
				1, types, values, false, SPI_OK_SELECT);
	taken = SPI_processed > 0;
	SPI_finish();
	return taken;
}

/* The state of a migration by name (NULL if unknown), and its error. */
char *
lf_catalog_state(const char *name, char **error)
{
	MemoryContext caller = CurrentMemoryContext;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	char	   *state = NULL;

	spi_connect();
	catalog_sql("SELECT state, error FROM leapfrog.migration WHERE name OPERATOR(pg_catalog.=) $1",
				1, types, values, false, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		char	   *s = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		char	   *e = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		state = MemoryContextStrdup(caller, s);
		if (error)
			*error = e ? MemoryContextStrdup(caller, e) : NULL;
	}
	SPI_finish();
	return state;
}

/*
 * Mark a migration done, with its input row count: the progress log plus
 * pending, this transaction's rows not logged yet (the log is folded and
 * emptied).  False if it was done already: another worker, or complete(),
 * was first (this UPDATE waited for its row lock and found it done).
 */
bool
lf_catalog_mark_done(int migration_id, int64 pending)
{
	Oid			types[2] = {INT4OID, INT8OID};
	Datum		values[2] = {Int32GetDatum(migration_id), Int64GetDatum(pending)};
	bool		marked;

	spi_connect();
	catalog_sql("UPDATE leapfrog.migration SET state = 'done', error = NULL, "
				"finished_at = pg_catalog.clock_timestamp(), "
				"done_xid = pg_catalog.pg_current_xact_id(), "
				"tuples_total = (SELECT COALESCE(pg_catalog.sum(n), 0) "
				"FROM leapfrog.progress WHERE migration_id OPERATOR(pg_catalog.=) $1) "
				"OPERATOR(pg_catalog.+) $2 "
				"WHERE id OPERATOR(pg_catalog.=) $1 AND state OPERATOR(pg_catalog.<>) 'done'",
				2, types, values, false, SPI_OK_UPDATE);
	marked = SPI_processed > 0;
	if (marked)
	{
		catalog_sql("DELETE FROM leapfrog.progress WHERE migration_id OPERATOR(pg_catalog.=) $1",
					1, types, values, false, SPI_OK_DELETE);
		/* rows that failed once and moved after all */
		catalog_sql("DELETE FROM leapfrog.failed_row WHERE migration_id OPERATOR(pg_catalog.=) $1",
					1, types, values, false, SPI_OK_DELETE);
	}
	SPI_finish();
	if (marked)
		lf_invalidate_all();
	return marked;
}

/* A migration without mappings is done as soon as it starts. */
void
lf_catalog_mark_started_done(int migration_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(migration_id)};

	spi_connect();
	catalog_sql("UPDATE leapfrog.migration SET state = 'done', "
				"finished_at = pg_catalog.clock_timestamp(), tuples_total = 0, "
				"done_xid = pg_catalog.pg_current_xact_id() "
				"WHERE id OPERATOR(pg_catalog.=) $1", 1, types, values, false, SPI_OK_UPDATE);
	SPI_finish();
}

void
lf_catalog_mark_failed(int migration_id, const char *error)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(migration_id), CStringGetTextDatum(error)};

	spi_connect();
	catalog_sql("UPDATE leapfrog.migration SET state = 'failed', error = $2 "
				"WHERE id OPERATOR(pg_catalog.=) $1 AND state OPERATOR(pg_catalog.=) 'running'",
				2, types, values, false, SPI_OK_UPDATE);
	SPI_finish();
	lf_invalidate_all();
}

/* Record the input row count, unless one is recorded already. */
void
lf_catalog_set_total(int migration_id, int64 total)
{
	Oid			types[2] = {INT4OID, INT8OID};
	Datum		values[2] = {Int32GetDatum(migration_id), Int64GetDatum(total)};

	spi_connect();
	catalog_sql("UPDATE leapfrog.migration SET tuples_total = $2 "
				"WHERE id OPERATOR(pg_catalog.=) $1 AND tuples_total IS NULL",
				2, types, values, false, SPI_OK_UPDATE);
	SPI_finish();
}

/* Rows logged as migrated, read on the active snapshot. */
int64
lf_catalog_progress_sum(int migration_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(migration_id)};
	bool		isnull;
	int64		sum;

	spi_connect();
	catalog_sql("SELECT COALESCE(pg_catalog.sum(n), 0)::pg_catalog.int8 FROM leapfrog.progress "
				"WHERE migration_id OPERATOR(pg_catalog.=) $1",
				1, types, values, true, SPI_OK_SELECT);
	sum = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	return sum;
}

/*
 * Retired tables of finished migrations that still exist, in cxt: those
 * still in leapfrog_retired.  An input row outlives its table, and after
 * the OIDs wrap around its OID may name a user's table (lf_drop_retired
 * checks the schema again under its lock).
 */
List *
lf_catalog_done_inputs(MemoryContext cxt)
{
	List	   *result = NIL;
	uint64		i;

	spi_connect();
	/* the retired tables and tables of done keys still in leapfrog_retired */
	catalog_sql(psprintf("SELECT t.relid FROM leapfrog.input i JOIN leapfrog.migration m "
						 "ON m.id OPERATOR(pg_catalog.=) i.migration_id, "
						 "LATERAL (VALUES (i.relid), (i.live_keys)%s) t(relid) "
						 "WHERE m.state OPERATOR(pg_catalog.=) 'done' "
						 "AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c "
						 "JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
						 "WHERE c.oid OPERATOR(pg_catalog.=) t.relid "
						 "AND n.nspname OPERATOR(pg_catalog.=) 'leapfrog_retired')",
						 mapping_has_done_keys() ?
						 " UNION ALL SELECT p.done_keys FROM leapfrog.mapping p "
						 "WHERE p.input_relid OPERATOR(pg_catalog.=) i.relid" : ""),
				0, NULL, NULL, false, SPI_OK_SELECT);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		MemoryContext old = MemoryContextSwitchTo(cxt);

		result = lappend_oid(result,
							 DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 1, &isnull)));
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return result;
}

/*
 * One row of the progress log (progress.c), inserted directly: a tuple and
 * its index entries, no statement.  The log is the extension's own table.
 */
void
lf_catalog_log_progress(int migration_id, int64 n)
{
	Relation	rel = table_open(lf_catalog_table("progress"), RowExclusiveLock);
	Datum		values[2] = {Int32GetDatum(migration_id), Int64GetDatum(n)};
	bool		nulls[2] = {false, false};
	HeapTuple	tup;

	if (RelationGetDescr(rel)->natts != 2)
		elog(ERROR, "leapfrog: unexpected definition of leapfrog.progress");
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	CatalogTupleInsert(rel, tup);
	heap_freetuple(tup);
	table_close(rel, RowExclusiveLock);
}

/* ---------------------------------------------------------------------
 * Failed rows (failed.c)
 * ---------------------------------------------------------------------
 */
/* Record (or record again) a row the worker could not migrate. */
void
lf_catalog_add_failed_row(int migration_id, Oid input, ItemPointer tid,
						  const char *sqlstate, const char *error)
{
	Oid			types[5] = {INT4OID, OIDOID, TIDOID, TEXTOID, TEXTOID};
	Datum		values[5] = {Int32GetDatum(migration_id), ObjectIdGetDatum(input),
		ItemPointerGetDatum(tid), CStringGetTextDatum(sqlstate), CStringGetTextDatum(error)};

	spi_connect();
	catalog_sql("INSERT INTO leapfrog.failed_row (migration_id, input_relid, row_tid, sqlstate, error) "
				"VALUES ($1, $2, $3, $4, $5) ON CONFLICT (migration_id, input_relid, row_tid) "
				"DO UPDATE SET sqlstate = excluded.sqlstate, error = excluded.error, "
				"failed_at = excluded.failed_at",
				5, types, values, false, SPI_OK_INSERT);
	SPI_finish();
}

/*
 * Forget a failed row (corrected, quarantined); true if it was recorded,
 * with its SQLSTATE and error in *sqlstate and *error (caller's context).
 */
bool
lf_catalog_forget_failed_row(int migration_id, Oid input, ItemPointer tid,
							 char **sqlstate, char **error)
{
	MemoryContext caller = CurrentMemoryContext;
	Oid			types[3] = {INT4OID, OIDOID, TIDOID};
	Datum		values[3] = {Int32GetDatum(migration_id), ObjectIdGetDatum(input),
	ItemPointerGetDatum(tid)};
	bool		found;

	spi_connect();
	catalog_sql("DELETE FROM leapfrog.failed_row WHERE migration_id OPERATOR(pg_catalog.=) $1 "
				"AND input_relid OPERATOR(pg_catalog.=) $2 AND row_tid OPERATOR(pg_catalog.=) $3 "
				"RETURNING sqlstate, error",
				3, types, values, false, SPI_OK_DELETE_RETURNING);
	found = SPI_processed > 0;
	*sqlstate = *error = NULL;
	if (found)
	{
		*sqlstate = MemoryContextStrdup(caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
		*error = MemoryContextStrdup(caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2));
	}
	SPI_finish();
	return found;
}

/* The retired table of migration_id whose name before start() was orig_name */
Oid
lf_catalog_input_named(int migration_id, const char *orig_name)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(migration_id), CStringGetTextDatum(orig_name)};
	Oid			relid = InvalidOid;
	bool		isnull;

	spi_connect();
	catalog_sql("SELECT relid FROM leapfrog.input WHERE migration_id OPERATOR(pg_catalog.=) $1 "
				"AND orig_name OPERATOR(pg_catalog.=) $2",
				2, types, values, false, SPI_OK_SELECT);
	if (SPI_processed > 0)
		relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	return relid;
}

/* A failed migration runs again; false if it was not failed. */
bool
lf_catalog_resume(int migration_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(migration_id)};
	bool		resumed;

	spi_connect();
	catalog_sql("UPDATE leapfrog.migration SET state = 'running', error = NULL "
				"WHERE id OPERATOR(pg_catalog.=) $1 AND state OPERATOR(pg_catalog.=) 'failed'",
				1, types, values, false, SPI_OK_UPDATE);
	resumed = SPI_processed > 0;
	SPI_finish();
	lf_invalidate_all();
	return resumed;
}
