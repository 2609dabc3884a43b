/*-------------------------------------------------------------------------
 * start.c
 *	  leapfrog.start(name, script): analyse the script and switch at once.
 *
 * The script is parsed and analysed with PostgreSQL's own parser, statement
 * by statement and in order, exactly as an eager run would see it: DDL runs
 * as written; each INSERT ... SELECT becomes a mapping (an analysed Query,
 * stored with every function and operator resolved, so it means the same
 * thing whatever search_path later sessions use); each DROP TABLE of a
 * mapping's input retires the table instead: it is renamed and moved to
 * schema leapfrog_retired, keeping its data until the migration is done.
 * ALTER TABLE on a table holding rows runs as written if it is a catalog
 * change (alter.c), and replaces the table lazily if PostgreSQL would read
 * the table to carry it out (replace.c), as CREATE INDEX does.  INSERT ...
 * VALUES, UPDATE and DELETE on tables outside the mappings run as written.
 *
 * Everything happens in the caller's transaction, so start() is all or
 * nothing.  The whole switch runs in a subtransaction with a short
 * lock_timeout and is retried with backoff (lf_with_lock_retries): a switch
 * never makes application traffic queue behind a long-running transaction.
 * The script's leading CREATE TABLE and CREATE INDEX of new tables run
 * before it, once (run_prelude): the strong locks are held for the rest only.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_statistic_ext.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/tablecmds.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/plancat.h"
#include "parser/parser.h"
#include "parser/parse_relation.h"
#include "parser/parse_expr.h"
#include "parser/parse_collate.h"
#include "parser/parse_coerce.h"
#include "parser/parsetree.h"
#include "parser/scansup.h"
#include "rewrite/rewriteHandler.h"
#include "rewrite/rewriteManip.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

PG_FUNCTION_INFO_V1(leapfrog_start);

typedef struct PendingMapping
{
	Oid			target;
	Oid			input;			/* the one whose rows relevance finds */
	LfMappingKind kind;
	int			ninputs;
	Oid			inputs[2];		/* every table it reads */
	char	   *query;			/* nodeToString of the mapping Query */
	RawStmt    *rs;				/* its statement */
	int			stmt_no;		/* its position in the script, from 1 */
	Oid			done_keys;		/* input tracked by keys: its table of done keys,
								 * or its carrier's (live.c) */
} PendingMapping;

/* Does the mapping read relid? */
static bool
pm_reads(PendingMapping *pm, Oid relid)
{
	for (int i = 0; i < pm->ninputs; i++)
		if (pm->inputs[i] == relid)
			return true;
	return false;
}

typedef struct StartState
{
	const char *name;
	const char *script;
	const char *on_error;		/* "fail" or "quarantine" (failed.c) */
	MemoryContext cxt;			/* where results live: SPI calls switch contexts */
	List	   *all_stmts;		/* RawStmt, as parsed */
	List	   *stmts;			/* RawStmt, without a BEGIN ... COMMIT around */
	Oid			lock_first;		/* the table busy in the last attempt */
	int			prelude;		/* leading statements run before the attempts */
	List	   *prelude_created;	/* the tables they created */
	instr_time	locked_at;		/* when the attempt that succeeded had its locks */
	/* filled by one attempt */
	int			migration_id;
	List	   *created;		/* OIDs of tables the script created */
	List	   *retired;		/* OIDs of retired inputs */
	List	   *retired_names;	/* their original qualified names */
	List	   *live;			/* OIDs of live inputs tracked in place ... */
	List	   *live_names;		/* ... their qualified names */
	List	   *mappings;		/* PendingMapping */
	List	   *replacements;	/* LfReplacement (replace.c) */
	List	   *notices;		/* (table, why) of each, told once it succeeded */
	/* leapfrog.plan(): what each statement does */
	bool		planning;
	int			current;		/* the statement being run, from 1; 0: none */
	int			ran;			/* the last statement run_script began */
	List	   *plan;			/* PlanNote */
} StartState;

/* How many group or join mappings of the script read relid. */
static int
unit_readers(StartState *st, Oid relid)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, st->mappings)
		if (((PendingMapping *) lfirst(lc))->kind != LF_MAP_ROWS && pm_reads(lfirst(lc), relid))
			n++;
	return n;
}

/* Does a join mapping of the script read relid? */
static bool
join_reads(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
		if (((PendingMapping *) lfirst(lc))->kind == LF_MAP_JOIN && pm_reads(lfirst(lc), relid))
			return true;
	return false;
}

/*
 * The table of done keys that carries the row mappings of relid: the first
 * GROUP BY or join mapping's that reads it, or none.
 */
static Oid
carrier_done_keys(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		if (pm->kind != LF_MAP_ROWS && pm_reads(pm, relid) && OidIsValid(pm->done_keys))
			return pm->done_keys;
	}
	return InvalidOid;
}

/*
 * What one statement of the script does, for leapfrog.plan(): a mapping, a
 * retirement or a lazy replacement.  A statement without a note runs as
 * written.  Names and sizes are read when the note is taken: the plan's
 * changes are rolled back before its rows are returned.
 */
typedef struct PlanNote
{
	int			stmt_no;
	const char *action;			/* "mapping", "retire", "replace", "track" */
	PendingMapping *pm;			/* of a mapping */
	char	   *input;			/* qualified names, ", "-separated for a join */
	char	   *target;
	int64		rows;			/* the planner's estimate of the input's rows */
	int64		bytes;
	const char *detail;
} PlanNote;

#define refuse(...) \
	ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), __VA_ARGS__))

static bool collect_relations(Node *node, List **relids);
static void check_mapping_functions(Query *map, Oid target);
static void do_data_stmt(StartState *st, RawStmt *rs, List *queries);
static LfReplacement *replacement_of(StartState *st, Oid relid);
static LfReplacement *replace_table(StartState *st, RawStmt *rs, int stmt_no, Oid relid,
									const char *why);

/* ---------------------------------------------------------------------
 * Lock retries
 * ---------------------------------------------------------------------
 */

/*
 * The lock an attempt of the switch failed on (lf_switch_lock, or one taken
 * without waiting that was busy): the final error names the table and the
 * processes that hold it.
 */
static LOCKTAG busy_lock;
static LOCKMODE busy_mode = NoLock;

static void
note_busy_relation(Oid relid, LOCKMODE mode)
{
	SET_LOCKTAG_RELATION(busy_lock, MyDatabaseId, relid);
	busy_mode = mode;
}

/*
 * A lock the switch may wait for: noted while it waits, as PostgreSQL
 * forgets the lock awaited before it raises the lock_timeout error.
 */
void
lf_switch_lock(Oid relid, LOCKMODE mode)
{
	note_busy_relation(relid, mode);
	LockRelationOid(relid, mode);
	busy_mode = NoLock;
}

/* "table "t", held by process 123" (or less, if gone by now) */
static char *
busy_lock_holders(void)
{
	char	   *name;
	char	   *pids;

	if (busy_mode == NoLock || busy_lock.locktag_type != LOCKTAG_RELATION ||
		busy_lock.locktag_field1 != MyDatabaseId)
		return NULL;
	name = get_rel_name(busy_lock.locktag_field2);
	if (name == NULL)
		return NULL;
	pids = lf_lock_holders(&busy_lock, busy_mode);
	return psprintf("table \"%s\"%s%s", name, pids[0] ? ", held by process " : "", pids);
}

static void
lf_with_lock_retries(void (*fn) (void *), void *arg, const char *what)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int attempt;

	for (attempt = 1;; attempt++)
	{
		ErrorData  *volatile edata = NULL;
		long		sleep_ms;

		busy_mode = NoLock;
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			int			nest = NewGUCNestLevel();
			char		buf[32];

			snprintf(buf, sizeof(buf), "%dms", lf_lock_timeout);
			(void) set_config_option("lock_timeout", buf, PGC_USERSET,
									 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
			fn(arg);
			AtEOXact_GUC(true, nest);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
		}
		PG_CATCH();
		{
			edata = lf_abort_with_error(cxt, true, owner);
		}
		PG_END_TRY();

		/*
		 * Done.  Not by a return inside PG_TRY: that leaves the error stack
		 * pointing at this dead frame, and the next error of the caller (a
		 * PL/pgSQL block after start()) jumped into it and crashed.
		 */
		if (edata == NULL)
			return;

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		if (attempt >= lf_lock_retries)
		{
			char	   *holders = busy_lock_holders();

			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not take the locks of %s after %d attempts", what, attempt),
					 holders ? errdetail("Last attempt: %s, waiting for %s.", edata->message, holders) :
					 errdetail("Last attempt: %s", edata->message),
					 errhint("Another transaction holds a lock on a table involved (pg_stat_activity shows it); retry when it has finished, or raise leapfrog.lock_retries.")));
		}
		FreeErrorData(edata);
		/* exponential backoff with jitter, capped at one second */
		sleep_ms = Min(1000L, 5L << Min(attempt, 8));
		sleep_ms = sleep_ms / 2 + random() % (sleep_ms / 2 + 1);
		pg_usleep(sleep_ms * 1000L);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------
 */
static void
remember(StartState *st, List **list, void *ptr)
{
	MemoryContext old = MemoryContextSwitchTo(st->cxt);

	*list = lappend(*list, ptr);
	MemoryContextSwitchTo(old);
}

static void
remember_oid(StartState *st, List **list, Oid oid)
{
	MemoryContext old = MemoryContextSwitchTo(st->cxt);

	*list = lappend_oid(*list, oid);
	MemoryContextSwitchTo(old);
}
static char *
stmt_text(StartState *st, RawStmt *rs)
{
	const char *text = st->script + rs->stmt_location;
	int			len = rs->stmt_len ? rs->stmt_len : (int) strlen(text);

	while (len > 0 && scanner_isspace(*text))
		text++, len--;
	return pnstrdup(text, len);
}

/* The position of rs in the script, from 1 */
static int
stmt_number(StartState *st, RawStmt *rs)
{
	ListCell   *lc;

	foreach(lc, st->all_stmts)
		if (lfirst(lc) == rs)
			return foreach_current_index(lc) + 1;
	return 0;
}

static char *
qualified_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/* For leapfrog.plan(): what statement stmt_no does to relid. */
static PlanNote *
plan_note(StartState *st, int stmt_no, const char *action, Oid relid, const char *detail)
{
	MemoryContext old = MemoryContextSwitchTo(st->cxt);
	PlanNote   *n = palloc0(sizeof(PlanNote));
	Relation	rel = table_open(relid, AccessShareLock);
	BlockNumber pages;
	double		tuples;
	double		allvisfrac;

	estimate_rel_size(rel, NULL, &pages, &tuples, &allvisfrac);
	n->rows = (int64) tuples;
	n->bytes = (int64) RelationGetNumberOfBlocks(rel) * BLCKSZ;
	table_close(rel, AccessShareLock);
	n->stmt_no = stmt_no;
	n->action = action;
	n->input = qualified_name(relid);
	n->target = pstrdup(n->input);
	n->detail = detail ? pstrdup(detail) : NULL;
	st->plan = lappend(st->plan, n);
	MemoryContextSwitchTo(old);
	return n;
}

/* Run one analysed statement of the script, as the caller, like exec_simple_query. */
static void
run_stmt(StartState *st, RawStmt *rs)
{
	List	   *queries = pg_analyze_and_rewrite_fixedparams(copyObject(rs), st->script,
															NULL, 0, NULL);
	List	   *plans = pg_plan_queries(queries, st->script, 0, NULL);
	ListCell   *lc;

	foreach(lc, plans)
	{
		PlannedStmt *ps = lfirst_node(PlannedStmt, lc);

		if (ps->commandType != CMD_UTILITY)
			refuse(errmsg("statement not supported in a leapfrog script"));
		ProcessUtility(ps, st->script, false, PROCESS_UTILITY_QUERY, NULL, NULL,
					   None_Receiver, NULL);
		CommandCounterIncrement();
	}
}

/* ---------------------------------------------------------------------
 * Mappings
 * ---------------------------------------------------------------------
 */
/*
 * Whole-row references and system columns other than ctid: the migration
 * step computes the images from the rows it deletes (migrate.c), which
 * carry the columns and ctid only.
 */
