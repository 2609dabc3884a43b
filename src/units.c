/*-------------------------------------------------------------------------
 * units.c
 *	  Units of group and join mappings: what they are, and their rows.
 *
 * A row mapping (1:1, filters, splits) migrates input rows one by one.  A
 * GROUP BY mapping computes an output row from a whole group of input rows,
 * and a join mapping an output row from rows of two inputs; migrating one
 * input row alone would compute a partial group, or miss the join partners
 * of a row that are still unmigrated.  Their unit is a *key*: the rows of
 * every input of the mapping whose key columns equal it (the GROUP BY
 * columns; the columns of the join's equalities, on each side).  Migrating
 * a unit migrates all its rows at once, and computes the mapping over
 * exactly those rows, which is what the eager script computes for that key
 * (a group is computed whole; a join pair lies in one unit).  NULL keys
 * follow SQL: a GROUP BY puts NULL keys in one group (one unit), and a join
 * never matches them, so a row with a NULL join key is a unit of its own.
 *
 * Tracking is unchanged (migrate.c), unless the inputs are tracked by keys
 * (live.c: a table several group or join mappings read): a unit's rows are
 * deleted from the retired inputs by the step that migrates it, in the order of the inputs
 * and then of ctids.  Every claimer claims whole units in that order, so the
 * first row of a unit decides who migrates it: a session waiting for it
 * then finds the whole unit gone (or, if the holder aborts, whole again),
 * and a background worker that cannot take it without waiting leaves the
 * unit alone (migrate.c, claim_units_nowait).  Retired inputs never gain
 * rows, so a unit's rows are fixed for the life of the migration.
 *
 * A unit's rows are found through an index on its key in each input,
 * which start() requires (lf_unit_index).  Finding a unit is checked: the
 * rows found must include the row the unit was looked up from, or the step
 * fails rather than migrate a partial unit.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/nbtree.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/tuptable.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parsetree.h"
#include "utils/datum.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* A column of rtindex rti, under binary-compatible relabelling; or NULL. */
static Var *
plain_column(Node *node, int rti)
{
	while (node && IsA(node, RelabelType))
		node = (Node *) ((RelabelType *) node)->arg;
	if (node == NULL || !IsA(node, Var))
		return NULL;
	if (((Var *) node)->varlevelsup != 0 || ((Var *) node)->varattno <= 0 ||
		(rti > 0 && ((Var *) node)->varno != rti))
		return NULL;
	return (Var *) node;
}

/*
 * Does a condition of quals equate a column of one table with a column of
 * another cast to its type?  The join's key then has no operator that
 * compares the two types in one operator family, which finding a key's
 * rows through each table's index needs (the types that do, int and bigint,
 * varchar and text, are compared without a cast).
 */
static Node *
strip_cast(Node *node)
{
	for (;;)
	{
		if (IsA(node, FuncExpr) && ((FuncExpr *) node)->funcformat != COERCE_EXPLICIT_CALL &&
			list_length(((FuncExpr *) node)->args) == 1)
			node = linitial(((FuncExpr *) node)->args);
		else if (IsA(node, RelabelType))
			node = (Node *) ((RelabelType *) node)->arg;
		else if (IsA(node, CoerceViaIO))
			node = (Node *) ((CoerceViaIO *) node)->arg;
		else
			return node;
	}
}

static bool
casts_a_key(Node *quals)
{
	ListCell   *lc;

	foreach(lc, make_ands_implicit((Expr *) quals))
	{
		OpExpr	   *op = lfirst(lc);
		Var		   *l,
				   *r;

		if (!IsA(op, OpExpr) || list_length(op->args) != 2)
			continue;
		l = plain_column(strip_cast(linitial(op->args)), 0);
		r = plain_column(strip_cast(lsecond(op->args)), 0);
		if (l != NULL && r != NULL && l->varno != r->varno &&
			op_mergejoinable(op->opno, exprType(linitial(op->args))))
			return true;
	}
	return false;
}

