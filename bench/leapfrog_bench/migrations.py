"""The three migrations of the BullFrog chapter (4.4.1-4.4.3), each with:

- script.sql: the migration as plain SQL, what leapfrog.start receives and
  what the eager strategy runs in one transaction;
- tx.sql: the new application code (CREATE OR REPLACE of the *_impl
  functions), deployed in the same transaction as the schema switch;
- multistep_setup.sql / multistep_cutover.sql (/ multistep_cleanup.sql) and a
  batch copy function:
  the multi-step (pgroll / pg-osc style) version;
- a probe query on the new schema: "the new schema answers".
"""
import os
import re

from .tpcc import read_sql


def _statements(sql):
    """Split a script of plain statements (no $$ bodies) on ';' at line end."""
    out, cur = [], []
    for line in sql.splitlines():
        if line.strip().startswith("--") and not cur:
            continue
        cur.append(line)
        if line.rstrip().endswith(";"):
            s = "\n".join(cur).strip()
            if s:
                out.append(s)
            cur = []
    if "".join(cur).strip():
        out.append("\n".join(cur).strip())
    return out


BIG = 2**31 - 1


# A copy batch function copies the next n source rows of its part of the
# key space, the warehouses [st["w_lo"], st["w_hi"]) (every TPC-C key starts
# with the warehouse), after the key st["lo"]; it updates st and returns
# (rows copied, part done).

def _split_batch(conn, st, n):
    lo = st.get("lo", (st["w_lo"], 0, 0))
    row = conn.execute("""
WITH src AS (SELECT * FROM customer WHERE (c_w_id, c_d_id, c_id) > (%s, %s, %s) AND c_w_id < %s
              ORDER BY c_w_id, c_d_id, c_id LIMIT %s),
     a AS (INSERT INTO customer_private
           SELECT c_w_id, c_d_id, c_id, c_credit, c_credit_lim, c_discount, c_balance,
                  c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data FROM src
           ON CONFLICT DO NOTHING),
     b AS (INSERT INTO customer_public
           SELECT c_w_id, c_d_id, c_id, c_first, c_middle, c_last, c_street_1, c_street_2,
                  c_city, c_state, c_zip, c_phone, c_since FROM src
           ON CONFLICT DO NOTHING)
SELECT c_w_id, c_d_id, c_id, (SELECT count(*) FROM src) FROM src
 ORDER BY c_w_id DESC, c_d_id DESC, c_id DESC LIMIT 1""", (*lo, st["w_hi"], n)).fetchone()
    if row is None:
        return 0, True
    st["lo"] = row[:3]
    return row[3], row[3] < n


def _aggregate_batch(conn, st, n):
    lo = st.get("lo", (st["w_lo"], 0, 0))
    hi = conn.execute("""
SELECT ol_w_id, ol_d_id, ol_o_id FROM order_line
 WHERE (ol_w_id, ol_d_id, ol_o_id) > (%s, %s, %s) AND ol_w_id < %s
 ORDER BY ol_w_id, ol_d_id, ol_o_id, ol_number OFFSET %s LIMIT 1""", (*lo, st["w_hi"], n - 1)).fetchone()
    done = hi is None
    if done:
        hi = (st["w_hi"], 0, 0)
    conn.execute("""
INSERT INTO order_total
SELECT ol_w_id, ol_d_id, ol_o_id, sum(ol_amount) FROM order_line
 WHERE (ol_w_id, ol_d_id, ol_o_id) > (%s, %s, %s) AND (ol_w_id, ol_d_id, ol_o_id) <= (%s, %s, %s)
 GROUP BY ol_w_id, ol_d_id, ol_o_id
ON CONFLICT DO NOTHING""", (*lo, *hi))
    st["lo"] = hi
    return n, done


_OS_STOCK = """s.s_w_id, s.s_i_id, s.s_quantity, s.s_ytd, s.s_order_cnt, s.s_remote_cnt, s.s_data,
       s.s_dist_01, s.s_dist_02, s.s_dist_03, s.s_dist_04, s.s_dist_05,
       s.s_dist_06, s.s_dist_07, s.s_dist_08, s.s_dist_09, s.s_dist_10"""