static bool
reads_system_column(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
		return ((Var *) node)->varattno <= 0 &&
			((Var *) node)->varattno != SelfItemPointerAttributeNumber;
	return expression_tree_walker(node, reads_system_column, context);
}

/* Does relid enable row security and force it on its owner? */
static bool
forced_row_security(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		forced;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	forced = ((Form_pg_class) GETSTRUCT(tup))->relrowsecurity &&
		((Form_pg_class) GETSTRUCT(tup))->relforcerowsecurity;
	ReleaseSysCache(tup);
	return forced;
}

/* What a mapping may read: a plain table that no migration touches yet. */
static void
check_mapping_input(StartState *st, RangeTblEntry *in)
{
	if (in->rtekind != RTE_RELATION)
		refuse(errmsg("a mapping must read tables"),
			   errdetail("Sub-queries, functions and VALUES are not supported in the FROM clause of a mapping."));
	if (in->relkind != RELKIND_RELATION)
		refuse(errmsg("mapping input \"%s\" is not a plain table", get_rel_name(in->relid)),
			   errdetail("A mapping reads plain tables: not views, partitioned or foreign tables."),
			   errhint("Run the script eagerly, outside leapfrog."));
	if (has_subclass(in->relid) || has_superclass(in->relid) ||
		get_rel_relispartition(in->relid))
		refuse(errmsg("mapping input \"%s\" takes part in inheritance or partitioning",
					  get_rel_name(in->relid)),
			   errhint("Run the script eagerly, outside leapfrog."));
	if (list_member_oid(st->created, in->relid))
		refuse(errmsg("mapping input \"%s\" is created by the same script", get_rel_name(in->relid)));
	/* a table an earlier migration still fills may be read: chained */
	if (lf_is_input(in->relid))
	{
		LfMigration *mig = lf_migration_by_input(in->relid);

		refuse(errmsg("table \"%s\" is already under migration", get_rel_name(in->relid)),
			   mig && list_member_oid(mig->live, in->relid) ?
			   errdetail("Migration \"%s\" reads it as it was at its start(), tracked in place.",
						 mig->name) : 0,
			   mig ? errhint("Wait with SELECT leapfrog.wait('%s'), or finish now with SELECT leapfrog.complete('%s'). "
							 "A table kept live by a migration started with leapfrog.track_live_inputs = off is replaced instead, "
							 "and a later migration may read it.", mig->name, mig->name) : 0);
	}
	if (get_rel_persistence(in->relid) == RELPERSISTENCE_TEMP)
		refuse(errmsg("mapping input \"%s\" is a temporary table", get_rel_name(in->relid)));

	/*
	 * Forced row security filters the owner's own reads: eagerly the script
	 * copies the rows its policies show, and a step's claim would take
	 * rows its copy does not show (a step copied 100 of its 1000 rows).
	 */
	if (forced_row_security(in->relid))
		refuse(errmsg("mapping input \"%s\" has row security forced on its owner",
					  get_rel_name(in->relid)),
			   errhint("ALTER TABLE ... NO FORCE ROW LEVEL SECURITY for the migration, "
					   "or copy the rows the policies show into a table first."));
	/* every step and every computing read would draw a sample of its own */
	if (in->tablesample != NULL)
		refuse(errmsg("TABLESAMPLE is not supported in a mapping"),
			   errhint("Copy the sample into a table first, and map that table."));
	in->inh = false;
}

/*
 * What a mapping's SELECT may be: a read of one table (1:1, filters,
 * splits), a GROUP BY of one table, or an equi-join of two tables (units.c),
 * with immutable expressions.  Its inputs are checked here; the units in
 * build_mapping.
 */
static void
check_mapping_select(StartState *st, Query *sel)
{
	Node	   *quals;
	ListCell   *lc;
	int			nrels = 0;

	if (sel->cteList || sel->setOperations)
		refuse(errmsg("WITH and set operations are not supported in a mapping"));
	if (sel->groupingSets)
		refuse(errmsg("GROUPING SETS, ROLLUP and CUBE are not supported in a mapping"));
	if (sel->hasWindowFuncs)
		refuse(errmsg("window functions are not supported in a mapping"));
	if (sel->hasTargetSRFs)
		refuse(errmsg("set-returning functions are not supported in a mapping"));
	if (sel->distinctClause)
		refuse(errmsg("DISTINCT is not supported in a mapping"),
			   errhint("Write it as GROUP BY over the same columns."));
	if (sel->limitCount || sel->limitOffset)
		refuse(errmsg("LIMIT and OFFSET are not supported in a mapping"));
	if (sel->rowMarks)
		refuse(errmsg("FOR UPDATE/SHARE is not supported in a mapping"));
	if (sel->hasSubLinks)
		refuse(errmsg("sub-queries are not supported in a mapping"),
			   errdetail("A mapping may read one table, group one table, or join two."));
	foreach(lc, sel->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		if (rte->rtekind == RTE_JOIN)
			continue;
		check_mapping_input(st, rte);
		nrels++;
	}
	if (nrels > 2)
		refuse(errmsg("a mapping may join two tables, not %d", nrels),
			   errhint("Join the first two into an intermediate table in one migration, then join it with the third in the next."));
	if (nrels == 2 && (sel->hasAggs || sel->groupClause))
		refuse(errmsg("aggregation over a join is not supported in a mapping"),
			   errhint("Join into an intermediate table in one migration, then aggregate it in the next."));
	if (nrels == 2)
	{
		RangeTblEntry *a = NULL,
				   *b = NULL;

		foreach(lc, sel->rtable)
			if (((RangeTblEntry *) lfirst(lc))->rtekind == RTE_RELATION)
			{
				if (a == NULL)
					a = lfirst(lc);
				else
					b = lfirst(lc);
			}
		if (a->relid == b->relid)
			refuse(errmsg("a self-join of \"%s\" is not supported in a mapping", get_rel_name(a->relid)),
				   errhint("Copy the table first, then join the copy."));
	}
	quals = (Node *) sel->jointree;
	if (reads_system_column(quals, NULL) || reads_system_column(sel->havingQual, NULL))
		refuse(errmsg("the filter of a mapping reads a system column or a whole row"),
			   errdetail("A mapping may read the input's columns and ctid."));
	if (contain_mutable_functions(quals) || contain_mutable_functions(sel->havingQual))
		refuse(errmsg("the filter of a mapping must be immutable"),
			   errdetail("Rows are migrated later than start(); only immutable expressions give the eager result."));
}

/*
 * The units of a group or join mapping (units.c): refused where Leapfrog
 * cannot track them, or where an input has no index to find a unit's rows.
 */
static void
check_units(LfMapping *m)
{
	const char *why = lf_describe_units(m);
	int			i;

	if (why)
		refuse(errmsg("%s is not supported in a mapping", why),
			   errdetail("A GROUP BY mapping groups on columns of its input; a join mapping joins two tables on equalities of their columns, [INNER|LEFT|RIGHT] JOIN, "
						 "of one type or of two types one operator family compares (int and bigint, varchar and text)."),
			   strstr(why, "casts a column") ?
			   errhint("Change one column's type in an earlier migration, or join columns that need no cast.") : 0);
	if (m->kind == LF_MAP_JOIN && m->jointype != JOIN_INNER &&
		m->jointype != JOIN_LEFT && m->jointype != JOIN_RIGHT)
		refuse(errmsg("FULL JOIN is not supported in a mapping"),
			   errhint("Write it as a LEFT JOIN into the new table and an INSERT ... SELECT of the unmatched rows of the other side after the migration."));
	if (m->kind == LF_MAP_ROWS)
		return;
	for (i = 0; i < m->ninputs; i++)
		if (!OidIsValid(lf_unit_index(m, i)))
		{
			StringInfoData cols;

			initStringInfo(&cols);
			for (int k = 0; k < m->nkeys; k++)
				appendStringInfo(&cols, "%s%s", k ? ", " : "",
								 quote_identifier(get_attname(m->inputs[i], m->keys[i][k], false)));
			refuse(errmsg("mapping input \"%s\" has no index on (%s)", get_rel_name(m->inputs[i]), cols.data),
				   errdetail("A %s migrates the rows of a %s together, found through such an index (a btree whose leading columns are these, with the mapping's equality and collation).",
							 m->kind == LF_MAP_GROUPS ? "GROUP BY mapping" : "join mapping",
							 m->kind == LF_MAP_GROUPS ? "group" : "join key"),
				   errhint("Create it before start(): CREATE INDEX CONCURRENTLY ON %s (%s);",
						   quote_qualified_identifier(get_namespace_name(get_rel_namespace(m->inputs[i])),
													  get_rel_name(m->inputs[i])),
						   cols.data));
		}
}

/*
 * The column of a mapping that relevance queries project (relevance.c): an
 * input row's ctid.  A row mapping's own; a join's from its preserved side
 * (the left one of an inner join), so that every output row has one; one
 * row of each group: min(ctid).  The step then migrates the whole unit of
 * that row (units.c).
 */
static Expr *
mapping_ctid(LfMapping *m, Query *sel)
{
	ParseState *pstate;
	Relation	in;
	ParseNamespaceItem *nsitem;
	ColumnRef  *cref;
	Node	   *agg;
	int			rti = m->rtis[0];

	if (m->kind == LF_MAP_JOIN && m->jointype == JOIN_RIGHT)
		rti = m->rtis[1];
	if (m->kind != LF_MAP_GROUPS)
		return (Expr *) makeVar(rti, SelfItemPointerAttributeNumber, TIDOID, -1, InvalidOid, 0);
	pstate = make_parsestate(NULL);
	in = table_open(m->inputs[0], AccessShareLock);
	nsitem = addRangeTableEntryForRelation(pstate, in, AccessShareLock, NULL, false, true);
	addNSItemToQuery(pstate, nsitem, true, true, true);
	cref = makeNode(ColumnRef);
	cref->fields = list_make1(makeString("ctid"));
	cref->location = -1;
	agg = transformExpr(pstate,
						(Node *) makeFuncCall(list_make2(makeString("pg_catalog"), makeString("min")),
											  list_make1(cref), COERCE_EXPLICIT_CALL, -1),
						EXPR_KIND_SELECT_TARGET);
	table_close(in, AccessShareLock);
	Assert(m->rtis[0] == 1);
	return (Expr *) agg;
}

/*
 * The value the INSERT gives attribute att of target, over the mapping's
 * SELECT: its expression, or a NULL (the INSERT's defaults are already in
 * its target list); immutable, and reading nothing but the input's columns.
 */
static Node *
mapping_column(Query *ins, RangeTblRef *rtr, RangeTblEntry *srte, Query *sel,
			   Relation target, Form_pg_attribute att)
{
	Node	   *expr = NULL;
	ListCell   *lc;

	if (att->attgenerated)
		refuse(errmsg("generated column \"%s\" is not supported in a mapping target",
					  NameStr(att->attname)));
	foreach(lc, ins->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resno == att->attnum && !tle->resjunk)
			expr = (Node *) copyObject(tle->expr);
	}
	if (expr)
		expr = ReplaceVarsFromTargetList(expr, rtr->rtindex, 0, srte, sel->targetList,
										 REPLACEVARS_REPORT_ERROR, 0, NULL);
	else if (att->attisdropped)
		expr = (Node *) makeNullConst(INT4OID, -1, InvalidOid);
	else
		expr = (Node *) makeNullConst(att->atttypid, att->atttypmod, att->attcollation);
	if (reads_system_column(expr, NULL))
		refuse(errmsg("the value of column \"%s\" in the mapping into \"%s\" reads a system column or a whole row",
					  NameStr(att->attname), RelationGetRelationName(target)),
			   errdetail("A mapping may read the input's columns and ctid."));
	if (contain_mutable_functions(expr))
		refuse(errmsg("the value of column \"%s\" in the mapping into \"%s\" is not immutable",
					  NameStr(att->attname), RelationGetRelationName(target)),
			   errdetail("Rows are migrated later than start(); only immutable expressions and defaults give the eager result."),
			   errhint("Compute the column with immutable expressions, or fill it after the migration is done."));
	return expr;
}

/*
 * From the analysed INSERT INTO target SELECT ... FROM ..., build the
 * mapping Query: SELECT <one expression per attribute of target, in
 * attribute order, coerced as the INSERT coerces>, lf_ctid FROM ... WHERE
 * ... [GROUP BY ... HAVING ...], and for a GROUP BY the grouping columns
 * after them (lf_key_n).  *m gets its units (units.c); m->input is the
 * input relevance queries find rows of.
 */