/* The relations of a join mapping: their rtindexes, and the join's shape. */
static bool
join_shape(Query *q, int *rti, JoinType *jointype, Node **quals)
{
	Node	   *f;

	if (q->jointree == NULL)
		return false;
	if (list_length(q->jointree->fromlist) == 2 &&
		IsA(linitial(q->jointree->fromlist), RangeTblRef) &&
		IsA(lsecond(q->jointree->fromlist), RangeTblRef))
	{
		rti[0] = ((RangeTblRef *) linitial(q->jointree->fromlist))->rtindex;
		rti[1] = ((RangeTblRef *) lsecond(q->jointree->fromlist))->rtindex;
		*jointype = JOIN_INNER;
		*quals = q->jointree->quals;
		return true;
	}
	if (list_length(q->jointree->fromlist) != 1)
		return false;
	f = linitial(q->jointree->fromlist);
	if (!IsA(f, JoinExpr) || !IsA(((JoinExpr *) f)->larg, RangeTblRef) ||
		!IsA(((JoinExpr *) f)->rarg, RangeTblRef))
		return false;
	rti[0] = ((RangeTblRef *) ((JoinExpr *) f)->larg)->rtindex;
	rti[1] = ((RangeTblRef *) ((JoinExpr *) f)->rarg)->rtindex;
	*jointype = ((JoinExpr *) f)->jointype;
	*quals = ((JoinExpr *) f)->quals;
	return true;
}

/*
 * The type that a value of `from` converts to implicitly, exactly and
 * immutably, as `to`: true, with the cast's function in *cast, or none
 * when the types are binary coercible.
 */
static bool
converts_to(Oid from, Oid to, Oid *cast)
{
	Oid			funcid = InvalidOid;

	*cast = InvalidOid;
	switch (find_coercion_pathway(to, from, COERCION_IMPLICIT, &funcid))
	{
		case COERCION_PATH_RELABELTYPE:
			return true;
		case COERCION_PATH_FUNC:
			if (func_volatile(funcid) != PROVOLATILE_IMMUTABLE || get_func_nargs(funcid) != 1)
				return false;
			*cast = funcid;
			return true;
		default:
			return false;
	}
}

/*
 * The btree family of equality eqop that holds w's default operator class
 * and w's equalities with itself and with n0 and n1, or InvalidOid.
 */
static Oid
key_family(Oid eqop, Oid w, Oid n0, Oid n1)
{
	Oid			opclass = GetDefaultOpClass(w, BTREE_AM_OID);
	ListCell   *lc;

	if (!OidIsValid(opclass))
		return InvalidOid;
	foreach(lc, get_mergejoin_opfamilies(eqop))
	{
		Oid			f = lfirst_oid(lc);

		if (get_opclass_family(opclass) == f &&
			OidIsValid(get_opfamily_member(f, w, w, BTEqualStrategyNumber)) &&
			OidIsValid(get_opfamily_member(f, w, n0, BTEqualStrategyNumber)) &&
			OidIsValid(get_opfamily_member(f, w, n1, BTEqualStrategyNumber)))
			return f;
	}
	return InvalidOid;
}

/*
 * Key column k of join m, whose columns have types t[0] and t[1] that its
 * equality takes as n[0] and n[1] (differing): held as the one the other
 * converts to (set in m).  NULL, or why there is none.
 */
static const char *
two_key_types(LfMapping *m, int k, const Oid *t, const Oid *n)
{
	Oid			w;
	Oid			fam;

	if (converts_to(t[1], n[0], &m->keycasts[1][k]))
		w = n[0];
	else if (converts_to(t[0], n[1], &m->keycasts[0][k]))
		w = n[1];
	else
		return psprintf("join key columns of types %s and %s, neither of which converts to the other implicitly and immutably",
						format_type_be(t[0]), format_type_be(t[1]));
	if (!OidIsValid(fam = key_family(m->eqops[k], w, n[0], n[1])))
		return psprintf("join key columns of types %s and %s, whose equality has no operator family with %s's default operator class",
						format_type_be(t[0]), format_type_be(t[1]), format_type_be(w));
	m->keytypes[k] = w;
	get_typlenbyval(w, &m->keylens[k], &m->keybyvals[k]);
	m->keyeqops[k] = get_opfamily_member(fam, w, w, BTEqualStrategyNumber);
	for (int i = 0; i < 2; i++)
		m->keyinops[i][k] = get_opfamily_member(fam, w, n[i], BTEqualStrategyNumber);
	return NULL;
}