def _join_batch(conn, st, n):
    phase = st.get("phase", "lines")
    if phase == "lines":
        lo = st.get("lo", (st["w_lo"], 0, 0, 0))
        hi = conn.execute("""
SELECT ol_w_id, ol_d_id, ol_o_id, ol_number FROM order_line
 WHERE (ol_w_id, ol_d_id, ol_o_id, ol_number) > (%s, %s, %s, %s) AND ol_w_id < %s
 ORDER BY ol_w_id, ol_d_id, ol_o_id, ol_number OFFSET %s LIMIT 1""",
                          (*lo, st["w_hi"], n - 1)).fetchone()
        last = hi is None
        if last:
            hi = (st["w_hi"], 0, 0, 0)
        # Share-lock the stock rows first, in key order (the order NewOrder
        # updates them in), so the copy does not deadlock with NewOrder.
        conn.execute("""
SELECT 1 FROM stock s
 WHERE (s.s_w_id, s.s_i_id) IN (
        SELECT ol.ol_supply_w_id, ol.ol_i_id FROM order_line ol
         WHERE (ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number) > (%s, %s, %s, %s)
           AND (ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number) <= (%s, %s, %s, %s))
 ORDER BY s.s_w_id, s.s_i_id FOR SHARE""", (*lo, *hi))
        conn.execute(f"""
INSERT INTO orderline_stock
SELECT * FROM (
  SELECT {_OS_STOCK},
         ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number, ol.ol_delivery_d,
         ol.ol_quantity, ol.ol_amount, ol.ol_dist_info
    FROM order_line ol JOIN stock s ON s.s_w_id = ol.ol_supply_w_id AND s.s_i_id = ol.ol_i_id
   WHERE (ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number) > (%s, %s, %s, %s)
     AND (ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number) <= (%s, %s, %s, %s)
     FOR SHARE OF ol, s) x
ON CONFLICT DO NOTHING""", (*lo, *hi))
        st["lo"] = hi
        if last:
            st["phase"], st["lo"] = "stock", (st["w_lo"], 0)
        return n, False
    lo = st["lo"]
    hi = conn.execute("""
SELECT s_w_id, s_i_id FROM stock WHERE (s_w_id, s_i_id) > (%s, %s) AND s_w_id < %s
 ORDER BY s_w_id, s_i_id OFFSET %s LIMIT 1""", (*lo, st["w_hi"], n - 1)).fetchone()
    done = hi is None
    if done:
        hi = (st["w_hi"], 0)
    conn.execute(f"""
INSERT INTO orderline_stock (s_w_id, s_i_id, s_quantity, s_ytd, s_order_cnt, s_remote_cnt, s_data,
       s_dist_01, s_dist_02, s_dist_03, s_dist_04, s_dist_05,
       s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10)
SELECT * FROM (
  SELECT {_OS_STOCK} FROM stock s
   WHERE (s.s_w_id, s.s_i_id) > (%s, %s) AND (s.s_w_id, s.s_i_id) <= (%s, %s)
     AND NOT EXISTS (SELECT 1 FROM orderline_stock o
                      WHERE o.s_w_id = s.s_w_id AND o.s_i_id = s.s_i_id)
     FOR SHARE OF s) x""", (*lo, *hi))
    st["lo"] = hi
    return n, done


_MARK = re.compile(r"^\s*--@ (\S+)\s*$")


def _override_fragments(text):
    """The fragments of a migration's tx.sql: name -> its lines (each from a
    line "--@ name" up to the next such line); the comment before the first
    is returned under None."""
    frags, name = {None: []}, None
    for line in text.splitlines(keepends=True):
        m = _MARK.match(line)
        if m:
            name = m.group(1)
            frags[name] = []
        else:
            frags[name].append(line)
    return frags