static Query *
build_mapping(StartState *st, Query *ins, LfMapping *m)
{
	RangeTblEntry *target_rte = rt_fetch(ins->resultRelation, ins->rtable);
	RangeTblRef *rtr;
	RangeTblEntry *srte;
	Query	   *sel;
	Relation	target;
	TupleDesc	desc;
	List	   *tlist = NIL;
	ListCell   *lc;
	int			attno;

	if (!list_member_oid(st->created, target_rte->relid))
		refuse(errmsg("mapping into table \"%s\" is not supported",
					  get_rel_name(target_rte->relid)),
			   errdetail("A mapping must insert into a table created by the same script."));
	if (ins->onConflict || ins->returningList || ins->cteList)
		refuse(errmsg("INSERT with ON CONFLICT, RETURNING or WITH is not supported in a leapfrog script"));
	if (list_length(ins->jointree->fromlist) != 1 ||
		!IsA(linitial(ins->jointree->fromlist), RangeTblRef))
		refuse(errmsg("INSERT without a SELECT from a table is not supported in a leapfrog script"),
			   errhint("Insert constant rows after the migration has started."));
	rtr = linitial(ins->jointree->fromlist);
	srte = rt_fetch(rtr->rtindex, ins->rtable);
	if (srte->rtekind != RTE_SUBQUERY)
		refuse(errmsg("INSERT ... VALUES is not supported in a leapfrog script"),
			   errhint("Insert constant rows after the migration has started."));
	sel = copyObject(srte->subquery);
	check_mapping_select(st, sel);
	foreach(lc, sel->rtable)
		if (((RangeTblEntry *) lfirst(lc))->rtekind == RTE_RELATION)
		{
			m->input = ((RangeTblEntry *) lfirst(lc))->relid;
			break;
		}
	m->query = sel;
	check_units(m);
	if (m->kind == LF_MAP_JOIN && m->jointype == JOIN_RIGHT)
		m->input = m->inputs[1];
	else
		m->input = m->inputs[0];

	target = table_open(target_rte->relid, AccessShareLock);
	desc = RelationGetDescr(target);
	if (target->rd_rel->relkind != RELKIND_RELATION)
		refuse(errmsg("mapping target \"%s\" is not a plain table", RelationGetRelationName(target)),
			   errdetail("Partitioned targets are not supported yet."),
			   errhint("Fill a plain table, and make it a partition with ATTACH PARTITION once the migration is complete."));
	/*
	 * A row routed into a partition through its parent (an INSERT, an
	 * UPDATE that moves it) is known only as it is stored: no statement on
	 * the parent could migrate the old rows with its keys first.
	 */
	if (target->rd_rel->relispartition)
		refuse(errmsg("mapping target \"%s\" is a partition", RelationGetRelationName(target)),
			   errdetail("Rows its parent routes into it could not be checked against the rows not migrated yet."),
			   errhint("Fill a plain table, and make it a partition with ATTACH PARTITION once the migration is complete."));
	for (attno = 1; attno <= desc->natts; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);

		tlist = lappend(tlist,
						makeTargetEntry((Expr *) mapping_column(ins, rtr, srte, sel, target, att),
										attno, pstrdup(NameStr(att->attname)), false));
	}
	tlist = lappend(tlist, makeTargetEntry(mapping_ctid(m, sel), desc->natts + 1,
										   pstrdup("lf_ctid"), false));
	table_close(target, AccessShareLock);

	/* GROUP BY refers to its columns by sortgroupref: keep them, named */
	foreach(lc, sel->groupClause)
	{
		SortGroupClause *sgc = lfirst(lc);
		TargetEntry *tle = get_sortgroupclause_tle(sgc, sel->targetList);
		TargetEntry *key = makeTargetEntry(copyObject(tle->expr), list_length(tlist) + 1,
										   psprintf("lf_key_%d", foreach_current_index(lc) + 1),
										   false);

		key->ressortgroupref = sgc->tleSortGroupRef;
		tlist = lappend(tlist, key);
	}
	sel->targetList = tlist;
	sel->sortClause = NIL;
	sel->hasAggs = sel->hasAggs || m->kind == LF_MAP_GROUPS;
	return sel;
}

/* Whether an INSERT reads a table besides its target: a mapping if so. */
static bool
reads_a_table(Query *ins)
{
	List	   *relids = NIL;
	Oid			target = rt_fetch(ins->resultRelation, ins->rtable)->relid;

	(void) collect_relations((Node *) ins, &relids);
	return list_length(list_delete_oid(relids, target)) > 0;
}

/*
 * Refuse a mapping into target after one into a table whose NOT DEFERRABLE
 * foreign key references target.  Eagerly the earlier INSERT checks its
 * rows as it ends, against a target still without the rows this one
 * brings, and fails on the first that references one (23503).  Lazily a
 * step's checks run as it ends (migrate.c, check_constraints_now), and a
 * check's own query migrates the row it references: the script would
 * succeed.  A DEFERRABLE key is checked at commit, after every INSERT, as
 * lazily.  (Two INSERTs into one self-referencing table are left alone: a
 * merge of two tables whose rows reference their own table's is common,
 * and eagerly fine.)
 */
static void
check_fill_order(StartState *st, Oid target)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *earlier = lfirst(lc);
		Relation	rel;
		ListCell   *lf;

		if (earlier->target == target)
			continue;
		/* (a target the script dropped is refused later, for that) */
		rel = try_table_open(earlier->target, AccessShareLock);
		if (rel == NULL)
			continue;
		foreach(lf, RelationGetFKeyList(rel))
		{
			ForeignKeyCacheInfo *fk = lfirst(lf);
			HeapTuple	tup;
			bool		deferrable;

			if (fk->confrelid != target)
				continue;
			tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(fk->conoid));
			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for constraint %u", fk->conoid);
			deferrable = ((Form_pg_constraint) GETSTRUCT(tup))->condeferrable;
			ReleaseSysCache(tup);
			if (!deferrable)
				refuse(errmsg("foreign key \"%s\" of table \"%s\" references table \"%s\", which the script fills after it",
							  get_constraint_name(fk->conoid), RelationGetRelationName(rel),
							  get_rel_name(target)),
					   errdetail("Eagerly, the INSERT into \"%s\" checks its rows when it ends, before \"%s\" holds the rows they reference.",
								 RelationGetRelationName(rel), get_rel_name(target)),
					   errhint("Fill \"%s\" first, or declare the key DEFERRABLE.",
							   get_rel_name(target)));
		}
		table_close(rel, AccessShareLock);
	}
}

static void
add_mapping(StartState *st, RawStmt *rs)
{
	List	   *queries = pg_analyze_and_rewrite_fixedparams(copyObject(rs), st->script,
															NULL, 0, NULL);
	Query	   *ins;
	PendingMapping *pm;
	Query	   *map;
	LfMapping	m = {0};

	if (list_length(queries) != 1)
		refuse(errmsg("INSERT rewritten by rules is not supported in a leapfrog script"));
	ins = linitial_node(Query, queries);
	if (!reads_a_table(ins))
	{
		do_data_stmt(st, rs, queries);	/* INSERT ... VALUES */
		return;
	}
	pm = MemoryContextAllocZero(st->cxt, sizeof(PendingMapping));
	map = build_mapping(st, ins, &m);
	pm->input = m.input;
	pm->kind = m.kind;
	pm->ninputs = m.ninputs;
	memcpy(pm->inputs, m.inputs, sizeof(m.inputs));
	pm->rs = rs;
	for (int i = 0; i < pm->ninputs; i++)
		if (replacement_of(st, pm->inputs[i]))
			refuse(errmsg("mapping input \"%s\" is replaced lazily by the same script",
						  get_rel_name(pm->inputs[i])),
				   errdetail("Its rows move into it after start()."),
				   errhint("Put the INSERT ... SELECT before the ALTER TABLE or CREATE INDEX."));
	pm->target = rt_fetch(ins->resultRelation, ins->rtable)->relid;
	if (replacement_of(st, pm->target))
		refuse(errmsg("INSERT ... SELECT into table \"%s\", replaced lazily by the same script, is not supported",
					  get_rel_name(pm->target)));
	check_mapping_functions(map, pm->target);
	check_fill_order(st, pm->target);
	pm->query = MemoryContextStrdup(st->cxt, nodeToString(map));
	pm->stmt_no = st->current;
	remember(st, &st->mappings, pm);
	if (st->planning)
	{
		PlanNote   *n = plan_note(st, st->current, "mapping", pm->inputs[0], NULL);

		n->pm = pm;
		n->target = MemoryContextStrdup(st->cxt, qualified_name(pm->target));
		for (int i = 0; i < pm->ninputs; i++)
			if (lf_is_target(pm->inputs[i]))
				n->detail = MemoryContextStrdup(st->cxt,
												psprintf("chained: migration \"%s\" is still filling %s",
														 lf_migration_by_target(pm->inputs[i])->name,
														 get_rel_name(pm->inputs[i])));
		if (pm->ninputs == 2)
		{
			PlanNote   *other = plan_note(st, st->current, "mapping", pm->inputs[1], NULL);

			st->plan = list_delete_last(st->plan);
			n->input = MemoryContextStrdup(st->cxt, psprintf("%s, %s", n->input, other->input));
			n->rows += other->rows;
			n->bytes += other->bytes;
		}
	}
}

/*
 * The table that CREATE TABLE rv would find already there (IF NOT EXISTS
 * then does nothing), as PostgreSQL looks for it: in the schema it would
 * create the table in.
 */
static Oid
table_to_create(RangeVar *rv)
{
	return get_relname_relid(rv->relname, RangeVarGetCreationNamespace(rv));
}

/*
 * A mapping's expressions run later, as whichever role reads or writes the
 * new table (relevance and computing reads, section 3 of docs/design.md),
 * pg_dump's superuser included.  A function of a role that is not a
 * superuser would then run with the reader's rights: for a caller who is not
 * a superuser, mappings call superusers' functions only (built-in ones and
 * those of extensions).
 */
static bool
untrusted_function(Oid funcid, void *found)
{
	HeapTuple	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Oid			owner;

	if (!HeapTupleIsValid(tp))
		return false;
	owner = ((Form_pg_proc) GETSTRUCT(tp))->proowner;
	ReleaseSysCache(tp);
	if (superuser_arg(owner))
		return false;
	*(Oid *) found = funcid;
	return true;
}

/*
 * A domain's CHECK constraints (its base domains' too) run when a computing
 * read coerces a row to the new table's column type: as the reader.
 */
static bool
untrusted_domain_check(Oid type, Oid *found)
{
	DomainConstraintRef *ref;
	ListCell   *lc;

	if (OidIsValid(get_element_type(type)))
		type = get_element_type(type);
	if (get_typtype(type) != TYPTYPE_DOMAIN)
		return false;
	/* it registers a reset callback on the context: not on the stack */
	ref = palloc(sizeof(DomainConstraintRef));
	InitDomainConstraintRef(type, ref, CurrentMemoryContext, false);
	foreach(lc, ref->constraints)
	{
		DomainConstraintState *c = lfirst(lc);

		if (c->constrainttype == DOM_CONSTRAINT_CHECK &&
			lf_calls_function((Node *) c->check_expr, untrusted_function, found))
			return true;
	}
	return false;
}

static void
check_mapping_functions(Query *map, Oid target)
{
	Oid			found = InvalidOid;
	bool		untrusted = false;

	if (superuser())
		return;
	untrusted = lf_calls_function((Node *) map, untrusted_function, &found);
	if (!untrusted)
	{
		Relation	rel = table_open(target, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(rel);

		for (int i = 0; i < desc->natts && !untrusted; i++)
			if (!TupleDescAttr(desc, i)->attisdropped)
				untrusted = untrusted_domain_check(TupleDescAttr(desc, i)->atttypid, &found);
		table_close(rel, AccessShareLock);
	}
	if (!untrusted)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the mapping into \"%s\" calls function %s, which a role that is not a superuser owns",
					get_rel_name(target), format_procedure(found)),
			 errdetail("Mapping expressions run later, as the roles that read the new table."),
			 errhint("Use built-in expressions, have a superuser own the function, or have a superuser start() the migration.")));
}