/*
 * The key of m as a table of done keys holds it (live.c): per key column,
 * its type, that type's equality and its equality with each input's
 * column, and how each input's value converts to it.  A GROUP BY's key
 * and a join's of one type on both sides is input 0's, and so is a join's
 * of types its equality takes as one (varchar = text).  A join whose key
 * columns differ in type (int = bigint) keeps the type the other side's
 * values convert to implicitly (bigint): the cast is exact, and the
 * operator family of the join's equality orders both types alike, so two
 * values the join finds equal convert to one key (as a merge join relies
 * on).  Returns NULL, or why there is no such type.
 */
static const char *
describe_key_types(LfMapping *m)
{
	const char *why = NULL;

	for (int i = 0; i < m->ninputs; i++)
		m->row_sides[i] = i;
	for (int k = 0; k < m->nkeys; k++)
	{
		Oid			t[2] = {InvalidOid, InvalidOid};
		Oid			n[2];		/* the types the equality takes them as */
		const char *not_two;

		for (int i = 0; i < m->ninputs; i++)
		{
			t[i] = get_atttype(m->inputs[i], m->keys[i][k]);
			m->keyinops[i][k] = m->eqops[k];
			m->keycasts[i][k] = InvalidOid;
		}
		m->keytypes[k] = t[0];
		m->keyeqops[k] = m->eqops[k];
		if (OidIsValid(t[0]))
			get_typlenbyval(t[0], &m->keylens[k], &m->keybyvals[k]);
		if (m->ninputs < 2 || t[0] == t[1] || !OidIsValid(t[0]) || !OidIsValid(t[1]))
			continue;
		op_input_types(m->eqops[k], &n[0], &n[1]);
		for (int i = 0; i < 2; i++)
			if (!IsBinaryCoercible(t[i], n[i]))
				n[i] = t[i];
		if (n[0] == n[1])
			continue;			/* varchar = text: one type's bytes, as varchar = varchar */
		if ((not_two = two_key_types(m, k, t, n)) != NULL)
		{
			why = not_two;
			m->keycasts[0][k] = m->keycasts[1][k] = InvalidOid;
		}
	}
	return why;
}

/*
 * Value v (not NULL) of key column k of input i, as m's table of done keys
 * holds it (keytypes), copied into the current memory context.
 */
Datum
lf_key_value(LfMapping *m, int i, int k, Datum v)
{
	if (OidIsValid(m->keycasts[i][k]))
		return OidFunctionCall1(m->keycasts[i][k], v);	/* a new value */
	return datumCopy(v, m->keybyvals[k], m->keylens[k]);
}

/*
 * Fill in the unit description of m from its query: GROUP BY mappings group
 * on plain columns of their input; join mappings join two tables on
 * equalities of columns, one of each (the other conjuncts filter).  Returns
 * NULL, or why the mapping has no unit Leapfrog can track (start() refuses
 * it with that reason).
 */