def app_code(name, replace=True):
    """The new application code of a migration, deployed with it: the
    functions of tx_base.sql that hold a fragment its tx.sql replaces
    ("--@ name" ... "--@ end" there), with the fragments replaced and the
    markers dropped.  replace=False: the same functions as they are (the
    redeploy strategy's control: a code switch that changes nothing)."""
    overrides = _override_fragments(read_sql(name, "tx.sql"))
    out, seen = list(overrides[None]) if replace else [], set()
    for fn in re.split(r"(?m)^(?=CREATE OR REPLACE FUNCTION )", read_sql("tx_base.sql")):
        if not fn.startswith("CREATE"):
            continue
        lines, inside, changed = [], None, False
        for line in fn.splitlines(keepends=True):
            m = _MARK.match(line)
            if m and inside is None:
                inside = m.group(1)
                seen.add(inside)
                if inside in overrides:
                    if replace:
                        lines += overrides[inside]
                    changed = True
            elif m:
                inside = None
            elif inside is None or inside not in overrides or not replace:
                lines.append(line)
        if changed:
            out.append("".join(lines).rstrip() + "\n\n")
    unknown = set(overrides) - seen - {None}
    if unknown:
        raise ValueError("%s/tx.sql replaces fragments tx_base.sql lacks: %s"
                         % (name, ", ".join(sorted(unknown))))
    return "".join(out)


class Migration:
    def __init__(self, name, inputs, outputs, eager_lock, probe_sql, batch, copy_rows_sql, title):
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.eager_lock = eager_lock
        self.probe_sql = probe_sql
        self.batch = batch
        self.copy_rows_sql = copy_rows_sql
        self.title = title

    def script(self):
        return read_sql(self.name, "script.sql")

    def tx(self):
        return app_code(self.name)

    def tx_unchanged(self):
        """The functions tx() replaces, redeployed as they are."""
        return app_code(self.name, replace=False)

    def statements(self):
        return _statements(self.script())

    def create_statements(self):
        return [s for s in self.statements() if _first_words(s).startswith("CREATE")]

    def multistep_setup(self):
        return read_sql(self.name, "multistep_setup.sql")

    def multistep_cutover_statements(self):
        return _statements(read_sql(self.name, "multistep_cutover.sql"))

    def multistep_cleanup(self):
        """What the cut-over left for transactions of the old code, to drop
        once they are over; None if nothing."""
        try:
            return read_sql(self.name, "multistep_cleanup.sql")
        except FileNotFoundError:
            return None

    def analyze_sql(self):
        """Eager and multi-step analyze the new tables before switching, as a
        DBA (or pg-osc) does: without statistics the planner picks poor plans
        for the new code."""
        return "ANALYZE " + ", ".join(self.outputs)

    def lock_sql(self, mode):
        return f"LOCK TABLE {', '.join(self.inputs)} IN {mode} MODE"


def _first_words(s):
    lines = [ln for ln in s.splitlines() if not ln.strip().startswith("--")]
    return " ".join(" ".join(lines).split()).upper()


MIGRATIONS = {
    "split": Migration(
        "split", ["customer"], ["customer_private", "customer_public"], "ACCESS EXCLUSIVE",
        "SELECT c_balance FROM customer_private WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 1",
        _split_batch, "SELECT count(*) FROM customer",
        "Table split: customer -> customer_private + customer_public (1:n)"),
    "aggregate": Migration(
        "aggregate", ["order_line"], ["order_total"], "SHARE",
        "SELECT ot_amount FROM order_total WHERE ot_w_id = 1 AND ot_d_id = 1 AND ot_o_id = 1",
        _aggregate_batch, "SELECT count(*) FROM order_line",
        "Aggregate: order_line totals per order -> order_total (n:1)"),
    "join": Migration(
        "join", ["order_line", "stock"], ["orderline_stock"], "ACCESS EXCLUSIVE",
        "SELECT count(*) FROM orderline_stock WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = 1",
        _join_batch, "SELECT (SELECT count(*) FROM order_line) + (SELECT count(*) FROM stock)",
        "Join: order_line + stock -> orderline_stock (n:n)"),
}