/* CREATE TABLE new AS SELECT ...: create it empty, then map into it. */
static void
add_ctas(StartState *st, RawStmt *rs)
{
	CreateTableAsStmt *ctas = (CreateTableAsStmt *) rs->stmt;
	bool		with_data = !ctas->into->skipData;
	RawStmt    *copy = copyObject(rs);
	Oid			relid;

	if (ctas->objtype != OBJECT_TABLE)
		refuse(errmsg("CREATE MATERIALIZED VIEW is not supported in a leapfrog script"));
	if (ctas->if_not_exists && OidIsValid(table_to_create(ctas->into->rel)))
	{
		run_stmt(st, rs);		/* its NOTICE; eagerly it inserts nothing */
		return;
	}
	((CreateTableAsStmt *) copy->stmt)->into->skipData = true;
	run_stmt(st, copy);
	relid = RangeVarGetRelid(ctas->into->rel, NoLock, false);
	remember_oid(st, &st->created, relid);
	if (with_data)
	{
		InsertStmt *ins = makeNode(InsertStmt);
		RawStmt    *irs = makeNode(RawStmt);

		ins->relation = makeRangeVar(get_namespace_name(get_rel_namespace(relid)),
									 get_rel_name(relid), -1);
		ins->selectStmt = ctas->query;
		ins->override = OVERRIDING_NOT_SET;
		irs->stmt = (Node *) ins;
		irs->stmt_location = rs->stmt_location;
		irs->stmt_len = rs->stmt_len;
		add_mapping(st, irs);
	}
}

/* ---------------------------------------------------------------------
 * Data statements
 * ---------------------------------------------------------------------
 */
static bool
collect_relations(Node *node, List **relids)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, collect_relations, (void *) relids,
								 QTW_EXAMINE_RTES_BEFORE);
	if (IsA(node, RangeTblEntry))
	{
		if (((RangeTblEntry *) node)->rtekind == RTE_RELATION)
			*relids = list_append_unique_oid(*relids, ((RangeTblEntry *) node)->relid);
		return false;
	}
	return expression_tree_walker(node, collect_relations, (void *) relids);
}

/* Rows the transaction has inserted, updated or deleted in relid so far. */
static int64
xact_changes(Oid relid)
{
	Datum		r = ObjectIdGetDatum(relid);

	return DatumGetInt64(DirectFunctionCall1(pg_stat_get_xact_tuples_inserted, r)) +
		DatumGetInt64(DirectFunctionCall1(pg_stat_get_xact_tuples_updated, r)) +
		DatumGetInt64(DirectFunctionCall1(pg_stat_get_xact_tuples_deleted, r));
}

/* The inputs and targets of the script's mappings so far. */
static List *
mapped_tables(StartState *st)
{
	List	   *relids = NIL;
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		for (int i = 0; i < pm->ninputs; i++)
			relids = list_append_unique_oid(relids, pm->inputs[i]);
		relids = list_append_unique_oid(relids, pm->target);
	}
	return relids;
}

/*
 * A data statement (INSERT ... VALUES, UPDATE, DELETE: version tables of
 * migration tools, rows of a new lookup table) runs as written, where it
 * stands in the script.  A mapping's rows move after start(), so it may not
 * write the input or the target of a mapping made before it (eagerly, the
 * copied rows would not see the change, or the change would apply to
 * them), nor read such a target (eagerly, it would see the copied rows);
 * nor touch a table under a running migration.  Before the mapping, the
 * input still holds every row, and the target is empty, as eagerly.
 */
static void
do_data_stmt(StartState *st, RawStmt *rs, List *queries)
{
	List	   *writes = NIL;
	List	   *reads = NIL;
	List	   *watched;
	int64	   *before;
	ListCell   *lc,
			   *lc2;

	foreach(lc, queries)
	{
		Query	   *q = lfirst_node(Query, lc);

		if (q->resultRelation > 0)
			writes = list_append_unique_oid(writes, rt_fetch(q->resultRelation, q->rtable)->relid);
		(void) collect_relations((Node *) q, &reads);
	}
	foreach(lc, reads)
		if (lf_is_target(lfirst_oid(lc)) || lf_is_input(lfirst_oid(lc)))
			refuse(errmsg("statement on table \"%s\", which is under migration, is not supported in a leapfrog script",
						  get_rel_name(lfirst_oid(lc))),
				   errdetail("Statement: %s", stmt_text(st, rs)),
				   errhint("Run it after start(), or wait for the running migration with leapfrog.wait()."));
	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		foreach(lc2, writes)
			if (pm_reads(pm, lfirst_oid(lc2)) || lfirst_oid(lc2) == pm->target)
				refuse(errmsg("statement changes table \"%s\" after a mapping that %s it",
							  get_rel_name(lfirst_oid(lc2)),
							  pm_reads(pm, lfirst_oid(lc2)) ? "reads" : "fills"),
					   errdetail("The mapping's rows move after start(). Statement: %s",
								 stmt_text(st, rs)),
					   errhint("Put the statement before the mapping, or run it after start()."));
		if (list_member_oid(reads, pm->target))
			refuse(errmsg("statement reads table \"%s\" after a mapping that fills it",
						  get_rel_name(pm->target)),
				   errdetail("The mapping's rows move after start(). Statement: %s",
							 stmt_text(st, rs)),
				   errhint("Run the statement after start()."));
	}
	foreach(lc, reads)
		if (replacement_of(st, lfirst_oid(lc)))
			refuse(errmsg("statement on table \"%s\" after the script replaced it lazily",
						  get_rel_name(lfirst_oid(lc))),
				   errdetail("Its rows move after start(). Statement: %s", stmt_text(st, rs)),
				   errhint("Put the statement before the ALTER TABLE, or run it after start()."));
	watched = mapped_tables(st);
	before = palloc(sizeof(int64) * Max(list_length(watched), 1));
	foreach(lc, watched)
		before[foreach_current_index(lc)] = xact_changes(lfirst_oid(lc));
	if (SPI_execute(stmt_text(st, rs), false, 0) < 0)
		elog(ERROR, "leapfrog: data statement failed");
	CommandCounterIncrement();

	/*
	 * The checks above see the statement's own tables only; a foreign key's
	 * action (ON DELETE CASCADE into an input) or a trigger can change a
	 * mapping's table too.  The transaction's row counts tell.
	 */
	foreach(lc, watched)
		if (xact_changes(lfirst_oid(lc)) != before[foreach_current_index(lc)])
			refuse(errmsg("statement changes table \"%s\" after a mapping that reads or fills it, through a trigger or a foreign key action",
						  get_rel_name(lfirst_oid(lc))),
				   errdetail("The mapping's rows move after start(). Statement: %s",
							 stmt_text(st, rs)),
				   errhint("Put the statement before the mapping, or run it after start()."));
}

/* ---------------------------------------------------------------------
 * Retiring an input
 * ---------------------------------------------------------------------
 */
static bool
mapped_input(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
		if (pm_reads(lfirst(lc), relid))
			return true;
	return false;
}

/*
 * Eager DROP TABLE fails when views, foreign keys or other objects depend on
 * the table.  Run the real DROP in a subtransaction and roll it back: the
 * caller gets exactly the error eager would give, with the same checks.
 */
static void
check_droppable(StartState *st, RawStmt *rs, RangeVar *rv)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	DropStmt   *drop = makeNode(DropStmt);
	RawStmt    *drs = makeNode(RawStmt);

	drop->objects = list_make1(list_make2(makeString(rv->schemaname), makeString(rv->relname)));
	drop->removeType = OBJECT_TABLE;
	drop->behavior = DROP_RESTRICT;
	drs->stmt = (Node *) drop;
	drs->stmt_location = rs->stmt_location;
	drs->stmt_len = rs->stmt_len;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		run_stmt(st, drs);
	}
	PG_CATCH();
	{
		ReThrowError(lf_abort_with_error(cxt, true, owner));
	}
	PG_END_TRY();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

static void
retire(StartState *st, RawStmt *rs, Oid relid)
{
	char	   *nspname = get_namespace_name(get_rel_namespace(relid));
	char	   *relname = get_rel_name(relid);
	char	   *qname = quote_qualified_identifier(nspname, relname);
	Oid			retired_nsp = lf_retired_namespace();
	Relation	rel;
	List	   *indexes;
	ListCell   *lc;
	char		newname[NAMEDATALEN];
	StringInfoData sql;
	ObjectAddresses *moved;

	check_droppable(st, rs, makeRangeVar(nspname, relname, -1));

	lf_switch_lock(relid, AccessExclusiveLock);
	rel = table_open(relid, NoLock);
	if (rel->rd_rules)
		refuse(errmsg("table \"%s\" has rules", relname));
	table_close(rel, NoLock);

	/*
	 * What eager DROP would remove and that would otherwise keep acting on
	 * the retired table: its outgoing foreign keys (they would block changes
	 * to the referenced tables), its user triggers and row security (they
	 * would fire on, or filter, the migration's own deletes).  Autovacuum
	 * is off too: the table only loses rows until it is dropped, and
	 * vacuuming it would compete with the migration for nothing (vacuum
	 * against wraparound still runs).
	 */
	initStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s DISABLE TRIGGER USER, DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY, "
					 "SET (autovacuum_enabled = false)", qname);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not prepare %s for retirement", qname);
	{
		List	   *fks = NIL;
		Relation	conrel = table_open(ConstraintRelationId, AccessShareLock);
		SysScanDesc scan = systable_beginscan(conrel, InvalidOid, false, NULL, 0, NULL);
		HeapTuple	tup;

		while (HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);

			if (con->conrelid == relid && con->contype == CONSTRAINT_FOREIGN)
				fks = lappend_oid(fks, con->oid);
		}
		systable_endscan(scan);
		table_close(conrel, AccessShareLock);
		foreach(lc, fks)
		{
			ObjectAddress addr;

			ObjectAddressSet(addr, ConstraintRelationId, lfirst_oid(lc));
			performDeletion(&addr, DROP_RESTRICT, PERFORM_DELETION_INTERNAL);
		}
	}
	/*
	 * Its extended statistics too: they keep their names in the user's
	 * schema (a CREATE STATISTICS of the same name on the new table failed
	 * with 42710, and pg_dump would dump them).
	 */
	rel = table_open(relid, NoLock);
	foreach(lc, RelationGetStatExtList(rel))
	{
		ObjectAddress addr;

		ObjectAddressSet(addr, StatisticExtRelationId, lfirst_oid(lc));
		performDeletion(&addr, DROP_RESTRICT, PERFORM_DELETION_INTERNAL);
	}
	table_close(rel, NoLock);
	CommandCounterIncrement();

	/* Unique names inside leapfrog_retired, derived from OIDs. */
	rel = table_open(relid, AccessExclusiveLock);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		snprintf(newname, sizeof(newname), "m%d_%u", st->migration_id, lfirst_oid(lc));
		RenameRelationInternal(lfirst_oid(lc), newname, true, true);
	}
	foreach(lc, getOwnedSequences(relid))
	{
		snprintf(newname, sizeof(newname), "m%d_%u", st->migration_id, lfirst_oid(lc));
		RenameRelationInternal(lfirst_oid(lc), newname, true, false);
	}
	snprintf(newname, sizeof(newname), "m%d_%u_%s", st->migration_id, relid, relname);
	RenameRelationInternal(relid, newname, true, false);
	CommandCounterIncrement();

	moved = new_object_addresses();
	AlterTableNamespaceInternal(rel, RelationGetNamespace(rel), retired_nsp, moved);
	free_object_addresses(moved);
	table_close(rel, NoLock);
	lf_retired_join_extension(relid, true);
	CommandCounterIncrement();

	remember_oid(st, &st->retired, relid);
	remember(st, &st->retired_names, MemoryContextStrdup(st->cxt, qname));
}