const char *
lf_describe_units(LfMapping *m)
{
	Query	   *q = m->query;
	ListCell   *lc;

	m->kind = LF_MAP_ROWS;
	m->ninputs = 1;
	m->rtis[0] = 1;
	m->inputs[0] = m->input;
	m->nkeys = 0;
	m->key_types_why = NULL;
	if (q->groupClause != NIL || q->hasAggs)
	{
		m->kind = LF_MAP_GROUPS;
		if (q->groupClause == NIL)
			return "an aggregate without GROUP BY";
		foreach(lc, q->groupClause)
		{
			SortGroupClause *sgc = lfirst(lc);
			TargetEntry *tle = get_sortgroupclause_tle(sgc, q->targetList);
			Var		   *v = plain_column((Node *) tle->expr, 0);

			if (v == NULL || exprType((Node *) tle->expr) != v->vartype)
				return "a GROUP BY expression that is not a column of the input";
			if (m->nkeys == INDEX_MAX_KEYS)
				return "too many GROUP BY columns";
			m->rtis[0] = v->varno;
			m->keys[0][m->nkeys] = v->varattno;
			m->eqops[m->nkeys] = sgc->eqop;
			m->collations[m->nkeys] = exprCollation((Node *) tle->expr);
			m->nkeys++;
		}
		m->inputs[0] = rt_fetch(m->rtis[0], q->rtable)->relid;
		m->key_types_why = describe_key_types(m);
		return NULL;
	}
	if (list_length(q->rtable) > 1)
	{
		Node	   *quals;
		JoinType	jt;

		m->kind = LF_MAP_JOIN;
		m->ninputs = 2;
		if (!join_shape(q, m->rtis, &jt, &quals))
			return "a join that is not between two tables";
		m->jointype = jt;
		m->inputs[0] = rt_fetch(m->rtis[0], q->rtable)->relid;
		m->inputs[1] = rt_fetch(m->rtis[1], q->rtable)->relid;
		foreach(lc, make_ands_implicit((Expr *) quals))
		{
			OpExpr	   *op = lfirst(lc);
			Var		   *l,
					   *r;

			if (!IsA(op, OpExpr) || list_length(op->args) != 2)
				continue;
			l = plain_column(linitial(op->args), 0);
			r = plain_column(lsecond(op->args), 0);
			if (l == NULL || r == NULL || l->varno == r->varno ||
				!op_mergejoinable(op->opno, exprType(linitial(op->args))))
				continue;
			if (m->nkeys == INDEX_MAX_KEYS)
				return "too many join columns";
			if (l->varno == m->rtis[0] && r->varno == m->rtis[1])
			{
				m->keys[0][m->nkeys] = l->varattno;
				m->keys[1][m->nkeys] = r->varattno;
			}
			else if (l->varno == m->rtis[1] && r->varno == m->rtis[0])
			{
				Oid			commuted = get_commutator(op->opno);

				if (!OidIsValid(commuted))
					continue;
				m->keys[0][m->nkeys] = r->varattno;
				m->keys[1][m->nkeys] = l->varattno;
				m->eqops[m->nkeys] = commuted;
				m->collations[m->nkeys] = op->inputcollid;
				m->nkeys++;
				continue;
			}
			else
				continue;
			m->eqops[m->nkeys] = op->opno;
			m->collations[m->nkeys] = op->inputcollid;
			m->nkeys++;
		}
		if (m->nkeys == 0)
			return casts_a_key(quals) ?
				"a join whose equality casts a column to the other's type (int = numeric, say)" :
				"a join without an equality between a column of each table";

		/*
		 * A unit's rows are looked up with one scan key per key column
		 * (lookup_rows): a column in two equalities ("a.x = b.y AND a.x =
		 * b.z") would need two keys on one index column.
		 */
		for (int i = 0; i < 2; i++)
			for (int k = 0; k < m->nkeys; k++)
				for (int j = k + 1; j < m->nkeys; j++)
					if (m->keys[i][k] == m->keys[i][j])
						return "a join that equates one column with two (or one twice)";
		m->key_types_why = describe_key_types(m);
		return NULL;
	}
	m->rtis[0] = 1;
	m->inputs[0] = rt_fetch(1, q->rtable)->relid;
	return NULL;
}

/* The target columns of a mapping query: those before lf_ctid. */
int
lf_mapping_natts(Query *q)
{
	ListCell   *lc;

	foreach(lc, q->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resname && strcmp(tle->resname, "lf_ctid") == 0)
			return tle->resno - 1;
	}
	elog(ERROR, "leapfrog: mapping without lf_ctid");
	return 0;
}

/* The position of input relid among m's inputs, or -1. */
int
lf_unit_input_index(LfMapping *m, Oid relid)
{
	int			i;

	for (i = 0; i < m->ninputs; i++)
		if (m->inputs[i] == relid)
			return i;
	return -1;
}

/*
 * The (first) group or join mapping of mig that reads input, if any, or
 * the row mapping keyed by the primary key of a live input only row
 * mappings read (lf_describe_row_keys): its units are what migrates.  An
 * input that several of them read is tracked by keys (its mappings have
 * done_keys: live.c), each mapping's units its own.
 */
LfMapping *
lf_unit_mapping(LfMigration *mig, Oid input)
{
	ListCell   *lc;

	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if ((m->kind != LF_MAP_ROWS || m->row_keys) && lf_unit_input_index(m, input) >= 0)
			return m;
	}
	return NULL;
}

/*
 * Key row mapping m by its input's primary key: a live input that only row
 * mappings read is tracked in place by the keys of the rows migrated
 * (live.c), each row a unit of its own.  The primary key stays what it is
 * while the input is tracked: ALTER TABLE and DROP INDEX on it are refused
 * until the migration is done (utility.c).  Returns NULL, or why not.
 */
