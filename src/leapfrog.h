/*-------------------------------------------------------------------------
 * leapfrog.h
 *	  Shared declarations of the leapfrog extension.
 *
 * Files and what they own:
 *	init.c		module load: hook installation, shared memory, the launcher
 *	guc.c		the settings (leapfrog.*), and whether the module was preloaded
 *	catalog.c	the catalog tables: every read and write, and the backend-local
 *				cache of active migrations and its invalidation
 *	snapshot.c	which migration state a statement's snapshot sees
 *	start.c		leapfrog.start(): script analysis and the atomic switch
 *	alter.c		which ALTER TABLE commands in a script are catalog changes
 *	replace.c	the lazy replacement of a table a script alters the slow way
 *	relevance.c	planner hook: which input rows a statement needs
 *	compute.c	reads that compute the eager rows instead of migrating them
 *	estimate.c	planner size estimates of new tables while they fill
 *	scan.c		the LeapfrogMigrate custom scan that carries that plan
 *	migrate.c	ExecutorStart hook and the row migration step itself
 *	rowcopy.c	a step's copy of its rows into a row mapping's target, without
 *				starting the INSERT's plan
 *	probe.c		a relevance plan that is one index look-up, without the executor;
 *				the look-up that tells a computing read its unit is migrated
 *	units.c		units of group and join mappings: their keys and their rows
 *	live.c		inputs that stay live, tracked in place: migrated keys, claims,
 *				the row trigger
 *	progress.c	the progress log: rows each transaction migrated
 *	complete.c	rows left, and the completion of a migration
 *	worker.c	launcher and per-database background workers
 *	pacing.c	how much CPU the workers take: what the server leaves spare,
 *				never less than a floor
 *	utility.c	ProcessUtility hook: DDL guard on tables under migration
 *	api.c		leapfrog.complete(), wait(), remaining()
 *	failed.c	rows that cannot be migrated: listing, correction, quarantine,
 *				resume
 *-------------------------------------------------------------------------
 */
#ifndef LEAPFROG_H
#define LEAPFROG_H

#include "postgres.h"

#include "access/xact.h"
#include "executor/execdesc.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"
#include "optimizer/planner.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "utils/memutils.h"
#include "access/transam.h"
#include "utils/resowner.h"
#include "utils/snapshot.h"

#ifndef DatumGetItemPointer
#define DatumGetItemPointer(X) ((ItemPointer) DatumGetPointer(X))
#endif
#ifndef ItemPointerGetDatum
#define ItemPointerGetDatum(X) PointerGetDatum(X)
#endif

/*
 * Running as another role: the catalog's owner (catalog.c), a migration's
 * owner (its steps, the ANALYZE of its tables).
 */
typedef struct LfSavedUser
{
	Oid			user;
	int			sec;
} LfSavedUser;

static inline LfSavedUser
lf_become(Oid user, int extra_sec_flags)
{
	LfSavedUser saved;

	GetUserIdAndSecContext(&saved.user, &saved.sec);
	SetUserIdAndSecContext(user, saved.sec | SECURITY_LOCAL_USERID_CHANGE | extra_sec_flags);
	return saved;
}

static inline void
lf_unbecome(LfSavedUser saved)
{
	SetUserIdAndSecContext(saved.user, saved.sec);
}

/* GUCs (guc.c) */
extern bool lf_background;
extern bool lf_track_live_inputs;
extern int	lf_background_delay;
extern int	lf_batch_size;
extern int	lf_background_naptime;
extern double lf_background_headroom;
extern double lf_background_min_share;
extern int	lf_background_workers;
extern int	lf_lock_timeout;
extern int	lf_lock_retries;

typedef enum LfReadMode
{
	LF_READ_MIGRATE,			/* reads migrate the rows they need */
	LF_READ_COMPUTE				/* plain reads compute them (compute.c) */
} LfReadMode;
extern int	lf_read_mode;

#define LF_MAX_WORKERS 8		/* background workers per database */

extern bool lf_loaded;			/* true when preloaded */
extern void lf_require_preload(void);
extern void lf_define_gucs(void);

/*
 * In a PG_CATCH block: the error, copied into cxt, and what failed rolled
 * back: the internal subtransaction the caller began (subxact; then cxt and
 * owner are made current again, as they were before it began), or the
 * transaction (a background worker's own).
 */