static void
do_drop(StartState *st, RawStmt *rs)
{
	DropStmt   *drop = (DropStmt *) rs->stmt;
	ListCell   *lc;

	if (drop->removeType == OBJECT_INDEX)
	{
		/* a catalog change; CONCURRENTLY cannot run in a transaction */
		rs = copyObject(rs);
		((DropStmt *) rs->stmt)->concurrent = false;
		run_stmt(st, rs);
		return;
	}
	if (drop->removeType != OBJECT_TABLE)
		refuse(errmsg("only DROP TABLE and DROP INDEX are supported in a leapfrog script"));
	foreach(lc, drop->objects)
	{
		RangeVar   *rv = makeRangeVarFromNameList(lfirst(lc));

		/* ownership checked before the lock, as DROP checks it */
		Oid			relid = RangeVarGetRelidExtended(rv, AccessExclusiveLock,
													 drop->missing_ok ? RVR_MISSING_OK : 0,
													 RangeVarCallbackOwnsRelation, NULL);

		if (!OidIsValid(relid))
			continue;
		if (lf_is_target(relid) && !mapped_input(st, relid))
			refuse(errmsg("DROP TABLE \"%s\", which migration \"%s\" is still filling, is not supported",
						  rv->relname, lf_migration_by_target(relid)->name),
				   errdetail("Only a table the script reads with INSERT ... SELECT may be dropped while an earlier migration fills it."),
				   errhint("Wait for that migration with leapfrog.wait(), or finish it now with leapfrog.complete()."));
		if (mapped_input(st, relid))
		{
			if (drop->behavior == DROP_CASCADE)
				refuse(errmsg("DROP TABLE ... CASCADE of a mapping input is not supported"));
			if (st->planning)
				plan_note(st, st->current, "retire", relid,
						  unit_readers(st, relid) > 1 ?
						  "kept in leapfrog_retired until its rows have moved, tracked by keys: "
						  "several GROUP BY mappings read it, each its own groups" :
						  "kept in leapfrog_retired until its rows have moved")->target = NULL;
			retire(st, rs, relid);
		}
		else
		{
			DropStmt   *one = copyObject(drop);
			RawStmt    *ors = copyObject(rs);

			one->objects = list_make1(lfirst(lc));
			ors->stmt = (Node *) one;
			run_stmt(st, ors);
		}
	}
}

/* ---------------------------------------------------------------------
 * The switch
 * ---------------------------------------------------------------------
 */
/*
 * Take the strong locks first, so a retry happens before any work.  Only
 * one table is waited for (with the attempt's lock_timeout); the others are
 * taken without waiting, and one that is busy ends the attempt (55P03,
 * retried) and is the one waited for in the next.  Waiting for a second
 * table while holding the first made a cycle with the application: a
 * transaction holding the second and about to touch the first waited for
 * start(), which waited for it until its lock_timeout, attempt after
 * attempt (TPC-C's join migration drops order_line, then stock, which
 * NewOrder updates before it inserts order lines: 8 retries and a 3.2 s
 * switch under load).
 */
static void
lock_dropped_tables(StartState *st)
{
	List	   *rvs = NIL;
	List	   *relids = NIL;
	Oid			first;
	ListCell   *lc,
			   *lc2;

	foreach(lc, st->stmts)
	{
		RawStmt    *rs = lfirst(lc);

		if (IsA(rs->stmt, DropStmt) && ((DropStmt *) rs->stmt)->removeType == OBJECT_TABLE)
			foreach(lc2, ((DropStmt *) rs->stmt)->objects)
			{
				RangeVar   *rv = makeRangeVarFromNameList(lfirst(lc2));
				Oid			relid = RangeVarGetRelid(rv, NoLock, true);

				/* as DROP does: a table the caller may not drop is not locked */
				if (OidIsValid(relid) && !pg_class_ownercheck(relid, GetUserId()))
				{
					st->current = stmt_number(st, rs);
					aclcheck_error(ACLCHECK_NOT_OWNER,
								   get_relkind_objtype(get_rel_relkind(relid)), rv->relname);
				}
				rvs = lappend(rvs, rv);
				relids = lappend_oid(relids, relid);
			}
	}
	if (rvs == NIL)
		return;

	/* the table that was busy in the last attempt first, else the script's first */
	first = list_member_oid(relids, st->lock_first) ? st->lock_first : InvalidOid;
	foreach(lc, relids)
		if (!OidIsValid(first))
			first = lfirst_oid(lc);
	if (!OidIsValid(first))
		return;					/* DROP TABLE IF EXISTS of tables that do not */
	lf_switch_lock(first, AccessExclusiveLock);
	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);

		if (!OidIsValid(relid) || relid == first ||
			ConditionalLockRelationOid(relid, AccessExclusiveLock))
			continue;
		st->lock_first = relid;
		note_busy_relation(relid, AccessExclusiveLock);
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not obtain lock on relation \"%s\"", get_rel_name(relid))));
	}
	/* the names still name the tables locked (renamed or dropped meanwhile: retry) */
	forboth(lc, rvs, lc2, relids)
		if (RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true) != lfirst_oid(lc2))
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("table \"%s\" changed while start() locked it",
							((RangeVar *) lfirst(lc))->relname)));
}

/* The replacement whose copy relid is, if the script replaced a table. */
static LfReplacement *
replacement_of(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->replacements)
		if (((LfReplacement *) lfirst(lc))->clone == relid)
			return lfirst(lc);
	return NULL;
}

/*
 * A table the script alters the slow way is replaced lazily: an empty copy
 * takes its place (replace.c), the table is retired as DROP TABLE retires a
 * mapping input, and the mapping is built at the end of the script.
 */
static LfReplacement *
replace_table(StartState *st, RawStmt *rs, int stmt_no, Oid relid, const char *why)
{
	LfReplacement *r;

	lf_refuse_if_migrating(relid, get_rel_name(relid), "alter");
	if (st->planning)
		(void) plan_note(st, stmt_no, "replace", relid, why);
	{
		MemoryContext old = MemoryContextSwitchTo(st->cxt);

		st->notices = lappend(st->notices, list_make2(get_rel_name(relid), pstrdup(why)));
		MemoryContextSwitchTo(old);
	}
	r = lf_replace_begin(relid, why);
	retire(st, rs, relid);
	lf_replace_switch(r);
	st->replacements = lappend(st->replacements, r);
	return r;
}

/*
 * A retype of a column the table inherits is PostgreSQL's error (42P16),
 * raised as eagerly, before the refusal of a lazy replacement of a table in
 * inheritance or partitioning (0A000) would hide it.
 */
static void
check_inherited_columns(AlterTableStmt *stmt, Oid relid)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst(lc);
		HeapTuple	tup;

		if (cmd->subtype != AT_AlterColumnType || cmd->name == NULL ||
			!HeapTupleIsValid(tup = SearchSysCacheAttName(relid, cmd->name)))
			continue;
		if (((Form_pg_attribute) GETSTRUCT(tup))->attinhcount > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
					 errmsg("cannot alter inherited column \"%s\"", cmd->name)));
		ReleaseSysCache(tup);
	}
}

/*
 * ALTER TABLE runs as written: on a table the script created (empty until
 * its mapping fills it) or replaced, or, on a table holding rows, when
 * PostgreSQL makes it a catalog change (alter.c); otherwise the table is
 * replaced lazily first.  A mapping is fixed when its INSERT runs, so
 * neither its input nor its target may change after it.  Tables under a
 * running migration are refused by the DDL guard (utility.c).
 */
static void
do_alter(StartState *st, RawStmt *rs)
{
	AlterTableStmt *stmt = (AlterTableStmt *) rs->stmt;
	Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, stmt->missing_ok);
	LfReplacement *r = NULL;
	char	   *why = NULL;
	ListCell   *lc;

	if (OidIsValid(relid))
	{
		/* the lock the ALTER TABLE takes, taken here so a wait is named */
		lf_switch_lock(relid, AlterTableGetLockLevel(stmt->cmds));
		foreach(lc, st->mappings)
		{
			PendingMapping *pm = lfirst(lc);

			if (pm_reads(pm, relid) || pm->target == relid)
				refuse(errmsg("ALTER TABLE on table \"%s\" after a mapping that %s it is not supported",
							  get_rel_name(relid), pm_reads(pm, relid) ? "reads" : "fills"),
					   errdetail("A mapping is fixed when its INSERT ... SELECT runs. Statement: %s",
								 stmt_text(st, rs)),
					   errhint("Put the ALTER TABLE before the INSERT ... SELECT."));
		}
		r = replacement_of(st, relid);

		/*
		 * A table an earlier migration still fills gets rows after start():
		 * its mapping inserts them by column number, so every change but a
		 * rename goes to a lazy replacement (chained migrations).
		 */
		if (r == NULL && !list_member_oid(st->created, relid) && lf_is_target(relid))
			why = psprintf("migration \"%s\" is still filling it",
						   lf_migration_by_target(relid)->name);
		if (r == NULL && !list_member_oid(st->created, relid) &&
			(why != NULL || !lf_alter_is_instant(stmt, relid, stmt_text(st, rs), &why)))
		{
			bool		rewrites = lf_alter_rewrites(stmt, relid);

			check_inherited_columns(stmt, relid);
			r = replace_table(st, rs, st->current, relid, why);
			r->rewrites = rewrites;
		}
		else if (r)
			r->rewrites |= lf_alter_rewrites(stmt, relid);
		if (r)
			lf_replace_note(r, stmt);
	}
	run_stmt(st, rs);
	if (OidIsValid(relid) && r)
		lf_replace_noted(r);
}

/* CREATE INDEX on a table holding rows builds it on a lazy replacement. */
static void
do_index(StartState *st, RawStmt *rs)
{
	IndexStmt  *stmt = (IndexStmt *) rs->stmt;
	Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, false);

	/*
	 * CONCURRENTLY (Rails' algorithm: :concurrently, strong_migrations'
	 * advice) cannot run in a transaction; the replacement never blocks
	 * writes for the index anyway: build it plainly, on the copy.
	 */
	if (stmt->concurrent)
	{
		rs = copyObject(rs);
		((IndexStmt *) rs->stmt)->concurrent = false;
	}
	if (mapped_input(st, relid))
		refuse(errmsg("CREATE INDEX on table \"%s\" after a mapping that reads it is not supported",
					  get_rel_name(relid)));
	if (!list_member_oid(st->created, relid) && replacement_of(st, relid) == NULL)
		(void) replace_table(st, rs, st->current, relid,
							 "CREATE INDEX: PostgreSQL would build the index");
	run_stmt(st, rs);
}

/* A column renamed on a replaced table: the names of the old one differ now. */
static void
do_rename(StartState *st, RawStmt *rs)
{
	RenameStmt *stmt = (RenameStmt *) rs->stmt;

	if (stmt->renameType == OBJECT_COLUMN)
	{
		Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
		LfReplacement *r = OidIsValid(relid) ? replacement_of(st, relid) : NULL;

		if (r)
			r->columns_changed = true;
	}
	run_stmt(st, rs);
}

/*
 * The mapping of a replaced table (replace.c): SELECT, over the old table,
 * one expression per attribute of the copy in attribute order, ctid.  A
 * copied column takes the old column's value or its USING expression,
 * coerced to its final type as ALTER COLUMN TYPE coerces; a column the
 * script added takes the value ADD COLUMN gave the existing rows (replace.c),
 * coerced to its final type.
 */