const char *
lf_describe_row_keys(LfMapping *m)
{
	Relation	rel = table_open(m->inputs[0], AccessShareLock);
	Oid			pk = RelationGetPrimaryKeyIndex(rel);
	Relation	idx;

	table_close(rel, AccessShareLock);
	if (!OidIsValid(pk))
		return "no primary key";
	idx = index_open(pk, AccessShareLock);
	m->nkeys = idx->rd_index->indnkeyatts;
	for (int k = 0; k < m->nkeys; k++)
	{
		m->keys[0][k] = idx->rd_index->indkey.values[k];
		m->eqops[k] = get_opfamily_member(idx->rd_opfamily[k], idx->rd_opcintype[k],
										  idx->rd_opcintype[k], BTEqualStrategyNumber);
		m->collations[k] = idx->rd_indcollation[k];
		if (m->keys[0][k] <= 0 || !OidIsValid(m->eqops[k]))
			elog(ERROR, "leapfrog: unexpected primary key %u", pk);
	}
	index_close(idx, AccessShareLock);
	m->row_keys = true;
	m->key_types_why = describe_key_types(m);
	return NULL;
}

/* ---------------------------------------------------------------------
 * Finding a unit's rows
 * ---------------------------------------------------------------------
 */

/*
 * How to look up the rows of input i by the key values of input `from`, or
 * by a key as its table of done keys holds it (from FROM_KEYS: keytypes):
 * the index, and per key its index column, comparison procedure and
 * subtype.  Kept per backend, by mapping id (mappings never change).
 */
#define FROM_KEYS 2
typedef struct KeyLookup
{
	Oid			index;
	int			col[INDEX_MAX_KEYS];	/* 1-based index column of key k */
	Oid			proc[INDEX_MAX_KEYS];	/* the equality operator's function */
	Oid			subtype[INDEX_MAX_KEYS];
	Oid			collation[INDEX_MAX_KEYS];
} KeyLookup;

typedef struct UnitPlan
{
	int			mapping_id;		/* hash key */
	bool		ready;
	Oid			inputs[2];		/* of the mapping the plan was made for */
	KeyLookup	lookup[2][3];	/* [input][from, or FROM_KEYS] */
} UnitPlan;

static HTAB *unit_plans = NULL;

/* The type of key k of input i (or FROM_KEYS: as done keys hold it), as a value. */
static Oid
key_type(LfMapping *m, int i, int k)
{
	return i == FROM_KEYS ? m->keytypes[k] : get_atttype(m->inputs[i], m->keys[i][k]);
}

/*
 * Whether index column p of idx can look up key k of input i by values of
 * input `from`: it orders the key's type with the mapping's equality, under
 * its collation.  Fills the lookup's entries for k.
 */
static bool
index_column_fits(LfMapping *m, int i, int from, int k, Relation idx, int p, KeyLookup *kl)
{
	Oid			opfamily = idx->rd_opfamily[p];
	Oid			opcintype = idx->rd_opcintype[p];
	Oid			valtype = key_type(m, from, k);
	Oid			coll = idx->rd_indcollation[p];
	Oid			proc;

	if (!op_in_opfamily(m->eqops[k], opfamily))
		return false;
	if (OidIsValid(m->collations[k]) && coll != m->collations[k])
		return false;
	if (IsBinaryCoercible(valtype, opcintype))
		valtype = opcintype;
	/* a scan key's function is the operator's (the insertion key uses the opclass's) */
	proc = get_opcode(get_opfamily_member(opfamily, opcintype, valtype, BTEqualStrategyNumber));
	if (!OidIsValid(proc))
		return false;
	kl->col[k] = p + 1;
	kl->proc[k] = proc;
	kl->subtype[k] = valtype == opcintype ? InvalidOid : valtype;
	kl->collation[k] = coll;
	return true;
}

/*
 * An index of input i on the unit's key: a valid, non-partial btree index
 * whose leading columns are exactly the key columns, in any order, usable
 * with values of input `from`.  InvalidOid if there is none.
 */