static inline ErrorData *
lf_abort_with_error(MemoryContext cxt, bool subxact, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	if (subxact)
	{
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	else
		AbortCurrentTransaction();
	return edata;
}

/*
 * An error that says nothing about the rows a step migrates: a lock or
 * serialization conflict, a cancel.  The rows stay for later.
 */
static inline bool
lf_transient_error(ErrorData *e)
{
	return e->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
		e->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
		e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		e->sqlerrcode == ERRCODE_QUERY_CANCELED;
}

/* catalog.c */
typedef enum LfMappingKind
{
	LF_MAP_ROWS,				/* 1:1, filters, splits: the unit is a row */
	LF_MAP_GROUPS,				/* GROUP BY: the unit is a group (units.c) */
	LF_MAP_JOIN					/* two-table equi-join: the unit is a join key */
} LfMappingKind;

typedef struct LfMapping
{
	int			id;
	Oid			target;			/* new table */
	Oid			input;			/* retired table whose ctids relevance finds:
								 * the input, or a join's preserved side */
	int			natts;			/* attributes of target */
	Query	   *query;			/* SELECT <natts exprs>, lf_ctid FROM ... */
	/* units (units.c, lf_describe_units) */
	LfMappingKind kind;
	int			ninputs;		/* 1, or 2 for a join */
	Oid			inputs[2];		/* in the order units claim them */
	int			rtis[2];		/* their range table indexes in query */
	JoinType	jointype;		/* of a join: which sides are preserved */
	int			nkeys;			/* GROUPS, JOIN, row_keys: key columns */
	AttrNumber	keys[2][INDEX_MAX_KEYS];	/* per input */
	Oid			eqops[INDEX_MAX_KEYS];	/* inputs[0] key = inputs[1] key */
	Oid			collations[INDEX_MAX_KEYS];

	/*
	 * The key as a table of done keys holds it (units.c,
	 * lf_describe_key_types): of a join whose key columns differ in type
	 * (int and bigint, say), the type the other side converts to
	 * implicitly; otherwise input 0's.  key_types_why: why not (no such
	 * type), or NULL.
	 */
	Oid			keytypes[INDEX_MAX_KEYS];
	int16		keylens[INDEX_MAX_KEYS];
	bool		keybyvals[INDEX_MAX_KEYS];
	Oid			keyeqops[INDEX_MAX_KEYS];	/* keytype = keytype */
	Oid			keyinops[2][INDEX_MAX_KEYS];	/* keytype = input i's column */
	Oid			keycasts[2][INDEX_MAX_KEYS];	/* input i's value to keytype, or
												 * none (the same or binary
												 * coercible) */
	const char *key_types_why;
	/* a mapping of an input tracked by keys (live.c) */
	Oid			done_keys;		/* its table of migrated keys, or InvalidOid */
	Query	   *unmigrated;		/* query restricted to the groups not in it */
	bool		row_keys;		/* a row mapping whose rows are its units, by
								 * the input's primary key, with done_keys of
								 * its own (a live input only row mappings
								 * read) */
	bool		null_rows;		/* a key with NULLs is a row (LF_KEY_ROW):
								 * a join's, or a row mapping's it carries */
	int			row_sides[2];	/* the input a row of input i is recorded as */
	bool		carries_rows[2];	/* a row mapping of input i rides on its
									 * units (catalog.c, load_unmigrated) */
	/* of a mapping tracking a live input i: columns its units' copies read */
	bool		unit_cols_known[2];	/* unit_cols and unit_cols_all are set */
	bool		unit_cols_all[2];	/* a whole row, a system or generated column */
	Bitmapset  *unit_cols[2];	/* attribute numbers */
} LfMapping;

/*
 * A key of a mapping's unit, as a Datum array: its nkeys values, then, at
 * key[nkeys], a mask of the NULL ones (bit k for key column k; a NULL
 * value is 0).  NULLs are equal in a table tracked by keys (live.c), so a
 * GROUP BY's NULL group is one unit.  A join's row with a NULL key matches
 * nothing: it is a unit of its own, the row, at key[nkeys + 1] (its block
 * + 1; 0 for a key that is not a row) and key[nkeys + 2] (its input << 16
 * | its offset).  Only retired tables have them: a join's live input whose
 * key may be NULL is replaced where the join preserves it, and elsewhere
 * such a row is no unit (live.c, lf_key_joins_nothing).
 */
#define LF_KEY_MAX (INDEX_MAX_KEYS + 3)
#define LF_KEY_SIZE(nkeys) (((nkeys) + 3) * sizeof(Datum))
#define LF_KEY_NULLS(nkeys, key) DatumGetUInt32((key)[(nkeys)])
#define LF_KEY_ISNULL(nkeys, key, k) ((LF_KEY_NULLS(nkeys, key) & (1u << (k))) != 0)
#define LF_KEY_ROW(nkeys, key) (DatumGetUInt32((key)[(nkeys) + 1]) != 0)
#define LF_KEY_ROW_INPUT(nkeys, key) ((int) (DatumGetUInt32((key)[(nkeys) + 2]) >> 16))
static inline void
lf_key_set_row(int nkeys, Datum *key, int input, ItemPointer tid)
{
	key[nkeys + 1] = tid ? UInt32GetDatum(ItemPointerGetBlockNumber(tid) + 1) : (Datum) 0;
	key[nkeys + 2] = tid ? UInt32GetDatum(((uint32) input << 16) | ItemPointerGetOffsetNumber(tid)) :
		(Datum) 0;
}
static inline void
lf_key_get_row(int nkeys, Datum *key, ItemPointer tid)
{
	ItemPointerSet(tid, DatumGetUInt32(key[nkeys + 1]) - 1,
				   (OffsetNumber) (DatumGetUInt32(key[nkeys + 2]) & 0xFFFF));
}
/* each pattern of NULLs has a test of its own (lf_live_unmigrated_query) */
#define LF_MAX_NULLABLE_KEYS 4

/* The rows of one unit of a group or join mapping, per input, sorted */
typedef struct LfUnit
{
	int			n[2];
	ItemPointerData *tids[2];
	Datum	   *key;			/* its key (LF_KEY_SIZE), as a table of
								 * done keys holds it (keytypes) */
} LfUnit;

/*
 * A foreign key of a new table: a statement that deletes or updates rows of
 * the parent first migrates the rows of the child that reference them
 * (relevance.c), so that the key's action or check sees them, as eagerly.
 */
typedef struct LfForeignKey
{
	Oid			child;			/* a new table of the migration */
	Oid			parent;			/* the table it references */
	int			nkeys;
	AttrNumber	child_keys[INDEX_MAX_KEYS];
	AttrNumber	parent_keys[INDEX_MAX_KEYS];
	Oid			eqops[INDEX_MAX_KEYS];	/* parent key = child key */
} LfForeignKey;

/* The transaction that started or completed a migration (snapshot.c) */
typedef struct LfXact
{
	FullTransactionId fxid;		/* top-level; invalid: older than any snapshot */
	bool		all_see;		/* every snapshot, now and later, sees it */
} LfXact;

typedef struct LfMigration
{
	int			id;
	char	   *name;
	Oid			owner;
	bool		failed;
	bool		quarantine;		/* on_error => 'quarantine' (failed.c) */
	TimestampTz started_at;
	LfXact		started;		/* the transaction of start() */
	LfXact		done;			/* of the completion (lf_recent_done only) */
	List	   *inputs;			/* OIDs of retired tables (lf_active only) */
	List	   *in_place;		/* those altered in place eagerly (replace.c) */
	List	   *live;			/* inputs tracked in place (live.c) ... */
	List	   *live_first_keys;	/* ... their first mapping's table of done keys */
	List	   *live_keys;		/* every mapping's table of done keys */
	List	   *mappings;		/* LfMapping * (lf_active only) */
	List	   *targets;		/* OIDs of new tables */
	List	   *in_place_targets;	/* those that replace an input altered in
									 * place: its copy, which took its name */
	List	   *in_place_unknown;	/* inputs in_place whose copy an older
									 * catalog did not record: all their targets */
	List	   *fkeys;			/* LfForeignKey * of the targets (lf_active only) */
} LfMigration;

extern bool lf_cache_valid;
extern List *lf_active;			/* LfMigration *, running or failed */
extern List *lf_recent_done;	/* LfMigration *, done, not yet seen by every snapshot */
extern void lf_cache_init(void);
extern void lf_cache_load(void);
extern bool lf_any_active(void);
extern LfMigration *lf_migration_by_id(int id);
extern LfMapping *lf_mapping_by_id(LfMigration *mig, int id);
extern LfMigration *lf_migration_by_input(Oid input);
extern LfMigration *lf_migration_by_target(Oid target);
extern List *lf_mappings_for_target(Oid target);
extern LfMigration *lf_upstream_of(LfMigration *mig, Oid relid);
extern bool lf_has_upstream(LfMigration *mig);
extern bool lf_is_target(Oid relid);
extern List *lf_fkeys_referencing(Oid parent);
extern bool lf_is_input(Oid relid);
extern bool lf_lock_input_if_exists(Oid relid, LOCKMODE mode);
extern char *lf_lock_holders(const LOCKTAG *tag, LOCKMODE mode);
extern void lf_switch_lock(Oid relid, LOCKMODE mode);
extern bool lf_still_running(int migration_id);
extern Oid	lf_catalog_relid(void);
extern Oid	lf_catalog_owner(void);
extern void lf_invalidate_all(void);
extern Oid	lf_retired_namespace(void);
extern char *lf_relation_name(Oid relid);
extern int	lf_catalog_add_migration(const char *name, Oid owner, const char *script,
									 const char *on_error);
extern void lf_catalog_add_input(int migration_id, Oid relid, const char *orig_name,
								 bool in_place, Oid live_keys, Oid in_place_copy);
extern void lf_catalog_add_mapping(int migration_id, Oid input, Oid target, const char *query,
								   Oid done_keys);
extern bool lf_catalog_name_taken(const char *name);
extern char *lf_catalog_state(const char *name, char **error);
extern bool lf_catalog_mark_done(int migration_id, int64 pending);
extern void lf_catalog_mark_started_done(int migration_id);
extern void lf_catalog_mark_failed(int migration_id, const char *error);
extern void lf_catalog_set_total(int migration_id, int64 total);
extern int64 lf_catalog_progress_sum(int migration_id);
extern List *lf_catalog_done_inputs(MemoryContext cxt);
extern void lf_catalog_log_progress(int migration_id, int64 n);
extern void lf_catalog_add_failed_row(int migration_id, Oid input, ItemPointer tid,
									  const char *sqlstate, const char *error);
extern bool lf_catalog_forget_failed_row(int migration_id, Oid input, ItemPointer tid,
										 char **sqlstate, char **error);
extern Oid	lf_catalog_input_named(int migration_id, const char *orig_name);
extern bool lf_catalog_resume(int migration_id);

/* failed.c */
extern Oid	lf_quarantine(LfMigration *mig, Oid input, ItemPointer tid,
						  const char *sqlstate, const char *error);

/* units.c */
extern int	lf_mapping_natts(Query *q);
extern const char *lf_describe_units(LfMapping *m);
extern int	lf_unit_input_index(LfMapping *m, Oid relid);
extern LfMapping *lf_unit_mapping(LfMigration *mig, Oid input);
extern Oid	lf_unit_index(LfMapping *m, int i);
extern List *lf_units_of(LfMapping *m, int from, ItemPointer seeds, int nseeds,
						 Snapshot snap);
extern List *lf_units_by_keys(LfMapping *m, List *keys, Snapshot snap);
extern Datum lf_key_value(LfMapping *m, int i, int k, Datum v);
extern const char *lf_describe_row_keys(LfMapping *m);

/* live.c */
typedef enum LfLiveClaim
{
	LF_CLAIMED,					/* this transaction now migrates the group */
	LF_DONE						/* migrated, or being migrated by us */
} LfLiveClaim;
extern bool lf_tracks_keys(LfMapping *m, Oid input);
extern LfMapping *lf_keys_carrier(LfMigration *mig, LfMapping *m);
extern const char *lf_live_unsupported(LfMapping *m);
extern bool lf_column_not_null(Oid relid, AttrNumber att);
extern Oid	lf_live_track(LfMapping *m, int migration_id);
extern void lf_live_watch(Oid relid, Oid keys, Oid *trigger);
extern List *lf_live_trigger_tables(Oid keys);
extern Query *lf_live_unmigrated_query(LfMapping *m);
extern Node *lf_live_pinned_gate(LfMapping *m, List *conds, int varno);
extern List *lf_live_pinned_values(LfMapping *m, List *conds, int varno);
extern bool lf_reads_rows(Node *node);
extern bool lf_live_memo_migrated(LfMapping *m, Datum *values, bool *nulls);
extern void lf_live_eval_pinned(List *pinned, ParamListInfo params, EState **estate,
								Datum *values, bool *nulls);
extern bool lf_live_done_at(LfMapping *m, Datum *key, Snapshot snap);
extern void lf_live_pin(Query *sub, LfMapping *m, Node *gate);
typedef struct LfDoneKeys LfDoneKeys;
extern LfDoneKeys *lf_done_keys_open(LfMapping *m);
extern void lf_done_keys_close(LfDoneKeys *d);
extern bool lf_live_done(LfDoneKeys *d, LfMapping *m, Datum *key, Snapshot snap);
extern LfLiveClaim lf_live_claim(LfDoneKeys *d, LfMapping *m, Datum *key, Snapshot snap,
								 bool strict);
extern bool lf_live_claim_nowait(LfDoneKeys *d, LfMapping *m, Datum *key, bool look_first);
extern List *lf_live_range_keys(LfMapping *m, int i, Snapshot snap, BlockNumber lo, BlockNumber hi,
								List **tids);
extern void lf_live_tuple_key(LfMapping *m, int i, HeapTuple tup, TupleDesc desc, Datum *key);
extern bool lf_keys_equal(LfMapping *m, Datum *a, Datum *b);
extern bool lf_join_preserves(LfMapping *m, int i);
extern bool lf_key_joins_nothing(LfMapping *m, int i, Datum *key);
extern uint64 lf_live_rows_left(LfMapping *m, Oid relid, Snapshot snap);
extern uint64 lf_live_rows_from(LfMigration *mig, Oid input, Snapshot snap, BlockNumber *from,
								ItemPointerData *tids, uint64 max);

/* alter.c */
extern bool lf_alter_is_instant(AlterTableStmt *stmt, Oid relid, const char *text, char **why);
extern bool lf_alter_rewrites(AlterTableStmt *stmt, Oid relid);
extern bool lf_is_serial_type(TypeName *tn);

/* replace.c: a table replaced by an empty copy of itself and a mapping */
typedef struct LfReplacement
{
	Oid			old;			/* the table replaced, retired by start.c */
	Oid			clone;			/* its copy, which takes its name */
	char	   *nspname;
	char	   *relname;
	int			nsource;		/* the clone's attributes 1..nsource copy ... */
	AttrNumber *source;			/* ... these attributes of the old table */
	Node	  **using_expr;		/* per copied attribute: raw USING, or NULL */
	bool	   *retyped;		/* per copied attribute: its type changed */
	bool		columns_changed;	/* a column was added, dropped or renamed */
	bool		rewrites;		/* eagerly, a statement rewrote the table */
	List	   *pending_added;	/* (name, value) of columns being added ... */
	List	   *added;			/* ... then (attnum, value): a Const */
	/* read from the old table before it is retired */
	List	   *fkeys;			/* "ADD CONSTRAINT ..." of its foreign keys */
	List	   *referenced;		/* the copy's attnums other tables' keys reference */
	List	   *settings;		/* "SET (...)", "ALTER COLUMN ... SET STATISTICS" */
	List	   *comment;		/* its comment, if any */
	List	   *index_names;	/* in the order of its index list */
	List	   *stat_names;		/* (schema, name) of its extended statistics,
								 * in their order */
	List	   *identity;		/* (attnum, sequence name, last_value, is_called,
								 * type) */
	Oid			owner;
	char		replident;
	char	   *replident_index;
} LfReplacement;
extern LfReplacement *lf_replace_begin(Oid relid, const char *why);
extern void lf_replace_switch(LfReplacement *r);
extern void lf_replace_note(LfReplacement *r, AlterTableStmt *stmt);
extern void lf_replace_noted(LfReplacement *r);
extern Node *lf_replace_added_value(LfReplacement *r, AttrNumber attnum);
extern void lf_replace_check_valid(LfReplacement *r);

/* relevance.c */
extern void lf_install_planner_hook(void);
extern RangeTblEntry *lf_map_rte(LfMapping *m, RangeTblEntry *orig);
extern bool lf_mapping_filters(LfMapping *m);
extern Node *lf_raw_quals(Query *q, Node *quals);
extern bool lf_has_outer_refs(Node *node);
extern List *lf_own_conjuncts(Query *q, int rti);
extern PlannedStmt *lf_pull_plan(LfMapping *m, Node *quals, List **upstream);

/* estimate.c */
extern void lf_install_estimate_hook(void);

/* scan.c */
extern void lf_register_scan_methods(void);
extern PlannedStmt *lf_wrap_plan(PlannedStmt *stmt, List *items, List *computes,
								 Query *query, List *shortcut);
extern bool lf_plan_wrapped(PlannedStmt *stmt);
extern List *lf_plan_items(PlannedStmt *stmt);
extern Query *lf_plan_query(PlannedStmt *stmt);
extern List *lf_plan_shortcut(PlannedStmt *stmt);

/* compute.c */
extern bool lf_compute_forced;	/* COPY ... TO of a new table (utility.c) */
extern bool lf_compute_wanted(void);
extern PlannedStmt *lf_compute_plan(Query *parse, const char *query_string,
									int cursorOptions, ParamListInfo boundParams,
									planner_hook_type next);
extern PlannedStmt *lf_compute_shortcut(QueryDesc *qd, int eflags);

/*
 * One relevance plan: returns the ctids of input rows of `input` that the
 * statement may need.  Built by relevance.c, carried in the custom scan's
 * custom_private (scan.c) as a List indexed by these positions, read by
 * migrate.c.
 */
typedef enum LfItemField
{
	LF_ITEM_INPUT,				/* Integer: the retired table */
	LF_ITEM_MIGRATION,			/* Integer: the migration's id */
	LF_ITEM_PLAN,				/* PlannedStmt: SELECT ctid FROM <mapping> ... */
	LF_ITEM_DESC,				/* String: EXPLAIN's "Migrates:" line */
	LF_ITEM_STANDALONE,			/* Integer: reads nothing but its input (1),
								 * and calls no function that is not
								 * immutable, which may read other tables
								 * and give another answer in the next READ
								 * COMMITTED round (2: alone otherwise) */
	LF_ITEM_KIND,				/* Integer: LfItemKind */
	LF_ITEM_MAPPING,			/* Integer: of a live input read by several
								 * GROUP BY mappings, the one whose groups the
								 * rows' step migrates; 0: the input's units */
	LF_ITEM_PINNED,				/* List of Expr: the key values of the one
								 * group of a live mapping it can find, or NIL
								 * (lf_live_pinned_values) */
	LF_ITEM_NFIELDS
} LfItemField;

/* Which input rows a relevance plan finds */
typedef enum LfItemKind
{
	LF_NEEDS_ROWS,				/* rows the statement reads or writes */
	LF_NEEDS_KEYS,				/* rows whose unique keys it may write (INSERT,
								 * UPDATE of a key, MERGE) */
	LF_NEEDS_REFERENCING		/* rows that reference, by a foreign key, rows it
								 * deletes or updates */
} LfItemKind;

#define lf_item_input(item)		((Oid) intVal(list_nth((item), LF_ITEM_INPUT)))
#define lf_item_migration(item)	intVal(list_nth((item), LF_ITEM_MIGRATION))
#define lf_item_plan(item)		((PlannedStmt *) list_nth((item), LF_ITEM_PLAN))
#define lf_item_desc(item)		strVal(list_nth((item), LF_ITEM_DESC))
#define lf_item_standalone(item) \
	(intVal(list_nth((item), LF_ITEM_STANDALONE)) == 1 || \
	 (intVal(list_nth((item), LF_ITEM_STANDALONE)) == 2 && IsolationUsesXactSnapshot()))
#define lf_item_kind(item)		((LfItemKind) intVal(list_nth((item), LF_ITEM_KIND)))
#define lf_item_mapping(item)	intVal(list_nth((item), LF_ITEM_MAPPING))
#define lf_item_pinned(item)	((List *) list_nth((item), LF_ITEM_PINNED))

/* snapshot.c */
extern bool lf_xact_visible(LfXact *x, Snapshot snap);
extern bool lf_stmt_reads_any(PlannedStmt *stmt, List *relids);
extern bool lf_completions_visible(PlannedStmt *stmt, Snapshot snap, LfMigration **unseen,
								   bool *before_start);
extern void lf_snapshot_predates(const char *migration, const char *detail) pg_attribute_noreturn();

/* migrate.c */
extern void lf_install_executor_hook(void);
extern PlannedStmt *lf_replan(QueryDesc *qd, Query *query, int eflags);
extern int	lf_tid_cmp(const void *a, const void *b);
extern int	lf_tids_sort_unique(ItemPointerData *tids, int n);
extern uint64 lf_migrate_rows(LfMigration *mig, Oid input, LfMapping *only, ItemPointer tids,
							  int ntids);
/* rows a background step claimed (tids in TopMemoryContext) */
typedef struct LfClaim
{
	ItemPointerData *tids;
	int			n;
} LfClaim;
extern uint64 lf_migrate_range(LfMigration *mig, Oid input, BlockNumber lo, BlockNumber hi,
							   LfClaim *claim);
extern void lf_migrate_live_key(LfMigration *mig, LfMapping *m, int i, Datum *key);

/* rowcopy.c */
extern int	lf_copy_param(PlannedStmt *ps);
extern bool lf_bulk_batch;
extern bool lf_copy_rows(PlannedStmt *ps, int paramid, Snapshot snap, ParamListInfo params,
						 bool bulk_ok, uint64 *copied);

/* probe.c */
extern bool lf_probe_index(PlannedStmt *ps, Snapshot snap, ParamListInfo params,
						   void (*add) (void *arg, ItemPointer tid), void *arg);
extern bool lf_simple_value(Node *e, ParamListInfo params, bool speculative, Datum *out,
							bool *isnull);
extern void lf_eval_value(Expr *e, ParamListInfo params, EState **estate, Datum *out,
						  bool *isnull);
extern bool lf_has_parameter(Node *node);
extern List *lf_retired_pin(LfMigration *mig, LfMapping *m, List *conds, int varno,
							List **values);
extern bool lf_retired_pin_gone(List *pin, Datum *values, Snapshot snap);

/* progress.c */
extern void lf_progress_add(int migration_id, uint64 n);
extern int64 lf_progress_pending(int migration_id);

/* complete.c */
extern uint64 lf_rows_left(LfMigration *mig, Snapshot snap);
extern void lf_record_total(LfMigration *mig);
extern bool lf_try_complete(LfMigration *mig, List **analyze_later);
extern void lf_complete_now(LfMigration *mig);
extern void lf_analyze_targets(Oid owner, List *targets);
extern void lf_drop_retired(List *relids);
extern void lf_retired_join_extension(Oid relid, bool join);

/* pacing.c */
extern void lf_pacing_shmem_request(void);
extern void lf_pacing_shmem_startup(void);
extern void lf_pacing_register(void);
extern uint64 lf_pacing_cpu_now(void);
extern long lf_pacing_pause_ms(TimestampTz started, uint64 cpu_us, double *share);
extern int	lf_pacing_batch_rows(void);
extern void lf_pacing_slept(long planned, double slept);

/* worker.c */
extern void lf_shmem_request(void);
extern void lf_shmem_startup(void);
extern void lf_register_launcher(void);
extern void lf_wake_worker_at_commit(void);
extern void lf_forbid_prepare(const char *what);

/* utility.c */
extern bool lf_chaining;
extern bool lf_dropping_own;
extern void lf_refuse_if_migrating(Oid relid, const char *relname, const char *what);
extern bool lf_calls_function(Node *tree, check_function_callback fn, void *cx);
extern bool lf_tree_uses(Node *tree, Oid classId, Oid objid);
extern const char *lf_script_mapping_calling(Oid classId, Oid objid);
extern void lf_install_utility_hook(void);

#endif							/* LEAPFROG_H */