static void
add_replacement_mapping(StartState *st, LfReplacement *r)
{
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;
	Relation	in;
	Relation	target;
	TupleDesc	desc;
	List	   *tlist = NIL;
	Query	   *q;
	PendingMapping *pm;

	if (!OidIsValid(get_rel_namespace(r->clone)))
		refuse(errmsg("table \"%s\", replaced by the script, is dropped by it", r->relname));
	lf_replace_check_valid(r);
	in = table_open(r->old, AccessShareLock);
	target = table_open(r->clone, AccessShareLock);
	desc = RelationGetDescr(target);
	pstate->p_sourcetext = st->script;
	nsitem = addRangeTableEntryForRelation(pstate, in, AccessShareLock, NULL, false, true);
	addNSItemToQuery(pstate, nsitem, true, true, true);
	for (int attno = 1; attno <= desc->natts; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);
		Node	   *expr;

		if (att->attisdropped)
			expr = (Node *) makeNullConst(INT4OID, -1, InvalidOid);
		else if (att->attgenerated)
			refuse(errmsg("generated column \"%s\" is not supported in table \"%s\", replaced lazily",
						  NameStr(att->attname), r->relname));
		else if (attno <= r->nsource)
		{
			Node	   *raw = r->using_expr[attno - 1];
			Oid			type;

			if (raw == NULL)
			{
				ColumnRef  *cref = makeNode(ColumnRef);

				cref->fields = list_make1(makeString(get_attname(r->old, r->source[attno - 1], false)));
				cref->location = -1;
				raw = (Node *) cref;
			}
			expr = transformExpr(pstate, copyObject(raw), EXPR_KIND_ALTER_COL_TRANSFORM);
			type = exprType(expr);
			expr = coerce_to_target_type(pstate, expr, type, att->atttypid, att->atttypmod,
										 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
			if (expr == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("column \"%s\" cannot be cast automatically to type %s",
								NameStr(att->attname), format_type_be(att->atttypid))));
			assign_expr_collations(pstate, expr);
		}
		else
		{
			/* added by the script: the value ADD COLUMN gave, in the final type */
			expr = lf_replace_added_value(r, attno);
			if (expr == NULL)
				expr = (Node *) makeNullConst(att->atttypid, att->atttypmod, att->attcollation);
			expr = coerce_to_target_type(pstate, expr, exprType(expr), att->atttypid,
										 att->atttypmod, COERCION_ASSIGNMENT,
										 COERCE_IMPLICIT_CAST, -1);
			if (expr == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("column \"%s\" cannot be cast automatically to type %s",
								NameStr(att->attname), format_type_be(att->atttypid))));
			if (!contain_volatile_functions(expr))
				expr = (Node *) evaluate_expr((Expr *) expression_planner((Expr *) expr),
											  att->atttypid, att->atttypmod, att->attcollation);
		}
		if (contain_mutable_functions(expr))
			refuse(errmsg("the value of column \"%s\" of table \"%s\" is not immutable",
						  NameStr(att->attname), r->relname),
				   errdetail("Leapfrog replaces the table lazily, and rows are migrated later than start(): only immutable expressions and defaults give the eager result."),
				   attno <= r->nsource ?
				   errhint("Give ALTER COLUMN ... TYPE an immutable USING expression (for a time zone: USING %s AT TIME ZONE 'UTC', say).",
						   quote_identifier(NameStr(att->attname))) :
				   errhint("Add the column with a constant or STABLE default, or without one and fill it after start()."));
		tlist = lappend(tlist, makeTargetEntry((Expr *) expr, attno,
											   pstrdup(NameStr(att->attname)), false));
	}
	tlist = lappend(tlist,
					makeTargetEntry((Expr *) makeVar(1, SelfItemPointerAttributeNumber,
													 TIDOID, -1, InvalidOid, 0),
									desc->natts + 1, pstrdup("lf_ctid"), false));
	table_close(target, AccessShareLock);
	table_close(in, AccessShareLock);

	q = makeNode(Query);
	q->commandType = CMD_SELECT;
	q->querySource = QSRC_ORIGINAL;
	q->canSetTag = true;
	q->rtable = pstate->p_rtable;
	q->jointree = makeFromExpr(pstate->p_joinlist, NULL);
	q->targetList = tlist;
	pm = MemoryContextAllocZero(st->cxt, sizeof(PendingMapping));
	pm->input = r->old;
	pm->kind = LF_MAP_ROWS;
	pm->ninputs = 1;
	pm->inputs[0] = r->old;
	pm->target = r->clone;
	/* of a table tracked by keys: its rows move with the carrier's units */
	pm->done_keys = carrier_done_keys(st, r->old);
	check_mapping_functions(q, r->clone);
	pm->query = MemoryContextStrdup(st->cxt, nodeToString(q));
	remember(st, &st->mappings, pm);
}

/*
 * Catalog changes that framework migrations print around their DDL and
 * that touch no table's rows: they run as written, where they stand.
 */
static bool
is_side_catalog_change(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_ConstraintsSetStmt:	/* Django's SET CONSTRAINTS ... IMMEDIATE */
		case T_CreateEnumStmt:
		case T_AlterEnumStmt:
		case T_CompositeTypeStmt:
		case T_CreateRangeStmt:
		case T_CreateDomainStmt:
		case T_CreateSeqStmt:
		case T_AlterSeqStmt:
		case T_CreateSchemaStmt:
		case T_CreateExtensionStmt:
		case T_CreateFunctionStmt:
		case T_ViewStmt:
		case T_GrantStmt:
			return true;
		default:
			return false;
	}
}

/* Into *m, the description of pending mapping pm (units.c). */
static void
describe_pending(PendingMapping *pm, LfMapping *m)
{
	m->query = stringToNode(pm->query);
	m->input = pm->input;
	m->natts = lf_mapping_natts(m->query);
	(void) lf_describe_units(m);
}

/*
 * Why input relid, which the script keeps (live) or drops, cannot be
 * tracked by keys (live.c), or NULL if it can: every mapping of the script
 * that reads it is a GROUP BY mapping, a join mapping (of a live table,
 * with key columns NOT NULL, or NULLs that join nothing:
 * why_not_join_in_place), or a
 * row mapping beside one (carried by the first one's units); or, of a live
 * table with a primary key, only row mappings read it (carried by the
 * first one's rows, keyed by the primary key); and the script neither
 * replaces it nor reads a table still being filled.  live.c checks the
 * tables and each mapping's key (at most four key columns that may be
 * NULL, a join's key of one type or of two that convert, no rules, no row
 * security, no BEFORE row trigger firing after its own).
 */
static const char *why_not_join_in_place(StartState *st, LfMapping *m, Oid relid);

static const char *
why_not_in_place(StartState *st, Oid relid, bool live)
{
	ListCell   *lc;
	bool		rows_keyed = false;

	if (live && !lf_track_live_inputs)
		return "leapfrog.track_live_inputs is off";
	if (replacement_of(st, relid))
		return "the script alters it";
	if (lf_is_target(relid))
		return "a running migration fills it";
	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);
		LfMapping	m = {0};
		const char *why;

		if (!pm_reads(pm, relid))
			continue;
		/* row mappings ride on the first GROUP BY mapping's groups */
		if (pm->kind == LF_MAP_ROWS && (unit_readers(st, relid) > 0 || rows_keyed))
			continue;
		describe_pending(pm, &m);
		if (pm->kind == LF_MAP_ROWS)
		{
			/* ... or on the first row mapping's rows, by primary key */
			if ((why = lf_describe_row_keys(&m)) != NULL)
				return why;
			rows_keyed = true;
		}
		else if (pm->kind == LF_MAP_JOIN && live &&
				 (why = why_not_join_in_place(st, &m, relid)) != NULL)
			return why;
		if ((why = lf_live_unsupported(&m)) != NULL)
			return why;
	}
	return NULL;
}

/*
 * Why live input relid of join mapping m cannot be tracked in place, or
 * NULL.  A row of it with a NULL key on a side the join preserves would be
 * a unit of its own, keyed by its ctid (LF_KEY_ROW), which a BEFORE
 * trigger does not know for the row it inserts: there its key columns must
 * be NOT NULL.  On a side the join does not preserve such a row gives no
 * row and is no unit (lf_key_joins_nothing), unless a row mapping reads the
 * table: its rows would ride on the join's units (lf_keys_carrier), and
 * that one would have to move.  The join's other input, if the script
 * retires it, is then tracked by the same keys (track_shared_retired), and
 * must allow it.
 */
static const char *
why_not_join_in_place(StartState *st, LfMapping *m, Oid relid)
{
	int			i = m->inputs[0] == relid ? 0 : 1;
	Oid			other = m->inputs[1 - i];
	const char *why;
	ListCell   *lc;

	for (int k = 0; k < m->nkeys; k++)
	{
		if (lf_column_not_null(relid, m->keys[i][k]))
			continue;
		if (lf_join_preserves(m, i))
			return "a join key column that may be NULL, on the side an outer join preserves";
		foreach(lc, st->mappings)
		{
			PendingMapping *pm = lfirst(lc);

			if (pm->kind == LF_MAP_ROWS && pm_reads(pm, relid))
				return "a join key column that may be NULL, and a row mapping that reads the table";
		}
	}
	if (list_member_oid(st->retired, other) &&
		(why = why_not_in_place(st, other, false)) != NULL)
		return psprintf("the join's other input cannot be tracked by keys: %s", why);
	return NULL;
}

static void
refuse_shared_units(const char *name, const char *why)
{
	refuse(errmsg("table \"%s\" is read by GROUP BY or join mappings that cannot track it by keys: %s",
				  name, why),
		   errdetail("GROUP BY and join mappings whose units differ share a table through a table of done keys each, "
					 "which needs a join's key columns of one type on both sides, or of two types one of which converts to the other implicitly and immutably, "
					 "and at most %d key columns that may be NULL.",
					 LF_MAX_NULLABLE_KEYS),
		   errhint("Fill one of the new tables in a later migration."));
}

/*
 * A table of done keys for each GROUP BY or join mapping that reads relid
 * and has none yet (live.c; a join's covers both inputs, and may have been
 * made for its other input), and of a live table (trigger not NULL) the
 * trigger on relid, into *trigger, which goes with each of them.  A row
 * mapping of relid shares the first one's table: its rows move with that
 * mapping's units (the carrier's step copies them), so a row is copied
 * once, and its target's reads exclude the carrier's units.  Of a live
 * table that only row mappings read, the first one has the table, keyed by
 * the primary key, and carries the others.
 */
static void
track_by_keys(StartState *st, Oid relid, Oid *trigger)
{
	ListCell   *lc;
	Oid			carrier;

	foreach(lc, st->mappings)
	{
		PendingMapping *reader = lfirst(lc);

		if (!pm_reads(reader, relid) || reader->kind == LF_MAP_ROWS)
			continue;
		if (!OidIsValid(reader->done_keys))
		{
			LfMapping	m = {0};

			describe_pending(reader, &m);
			reader->done_keys = lf_live_track(&m, st->migration_id);
		}
		if (trigger)
			lf_live_watch(relid, reader->done_keys, trigger);
	}
	carrier = carrier_done_keys(st, relid);
	foreach(lc, st->mappings)
	{
		PendingMapping *reader = lfirst(lc);

		if (!pm_reads(reader, relid) || reader->kind != LF_MAP_ROWS)
			continue;
		if (!OidIsValid(carrier))
		{
			LfMapping	m = {0};

			describe_pending(reader, &m);
			if (lf_describe_row_keys(&m) != NULL)
				elog(ERROR, "leapfrog: table %u has no primary key", relid);
			carrier = lf_live_track(&m, st->migration_id);
			if (trigger)
				lf_live_watch(relid, carrier, trigger);
		}
		reader->done_keys = carrier;
	}
}

/*
 * A mapping input that the script does not drop stays live: the
 * application keeps reading and writing it, and the mapping must read it
 * as it was at start().
 *
 * Read by GROUP BY mappings (and maybe row mappings, whose rows move with the
 * first one's groups), or only by row mappings and with a primary key (each
 * row a unit, by that key), it is tracked in place (live.c): it stays
 * where it is, a trigger migrates a row's groups before a write touches
 * it, and a table of done keys per mapping records the groups migrated.
 * Creating the trigger takes ShareRowExclusiveLock with the switch's
 * lock_timeout and retries: writes in flight are fenced, reads go on.
 *
 * Otherwise it is replaced lazily (replace.c), as an ALTER TABLE that reads
 * it would replace it: the table as it was is retired, frozen, for the
 * mappings to read; an empty copy takes its name, and its rows move into
 * the copy through an identity mapping, row by row, or with the groups or
 * join keys of the group or join mapping that reads it (migrate.c).  A
 * statement that writes one of its rows first migrates the row's unit, so
 * no write reaches a row before the mappings have read it, and rows
 * written after start() are in the copy, where the mappings never read.
 * The retirement takes its AccessExclusiveLock with the switch's
 * lock_timeout and retries: writes in flight at start() are fenced.
 */