static Oid
find_key_index(LfMapping *m, int i, int from, KeyLookup *kl)
{
	Relation	rel = table_open(m->inputs[i], AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index ind = idx->rd_index;
		bool		fits = idx->rd_rel->relam == BTREE_AM_OID && ind->indisvalid &&
			ind->indnkeyatts >= m->nkeys && RelationGetIndexPredicate(idx) == NIL;
		int			k,
					p;

		for (k = 0; fits && k < m->nkeys; k++)
		{
			fits = false;
			for (p = 0; p < m->nkeys; p++)
				if (ind->indkey.values[p] == m->keys[i][k])
				{
					fits = index_column_fits(m, i, from, k, idx, p, kl);
					break;
				}
		}
		index_close(idx, AccessShareLock);
		if (fits)
		{
			found = lfirst_oid(lc);
			break;
		}
	}
	table_close(rel, AccessShareLock);
	kl->index = found;
	return found;
}

/*
 * Does m look its units' rows up by values of `from`: each input's, and,
 * when the key has a type its table of done keys may hold, the done keys'.
 */
static bool
looks_up_from(LfMapping *m, int from)
{
	return from < m->ninputs || (from == FROM_KEYS && m->key_types_why == NULL);
}

/*
 * The index through which the rows of a unit are found in input i, or
 * InvalidOid: start() refuses a mapping without one on every input (a
 * scan of the input per unit is no way to migrate).
 */
Oid
lf_unit_index(LfMapping *m, int i)
{
	KeyLookup	kl;
	int			from;
	Oid			idx = InvalidOid;

	for (from = 0; from <= FROM_KEYS; from++)
		if (looks_up_from(m, from) && !OidIsValid(idx = find_key_index(m, i, from, &kl)))
			return InvalidOid;
	return idx;
}

/*
 * A plan kept from earlier is for this mapping (ids start again after the
 * extension is dropped and created) and its indexes still exist (REINDEX
 * CONCURRENTLY, of the database say, gives an index a new OID).
 */
static bool
unit_plan_current(LfMapping *m, UnitPlan *up)
{
	for (int i = 0; i < m->ninputs; i++)
	{
		if (up->inputs[i] != m->inputs[i])
			return false;
		for (int from = 0; from <= FROM_KEYS; from++)
			if (looks_up_from(m, from) &&
				!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(up->lookup[i][from].index)))
				return false;
	}
	return true;
}

static UnitPlan *
unit_plan(LfMapping *m)
{
	UnitPlan   *up;
	bool		found;
	int			i,
				from;

	if (unit_plans == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(int),.entrysize = sizeof(UnitPlan)};

		unit_plans = hash_create("leapfrog units", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	up = hash_search(unit_plans, &m->id, HASH_ENTER, &found);
	if (found && up->ready && unit_plan_current(m, up))
		return up;
	up->ready = false;
	up->inputs[0] = m->inputs[0];
	up->inputs[1] = m->ninputs > 1 ? m->inputs[1] : InvalidOid;
	for (i = 0; i < m->ninputs; i++)
		for (from = 0; from <= FROM_KEYS; from++)
			if (looks_up_from(m, from) &&
				!OidIsValid(find_key_index(m, i, from, &up->lookup[i][from])))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("leapfrog: no index on the key of input \"%s\" of mapping %d",
								get_rel_name(m->inputs[i]), m->id)));
	up->ready = true;
	return up;
}

/*
 * The rows of input i whose key equals the given values, visible to the
 * snapshot of scan, an index scan of the key's index begun with nkeys keys
 * and restarted here (a btree scan's set-up allocates some 27 kB: a
 * worker's batch looks up hundreds of groups).
 */
static void
lookup_rows(IndexScanDesc scan, KeyLookup *kl, int nkeys, Datum *values, bool *nulls,
			TupleTableSlot *slot, List **tids)
{
	ScanKeyData sk[INDEX_MAX_KEYS];
	int			k;

	/* btree wants its keys in the order of the index columns */
	for (k = 0; k < nkeys; k++)
	{
		ScanKey		key = &sk[kl->col[k] - 1];

		if (nulls[k])
			ScanKeyEntryInitialize(key, SK_ISNULL | SK_SEARCHNULL, kl->col[k],
								   InvalidStrategy, InvalidOid, InvalidOid, InvalidOid,
								   (Datum) 0);
		else
			ScanKeyEntryInitialize(key, 0, kl->col[k], BTEqualStrategyNumber,
								   kl->subtype[k], kl->collation[k], kl->proc[k], values[k]);
	}
	index_rescan(scan, sk, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		ItemPointer tid = palloc(sizeof(ItemPointerData));

		CHECK_FOR_INTERRUPTS();
		*tid = slot->tts_tid;
		*tids = lappend(*tids, tid);
	}
}