static void
keep_live_inputs(StartState *st)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		st->current = pm->stmt_no;
		for (int i = 0; i < pm->ninputs; i++)
		{
			Oid			relid = pm->inputs[i];
			const char *why;
			Oid			trigger = InvalidOid;

			if (list_member_oid(st->retired, relid) || list_member_oid(st->live, relid))
				continue;

			/*
			 * Tracked in place or replaced, the table changes (a trigger, or
			 * a copy in its place) until the migration completes: its owner's
			 * call, as for a table the script drops or alters.  Eagerly a
			 * role that may only read it could fill a new table from it.
			 */
			if (!pg_class_ownercheck(relid, GetUserId()))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("must be owner of table %s", get_rel_name(relid)),
						 errdetail("The script keeps the table and a mapping reads it: until the migration completes, a trigger tracks its writes or a copy takes its place."),
						 errhint("Run the migration as the table's owner.")));
			if ((why = why_not_in_place(st, relid, true)) != NULL)
			{
				/* read by several GROUP BY or join mappings: tracked by keys, retired */
				(void) replace_table(st, pm->rs, pm->stmt_no, relid,
									 psprintf("A mapping reads it and the script does not drop it: it stays live, and its rows move into a copy "
											  "after the mapping has read them as they were at start(); it is not tracked in place: %s",
											  why));
				continue;
			}
			lf_refuse_if_migrating(relid, get_rel_name(relid), "alter");
			if (st->planning)
				(void) plan_note(st, pm->stmt_no, "track", relid,
								 psprintf("A mapping reads it and the script does not drop it: it stays live, "
										  "and a write of one of its rows first migrates the row%s",
										  join_reads(st, relid) ? "'s join key (with its rows of the other input)" :
										  unit_readers(st, relid) > 0 ? "'s group" : ""));
			track_by_keys(st, relid, &trigger);
			remember_oid(st, &st->live, relid);
			remember(st, &st->live_names, MemoryContextStrdup(st->cxt, qualified_name(relid)));
		}
	}
}

/*
 * Mappings whose units differ share only a table tracked by keys: a retired
 * table (dropped by the script, or live and replaced) read by several GROUP
 * BY or join mappings gets a table of done keys per mapping, as a live one
 * (keep_live_inputs), but no trigger (nobody writes it) and its rows are
 * never deleted: a row is in a unit of each mapping, migrated at different
 * times.  A join mapping tracked so tracks its other input by the same
 * keys (its steps delete no row of either), and so on, until every retired
 * table that a mapping tracked by keys reads is tracked by keys.
 */
static void
track_shared_retired(StartState *st)
{
	List	   *tracked = NIL;
	bool		more = true;

	while (more)
	{
		ListCell   *lc,
				   *lc2;

		more = false;
		forboth(lc, st->retired, lc2, st->retired_names)
		{
			Oid			relid = lfirst_oid(lc);
			const char *why;

			if (list_member_oid(tracked, relid) ||
				(unit_readers(st, relid) < 2 && !OidIsValid(carrier_done_keys(st, relid))))
				continue;
			if ((why = why_not_in_place(st, relid, false)) != NULL)
				refuse_shared_units(lfirst(lc2), why);
			track_by_keys(st, relid, NULL);
			tracked = lappend_oid(tracked, relid);
			more = true;
		}
	}
}

/* The table of done keys of the first mapping that reads relid, or none. */
static Oid
first_done_keys(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		if (pm_reads(pm, relid) && OidIsValid(pm->done_keys))
			return pm->done_keys;
	}
	return InvalidOid;
}

/* Run one statement of the script. */
static void
run_one(StartState *st, RawStmt *rs)
{
	st->current = st->ran = stmt_number(st, rs);
	switch (nodeTag(rs->stmt))
	{
		case T_CreateStmt:
			{
				CreateStmt *cs = (CreateStmt *) rs->stmt;

				/* IF NOT EXISTS on a table already there creates nothing */
				if (cs->if_not_exists && OidIsValid(table_to_create(cs->relation)))
				{
					run_stmt(st, rs);
					break;
				}
				run_stmt(st, rs);
				remember_oid(st, &st->created, RangeVarGetRelid(cs->relation, NoLock, false));
				break;
			}
		case T_IndexStmt:
			do_index(st, rs);
			break;
		case T_AlterTableStmt:
			do_alter(st, rs);
			break;
		case T_RenameStmt:
			do_rename(st, rs);
			break;
		case T_CommentStmt:
			run_stmt(st, rs);	/* a catalog change */
			break;

		case T_InsertStmt:
			add_mapping(st, rs);
			break;
		case T_UpdateStmt:
		case T_DeleteStmt:
			do_data_stmt(st, rs, pg_analyze_and_rewrite_fixedparams(copyObject(rs), st->script,
																	 NULL, 0, NULL));
			break;
		case T_CreateTableAsStmt:
			add_ctas(st, rs);
			break;
		case T_DropStmt:
			do_drop(st, rs);
			break;
		default:
			if (is_side_catalog_change(rs->stmt))
				run_stmt(st, rs);
			break;				/* the rest was refused before the attempt */
	}
}

/* The script start() is running (lf_script_mapping_calling), or NULL */
static StartState *running_script = NULL;

/*
 * The target of a mapping of the running script that calls function (or
 * operator) objid, or NULL: the script may not replace it after the
 * mapping's INSERT (utility.c).
 */
const char *
lf_script_mapping_calling(Oid classId, Oid objid)
{
	ListCell   *lc;

	if (running_script == NULL)
		return NULL;
	foreach(lc, running_script->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		if (lf_tree_uses(stringToNode(pm->query), classId, objid))
			return get_rel_name(pm->target);
	}
	return NULL;
}

/*
 * Run the script's statements in order, after the prelude: DDL, mappings,
 * retirements.
 */
static void
run_script(StartState *st)
{
	ListCell   *lc;

	running_script = st;
	PG_TRY();
	{
		for_each_from(lc, st->stmts, st->prelude)
			run_one(st, lfirst(lc));
	}
	PG_FINALLY();
	{
		running_script = NULL;
	}
	PG_END_TRY();
	keep_live_inputs(st);
	track_shared_retired(st);
	st->current = 0;
	foreach(lc, st->replacements)
		add_replacement_mapping(st, lfirst(lc));
}

/*
 * Every mapping's input has been retired, by the script's DROP TABLE or by
 * keep_live_inputs; and no target was dropped by the script.
 */
/*
 * A trigger or rule on a new table, which the script cannot create but an
 * event trigger can, as the script's CREATE TABLE ends (an audit
 * framework's, say): eagerly it acts once per row at start(); lazily it
 * would act as rows migrate, or on none that a read computes, and a BEFORE
 * trigger that skips a row would leave it unmigratable.  Refused.
 */
static void
check_target_triggers(Oid target)
{
	Relation	rel = table_open(target, AccessShareLock);
	TriggerDesc *td = rel->trigdesc;
	bool		rules = rel->rd_rules != NULL;
	char	   *name = pstrdup(RelationGetRelationName(rel));

	table_close(rel, AccessShareLock);
	for (int i = 0; td && i < td->numtriggers; i++)
		if (!td->triggers[i].tgisinternal)
			refuse(errmsg("new table \"%s\" has trigger \"%s\"", name, td->triggers[i].tgname),
				   errdetail("A trigger on a table a mapping fills would act on its rows as they migrate, not once at start() as eagerly."),
				   errhint("An event trigger may have created it: disable that event trigger (ALTER EVENT TRIGGER ... DISABLE) for start(), and create the trigger once the migration is complete."));
	if (rules)
		refuse(errmsg("new table \"%s\" has rules", name),
			   errdetail("A rule on a table a mapping fills would rewrite the statements that migrate its rows."),
			   errhint("An event trigger may have created it: disable that event trigger (ALTER EVENT TRIGGER ... DISABLE) for start(), and create the rule once the migration is complete."));
}

static void
check_inputs_retired(StartState *st)
{
	ListCell   *lc;

	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		for (int i = 0; i < pm->ninputs; i++)
			if (!list_member_oid(st->retired, pm->inputs[i]) &&
				!list_member_oid(st->live, pm->inputs[i]))
				elog(ERROR, "leapfrog: mapping input \"%s\" was not retired",
					 get_rel_name(pm->inputs[i]));
		if (!OidIsValid(get_rel_namespace(pm->target)))
			refuse(errmsg("mapping target dropped by the same script"));
		check_target_triggers(pm->target);
	}
}

/*
 * If retired table relid is a table the script replaced lazily that eager
 * would have altered in place (no rewrite), its copy, which took its name:
 * a snapshot older than start() sees its rows eagerly (migrate.c gives it
 * 40001), and any other new table filled from it empty.  Else InvalidOid.
 */
static Oid
in_place_copy(StartState *st, Oid relid)
{
	ListCell   *lc;

	foreach(lc, st->replacements)
	{
		LfReplacement *r = lfirst(lc);

		if (r->old == relid)
			return r->rewrites ? InvalidOid : r->clone;
	}
	return InvalidOid;
}

/* The catalog rows of the migration: its inputs and mappings. */
static void
record_migration(StartState *st)
{
	ListCell   *lc,
			   *lc2;

	forboth(lc, st->retired, lc2, st->retired_names)
		lf_catalog_add_input(st->migration_id, lfirst_oid(lc), (char *) lfirst(lc2),
							 OidIsValid(in_place_copy(st, lfirst_oid(lc))),
							 first_done_keys(st, lfirst_oid(lc)),
							 in_place_copy(st, lfirst_oid(lc)));
	forboth(lc, st->live, lc2, st->live_names)
		lf_catalog_add_input(st->migration_id, lfirst_oid(lc), (char *) lfirst(lc2), false,
							 first_done_keys(st, lfirst_oid(lc)), InvalidOid);
	foreach(lc, st->mappings)
	{
		PendingMapping *pm = lfirst(lc);

		lf_catalog_add_mapping(st->migration_id, pm->input, pm->target, pm->query,
							   pm->done_keys);
	}
	if (st->mappings == NIL)
		lf_catalog_mark_started_done(st->migration_id);
}

static bool
is_foreign_key(Node *n)
{
	return IsA(n, Constraint) && ((Constraint *) n)->contype == CONSTR_FOREIGN;
}

/* Whether a list of constraints holds a foreign key. */
static bool
has_foreign_key(List *constraints)
{
	ListCell   *lc;

	foreach(lc, constraints)
		if (is_foreign_key(lfirst(lc)))
			return true;
	return false;
}

/*
 * Whether rs may run in the prelude: it creates a new table, or an index on
 * one the prelude created, and locks no table that was there before.  LIKE,
 * INHERITS, PARTITION OF and a foreign key lock the table they name; taking
 * that lock before the dropped tables' would bring back the cycle with the
 * application that lock_dropped_tables avoids.
 */
static bool
in_prelude(StartState *st, RawStmt *rs)
{
	CreateStmt *cs = (CreateStmt *) rs->stmt;
	ListCell   *lc;

	if (IsA(rs->stmt, IndexStmt))
		return list_member_oid(st->created,
							   RangeVarGetRelid(((IndexStmt *) rs->stmt)->relation, NoLock, true));
	if (!IsA(cs, CreateStmt) || cs->inhRelations != NIL || cs->partbound != NULL ||
		has_foreign_key(cs->constraints))
		return false;
	foreach(lc, cs->tableElts)
	{
		Node	   *elt = lfirst(lc);

		if (IsA(elt, TableLikeClause) || is_foreign_key(elt) ||
			(IsA(elt, ColumnDef) && has_foreign_key(((ColumnDef *) elt)->constraints)))
			return false;
	}
	return true;
}

/*
 * The prelude: the script's leading statements that create its new tables
 * and their indexes run once, before the attempts take the dropped tables'
 * locks, in the caller's transaction (a retried attempt starts after them).
 * The application then waits for the rest of the switch only: building the
 * new tables is half of the split's.
 */
static void
run_prelude(StartState *st)
{
	ListCell   *lc;

	foreach(lc, st->stmts)
	{
		if (!in_prelude(st, lfirst(lc)))
			break;
		run_one(st, lfirst(lc));
		st->prelude++;
	}
	st->prelude_created = st->created;
	st->current = 0;
}

/* One attempt at the switch, in a subtransaction (lf_with_lock_retries). */
static void
switch_attempt(void *arg)
{
	StartState *st = arg;
	MemoryContext old;

	st->retired = st->retired_names = st->mappings = st->replacements = NIL;
	old = MemoryContextSwitchTo(st->cxt);
	st->created = list_copy(st->prelude_created);
	MemoryContextSwitchTo(old);
	st->live = st->live_names = NIL;
	st->notices = st->plan = NIL;
	st->current = 0;
	st->ran = st->prelude;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	lock_dropped_tables(st);
	INSTR_TIME_SET_CURRENT(st->locked_at);
	st->migration_id = lf_catalog_add_migration(st->name, GetUserId(), st->script,
											   st->on_error);
	lf_chaining = true;
	PG_TRY();
	{
		run_script(st);
	}
	PG_FINALLY();
	{
		lf_chaining = false;
	}
	PG_END_TRY();
	check_inputs_retired(st);
	record_migration(st);
	SPI_finish();
}

/* The switch: the prelude, then attempts until one has the locks. */
static void
run_switch(StartState *st)
{
	run_prelude(st);
	lf_with_lock_retries(switch_attempt, st, "the migration switch");
}

static bool
is_transaction_stmt(RawStmt *rs, TransactionStmtKind kind1, TransactionStmtKind kind2)
{
	return IsA(rs->stmt, TransactionStmt) &&
		(((TransactionStmt *) rs->stmt)->kind == kind1 ||
		 ((TransactionStmt *) rs->stmt)->kind == kind2);
}

/*
 * Framework tools print a migration as BEGIN; ...; COMMIT; (Django's
 * sqlmigrate, Alembic's offline mode).  start() already runs the script as
 * one transaction, the caller's: the pair is dropped.  A lone BEGIN or
 * COMMIT, or one in the middle, is refused with the other transaction
 * control statements.
 */
static void
strip_transaction_wrapper(StartState *st)
{
	if (list_length(st->stmts) >= 2 &&
		is_transaction_stmt(linitial(st->stmts), TRANS_STMT_BEGIN, TRANS_STMT_START) &&
		((TransactionStmt *) ((RawStmt *) linitial(st->stmts))->stmt)->options == NIL &&
		is_transaction_stmt(llast(st->stmts), TRANS_STMT_COMMIT, TRANS_STMT_COMMIT) &&
		!((TransactionStmt *) ((RawStmt *) llast(st->stmts))->stmt)->chain)
	{
		st->stmts = list_delete_last(st->stmts);
		st->stmts = list_delete_first(st->stmts);
	}
}

static void
check_statement_kinds(StartState *st)
{
	ListCell   *lc;

	if (st->stmts == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("migration script is empty")));
	foreach(lc, st->stmts)
	{
		RawStmt    *rs = lfirst(lc);

		st->current = stmt_number(st, rs);
		switch (nodeTag(rs->stmt))
		{
			case T_CreateStmt:
			case T_IndexStmt:
			case T_InsertStmt:
			case T_CreateTableAsStmt:
			case T_DropStmt:
				break;
			case T_AlterTableStmt:
				if (((AlterTableStmt *) rs->stmt)->objtype != OBJECT_TABLE)
					refuse(errmsg("only ALTER TABLE is supported in a leapfrog script, not ALTER INDEX, VIEW or SEQUENCE"),
						   errdetail("Statement: %s", stmt_text(st, rs)));
				break;
			case T_RenameStmt:
				switch (((RenameStmt *) rs->stmt)->renameType)
				{
					case OBJECT_TABLE:
					case OBJECT_COLUMN:
					case OBJECT_TABCONSTRAINT:
					case OBJECT_INDEX:
						break;
					default:
						refuse(errmsg("only renames of tables, columns, constraints and indexes are supported in a leapfrog script"),
							   errdetail("Statement: %s", stmt_text(st, rs)));
				}
				break;
			case T_CommentStmt:
				break;
			case T_TransactionStmt:
				refuse(errmsg("transaction control is not supported in a leapfrog script"),
					   errdetail("Statement: %s", stmt_text(st, rs)),
					   errhint("start() runs the script in the caller's transaction; BEGIN as the first statement with COMMIT as the last is accepted and ignored."));
				break;
			case T_UpdateStmt:
			case T_DeleteStmt:
				break;
			default:
				if (is_side_catalog_change(rs->stmt))
					break;
				refuse(errmsg("statement not supported in a leapfrog script"),
					   errdetail("Statement: %s", stmt_text(st, rs)),
					   errhint("A script may hold CREATE TABLE, CREATE INDEX, ALTER TABLE, renames, COMMENT, INSERT ... SELECT, CREATE TABLE ... AS SELECT, DROP TABLE, DROP INDEX, INSERT ... VALUES, UPDATE and DELETE on tables outside its mappings, and CREATE TYPE, SEQUENCE, SCHEMA, EXTENSION, FUNCTION, VIEW, GRANT and REVOKE."));
		}
	}
	st->current = 0;
}

/*
 * An error at a position in the script (a parse or analysis error of one
 * of its statements) points into the script, as an internal query, the
 * way SPI reports one: the position is not one in the calling statement.
 */
static void
script_errposition(void *arg)
{
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery((const char *) arg);
	}
}

Datum
leapfrog_start(PG_FUNCTION_ARGS)
{
	ErrorContextCallback errcb;
	StartState	st = {0};
	ListCell   *lc;
	instr_time	t0,
				t1,
				locked;

	lf_require_preload();
	if (!OidIsValid(lf_catalog_relid()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension leapfrog is not installed in this database")));
	st.cxt = CurrentMemoryContext;
	INSTR_TIME_SET_CURRENT(t0);
	st.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	st.script = text_to_cstring(PG_GETARG_TEXT_PP(1));
	st.on_error = PG_NARGS() > 2 ? text_to_cstring(PG_GETARG_TEXT_PP(2)) : "fail";
	if (strcmp(st.on_error, "fail") != 0 && strcmp(st.on_error, "quarantine") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("on_error must be 'fail' or 'quarantine', not \"%s\"", st.on_error)));
	if (st.name[0] == '\0')
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("migration name must not be empty")));

	/* Name taken? (the unique index would say so too, less clearly) */
	if (lf_catalog_name_taken(st.name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("migration \"%s\" already exists", st.name),
				 errhint("Choose another name.")));

	lf_forbid_prepare("leapfrog.start()");
	errcb.callback = script_errposition;
	errcb.arg = (void *) st.script;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	st.stmts = raw_parser(st.script, RAW_PARSE_DEFAULT);
	st.all_stmts = list_copy(st.stmts);
	strip_transaction_wrapper(&st);
	check_statement_kinds(&st);

	run_switch(&st);
	error_context_stack = errcb.previous;
	foreach(lc, st.notices)
		ereport(NOTICE,
				(errmsg("table \"%s\" is replaced lazily", (char *) linitial(lfirst(lc))),
				 errdetail("%s.", (char *) lsecond(lfirst(lc)))));

	lf_invalidate_all();
	if (st.mappings != NIL)
		lf_wake_worker_at_commit();
	INSTR_TIME_SET_CURRENT(t1);
	locked = t1;
	INSTR_TIME_SUBTRACT(t1, t0);
	INSTR_TIME_SUBTRACT(locked, st.locked_at);
	ereport(LOG,
			(errmsg("leapfrog: migration \"%s\" started: %d mapping(s) from %d retired table(s), switch took %.3f ms, the last %.3f ms holding the dropped tables' locks",
					st.name, list_length(st.mappings), list_length(st.retired),
					INSTR_TIME_GET_MILLISEC(t1), INSTR_TIME_GET_MILLISEC(locked))));
	PG_RETURN_VOID();
}

/* ---------------------------------------------------------------------
 * leapfrog.plan(script): what start() would do, without doing it
 * ---------------------------------------------------------------------
 */
PG_FUNCTION_INFO_V1(leapfrog_plan);

#define PLAN_COLS 11

/* The mapping's kind, as a user names it: 1:1, 1:n (a split), n:1, n:n */
static const char *
plan_kind(StartState *st, PlanNote *n)
{
	ListCell   *lc;

	if (n->pm == NULL)
		return strcmp(n->action, "replace") == 0 ? "1:1" : NULL;
	if (n->pm->kind == LF_MAP_GROUPS)
		return "n:1";
	if (n->pm->kind == LF_MAP_JOIN)
		return "n:n";
	foreach(lc, st->mappings)
	{
		PendingMapping *other = lfirst(lc);

		if (other != n->pm && other->stmt_no > 0 && other->kind == LF_MAP_ROWS &&
			other->input == n->pm->input)
			return "1:n";
	}
	return "1:1";
}

static void
plan_row(ReturnSetInfo *rsinfo, int stmt_no, const char *sql, const char *action,
		 const char *kind, PlanNote *n, const char *detail, const char *sqlstate,
		 const char *hint)
{
	Datum		values[PLAN_COLS] = {0};
	bool		nulls[PLAN_COLS];
	const char *texts[PLAN_COLS] = {NULL, sql, action, kind,
		n ? n->input : NULL, n ? n->target : NULL, NULL, NULL, detail, sqlstate, hint};

	for (int i = 0; i < PLAN_COLS; i++)
	{
		nulls[i] = texts[i] == NULL;
		if (texts[i])
			values[i] = CStringGetTextDatum(texts[i]);
	}
	nulls[0] = stmt_no == 0;
	values[0] = Int32GetDatum(stmt_no);
	nulls[6] = nulls[7] = n == NULL;
	if (n)
	{
		values[6] = Int64GetDatum(n->rows);
		values[7] = Int64GetDatum(n->bytes);
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * Runs the switch as start() would, in a subtransaction it always rolls
 * back: the same brief locks, and nothing changes.  One row per statement
 * run (more for a statement that does several things: a DROP of two
 * inputs, a mapping whose input stays live), in script order; an error
 * ends the plan with a row for it (action "refused" for 0A000, "error"
 * otherwise) and statements after it get none.
 */
Datum
leapfrog_plan(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StartState	st = {0};
	MemoryContext cxt;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;
	volatile int err_stmt = 0;
	int			reached = 0;
	ListCell   *lc;

	lf_require_preload();
	if (!OidIsValid(lf_catalog_relid()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension leapfrog is not installed in this database")));
	InitMaterializedSRF(fcinfo, 0);
	cxt = CurrentMemoryContext;
	st.cxt = cxt;
	st.planning = true;
	st.on_error = "fail";
	st.name = psprintf("leapfrog.plan() of backend %d at " INT64_FORMAT,
					   MyProcPid, (int64) GetCurrentTimestamp());
	st.script = text_to_cstring(PG_GETARG_TEXT_PP(0));

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		st.stmts = raw_parser(st.script, RAW_PARSE_DEFAULT);
		st.all_stmts = list_copy(st.stmts);
		strip_transaction_wrapper(&st);
		check_statement_kinds(&st);
		run_switch(&st);
	}
	PG_CATCH();
	{
		err_stmt = st.current;
		edata = lf_abort_with_error(cxt, true, owner);
	}
	PG_END_TRY();
	if (edata == NULL)
	{
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}

	/* statements run: all, or those before the one that failed */
	if (edata == NULL)
		reached = list_length(st.all_stmts);
	else
		reached = err_stmt > 0 ? Min(st.ran, err_stmt - 1) : st.ran;
	foreach(lc, st.all_stmts)
	{
		RawStmt    *rs = lfirst(lc);
		int			no = foreach_current_index(lc) + 1;
		bool		noted = false;
		ListCell   *lc2;

		if (no > reached)
			break;
		if (!list_member_ptr(st.stmts, rs))
			continue;			/* the BEGIN ... COMMIT around the script */
		foreach(lc2, st.plan)
		{
			PlanNote   *n = lfirst(lc2);

			if (n->stmt_no != no)
				continue;
			plan_row(rsinfo, no, stmt_text(&st, rs), n->action, plan_kind(&st, n), n,
					 n->detail, NULL, NULL);
			noted = true;
		}
		if (!noted)
			plan_row(rsinfo, no, stmt_text(&st, rs), "run", NULL, NULL, NULL, NULL, NULL);
	}
	if (edata)
	{
		RawStmt    *rs = err_stmt > 0 ? list_nth(st.all_stmts, err_stmt - 1) : NULL;
		char	   *detail = edata->detail ?
			psprintf("%s\n%s", edata->message, edata->detail) : edata->message;

		plan_row(rsinfo, err_stmt, rs ? stmt_text(&st, rs) : NULL,
				 edata->sqlerrcode == ERRCODE_FEATURE_NOT_SUPPORTED ? "refused" : "error",
				 NULL, NULL, detail, unpack_sql_state(edata->sqlerrcode), edata->hint);
	}
	return (Datum) 0;
}