/* A list of palloc'd tids as a sorted array with no duplicates. */
static int
tid_list_to_array(List *list, ItemPointerData **out)
{
	ItemPointerData *a = palloc(sizeof(ItemPointerData) * Max(list_length(list), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, list)
		a[n++] = *(ItemPointer) lfirst(lc);
	*out = a;
	return lf_tids_sort_unique(a, n);
}

/*
 * The units of the rows seeds[0..nseeds) of input `from` of m, as snap sees
 * them: one LfUnit per unit, its rows per input sorted by ctid.  A seed that
 * snap cannot see (migrated meanwhile) is skipped, and so is one whose unit
 * is already listed.  The caller holds locks on m's inputs.
 */
List *
lf_units_of(LfMapping *m, int from, ItemPointer seeds, int nseeds, Snapshot snap)
{
	UnitPlan   *up = unit_plan(m);
	Relation	rels[2];
	Relation	idxs[2];		/* the key's index in each input, for `from` */
	BlockNumber nblocks;
	TupleTableSlot *slots[2];	/* the seeds, read */
	TupleTableSlot *lslots[2];	/* the unit's rows, looked up */
	IndexScanDesc scans[2];
	HTAB	   *seen;
	HASHCTL		ctl = {.keysize = sizeof(ItemPointerData),.entrysize = sizeof(ItemPointerData),
	.hcxt = CurrentMemoryContext};
	List	   *units = NIL;
	int			i,
				s;

	seen = hash_create("leapfrog unit rows", Max(nseeds, 16), &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (i = 0; i < m->ninputs; i++)
	{
		rels[i] = table_open(m->inputs[i], AccessShareLock);
		slots[i] = table_slot_create(rels[i], NULL);
		lslots[i] = table_slot_create(rels[i], NULL);
		idxs[i] = index_open(up->lookup[i][from].index, AccessShareLock);
		scans[i] = index_beginscan(rels[i], idxs[i], snap, m->nkeys, 0);
	}
	nblocks = RelationGetNumberOfBlocks(rels[from]);
	for (s = 0; s < nseeds; s++)
	{
		ItemPointerData tid = seeds[s];
		Datum		values[INDEX_MAX_KEYS];
		bool		nulls[INDEX_MAX_KEYS];
		bool		anynull = false;
		uint32		mask;
		LfUnit	   *u;
		int			k;

		CHECK_FOR_INTERRUPTS();
		if (hash_search(seen, &tid, HASH_FIND, NULL) != NULL)
			continue;
		if (!ItemPointerIsValid(&tid) ||
			ItemPointerGetBlockNumber(&tid) >= nblocks ||
			!table_tuple_fetch_row_version(rels[from], &tid, snap, slots[from]))
			continue;
		for (k = 0; k < m->nkeys; k++)
		{
			values[k] = slot_getattr(slots[from], m->keys[from][k], &nulls[k]);
			anynull |= nulls[k];
		}
		u = palloc0(sizeof(LfUnit));
		u->key = palloc(LF_KEY_SIZE(m->nkeys));
		mask = 0;
		for (k = 0; k < m->nkeys; k++)
		{
			u->key[k] = nulls[k] ? (Datum) 0 : lf_key_value(m, from, k, values[k]);
			if (nulls[k])
				mask |= 1u << k;
		}
		u->key[m->nkeys] = UInt32GetDatum(mask);
		lf_key_set_row(m->nkeys, u->key, m->row_sides[from], anynull && m->null_rows ? &tid : NULL);
		if ((anynull && m->kind == LF_MAP_JOIN && (!OidIsValid(m->done_keys) || m->null_rows)) ||
			m->row_keys)
		{
			/*
			 * A NULL join key matches nothing: the row is a unit of its own
			 * (tracked by keys, its key is the row: LF_KEY_ROW; by a table
			 * of done keys made before that, the key with NULLs equal is
			 * all its rows, below).  So is a row of a mapping keyed by the
			 * primary key: the key's only row that snap sees.
			 */
			u->n[from] = 1;
			u->tids[from] = palloc(sizeof(ItemPointerData));
			u->tids[from][0] = tid;
		}
		else
		{
			for (i = 0; i < m->ninputs; i++)
			{
				List	   *found = NIL;

				lookup_rows(scans[i], &up->lookup[i][from], m->nkeys, values, nulls, lslots[i],
							&found);
				u->n[i] = tid_list_to_array(found, &u->tids[i]);
				list_free_deep(found);
			}
			/* a unit found without the row it was looked up from would be partial */
			if (bsearch(&tid, u->tids[from], u->n[from], sizeof(ItemPointerData), lf_tid_cmp) == NULL)
				elog(ERROR, "leapfrog: the unit of row (%u,%u) of %s does not contain it (index %u)",
					 ItemPointerGetBlockNumber(&tid), ItemPointerGetOffsetNumber(&tid),
					 RelationGetRelationName(rels[from]), up->lookup[from][from].index);
		}
		for (int j = 0; j < u->n[from]; j++)
			(void) hash_search(seen, &u->tids[from][j], HASH_ENTER, NULL);
		units = lappend(units, u);
	}
	for (i = 0; i < m->ninputs; i++)
	{
		ExecDropSingleTupleTableSlot(slots[i]);
		ExecDropSingleTupleTableSlot(lslots[i]);
		index_endscan(scans[i]);
		index_close(idxs[i], AccessShareLock);
		table_close(rels[i], NoLock);
	}
	hash_destroy(seen);
	return units;
}

/*
 * The rows of the units of keys (each a key as m's table of done keys holds
 * it, LF_KEY_SIZE, whose NULLs are equal) of mapping m tracked by keys (a
 * GROUP BY or join mapping, or a row mapping by primary key), as snap sees
 * them, an LfUnit per key, its rows in each input: the units claimed by
 * their keys (live.c), which may have no row.  The caller holds locks on
 * the inputs.
 */
List *
lf_units_by_keys(LfMapping *m, List *keys, Snapshot snap)
{
	UnitPlan   *up = unit_plan(m);
	Relation	rels[2];
	Relation	idxs[2];
	TupleTableSlot *slots[2];
	IndexScanDesc scans[2];
	bool		nulls[INDEX_MAX_KEYS];
	List	   *units = NIL;
	ListCell   *lc;

	Assert(m->kind != LF_MAP_ROWS || m->row_keys);
	for (int i = 0; i < m->ninputs; i++)
	{
		rels[i] = table_open(m->inputs[i], AccessShareLock);
		idxs[i] = index_open(up->lookup[i][FROM_KEYS].index, AccessShareLock);
		slots[i] = table_slot_create(rels[i], NULL);
		scans[i] = index_beginscan(rels[i], idxs[i], snap, m->nkeys, 0);
	}
	foreach(lc, keys)
	{
		LfUnit	   *u = palloc0(sizeof(LfUnit));

		u->key = lfirst(lc);
		if (LF_KEY_ROW(m->nkeys, u->key))
		{
			/* a join's row with a NULL key: itself, if snap sees it */
			int			i = LF_KEY_ROW_INPUT(m->nkeys, u->key);
			ItemPointerData tid;

			lf_key_get_row(m->nkeys, u->key, &tid);
			if (i >= m->ninputs)
				elog(ERROR, "leapfrog: a key of mapping %d names input %d", m->id, i);
			if (ItemPointerGetBlockNumber(&tid) < RelationGetNumberOfBlocks(rels[i]) &&
				table_tuple_fetch_row_version(rels[i], &tid, snap, slots[i]))
			{
				u->n[i] = 1;
				u->tids[i] = palloc(sizeof(ItemPointerData));
				u->tids[i][0] = tid;
			}
			units = lappend(units, u);
			continue;
		}
		for (int k = 0; k < m->nkeys; k++)
			nulls[k] = LF_KEY_ISNULL(m->nkeys, u->key, k);
		for (int i = 0; i < m->ninputs; i++)
		{
			List	   *found = NIL;

			lookup_rows(scans[i], &up->lookup[i][FROM_KEYS], m->nkeys, u->key, nulls, slots[i],
						&found);
			u->n[i] = tid_list_to_array(found, &u->tids[i]);
			list_free_deep(found);
		}
		units = lappend(units, u);
	}
	for (int i = 0; i < m->ninputs; i++)
	{
		ExecDropSingleTupleTableSlot(slots[i]);
		index_endscan(scans[i]);
		index_close(idxs[i], AccessShareLock);
		table_close(rels[i], NoLock);
	}
	return units;
}
