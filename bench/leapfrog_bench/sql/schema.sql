-- TPC-C schema (spec 1.3), PostgreSQL 15.  No foreign keys: the chapter's
-- main experiments (4.4.1-4.4.3) run without them, and Leapfrog 0.1 does not
-- carry constraints of the new schema yet.  Indexes are built after the load
-- (indexes.sql).

CREATE TABLE warehouse (
    w_id       int NOT NULL,
    w_name     varchar(10),
    w_street_1 varchar(20),
    w_street_2 varchar(20),
    w_city     varchar(20),
    w_state    char(2),
    w_zip      char(9),
    w_tax      numeric(4,4),
    w_ytd      numeric(12,2)
);

CREATE TABLE district (
    d_id        int NOT NULL,
    d_w_id      int NOT NULL,
    d_name      varchar(10),
    d_street_1  varchar(20),
    d_street_2  varchar(20),
    d_city      varchar(20),
    d_state     char(2),
    d_zip       char(9),
    d_tax       numeric(4,4),
    d_ytd       numeric(12,2),
    d_next_o_id int
);

CREATE TABLE customer (
    c_id           int NOT NULL,
    c_d_id         int NOT NULL,
    c_w_id         int NOT NULL,
    c_first        varchar(16),
    c_middle       char(2),
    c_last         varchar(16),
    c_street_1     varchar(20),
    c_street_2     varchar(20),
    c_city         varchar(20),
    c_state        char(2),
    c_zip          char(9),
    c_phone        char(16),
    c_since        timestamp,
    c_credit       char(2),
    c_credit_lim   numeric(12,2),
    c_discount     numeric(4,4),
    c_balance      numeric(12,2),
    c_ytd_payment  numeric(12,2),
    c_payment_cnt  int,
    c_delivery_cnt int,
    c_data         varchar(500)
);

CREATE TABLE history (
    h_c_id   int,
    h_c_d_id int,
    h_c_w_id int,
    h_d_id   int,
    h_w_id   int,
    h_date   timestamp,
    h_amount numeric(6,2),
    h_data   varchar(24)
);

CREATE TABLE new_order (
    no_o_id int NOT NULL,
    no_d_id int NOT NULL,
    no_w_id int NOT NULL
);

CREATE TABLE orders (
    o_id         int NOT NULL,
    o_d_id       int NOT NULL,
    o_w_id       int NOT NULL,
    o_c_id       int,
    o_entry_d    timestamp,
    o_carrier_id int,
    o_ol_cnt     int,
    o_all_local  int
);

CREATE TABLE order_line (
    ol_o_id        int NOT NULL,
    ol_d_id        int NOT NULL,
    ol_w_id        int NOT NULL,
    ol_number      int NOT NULL,
    ol_i_id        int,
    ol_supply_w_id int,
    ol_delivery_d  timestamp,
    ol_quantity    int,
    ol_amount      numeric(6,2),
    ol_dist_info   char(24)
);

CREATE TABLE item (
    i_id    int NOT NULL,
    i_im_id int,
    i_name  varchar(24),
    i_price numeric(5,2),
    i_data  varchar(50)
);

CREATE TABLE stock (
    s_i_id       int NOT NULL,
    s_w_id       int NOT NULL,
    s_quantity   int,
    s_dist_01    char(24),
    s_dist_02    char(24),
    s_dist_03    char(24),
    s_dist_04    char(24),
    s_dist_05    char(24),
    s_dist_06    char(24),
    s_dist_07    char(24),
    s_dist_08    char(24),
    s_dist_09    char(24),
    s_dist_10    char(24),
    s_ytd        int,
    s_order_cnt  int,
    s_remote_cnt int,
    s_data       varchar(50)
);

-- Helpers used by the loader and by the transactions.
CREATE FUNCTION tpcc_lastname(n int) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT (ARRAY['BAR','OUGHT','ABLE','PRI','PRES','ESE','ANTI','CALLY','ATION','EING'])[n / 100 + 1]
      || (ARRAY['BAR','OUGHT','ABLE','PRI','PRES','ESE','ANTI','CALLY','ATION','EING'])[(n / 10) % 10 + 1]
      || (ARRAY['BAR','OUGHT','ABLE','PRI','PRES','ESE','ANTI','CALLY','ATION','EING'])[n % 10 + 1]
$$;

-- NURand(A, x, y) of TPC-C 2.1.6 with run-time constant c.
CREATE FUNCTION tpcc_nurand(a int, x int, y int, c int) RETURNS int
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT (((floor(random() * (a + 1))::int | (x + floor(random() * (y - x + 1)))::int) + c)
          % (y - x + 1)) + x
$$;

CREATE FUNCTION tpcc_rand(lo int, hi int) RETURNS int
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT lo + floor(random() * (hi - lo + 1))::int
$$;

-- No truncation of empty tails by (auto)vacuum: it holds AccessExclusiveLock
-- on the table while it truncates, and on this machine's disk one ftruncate
-- of district took 0.85 s, with every client waiting for the lock (sampled
-- in pg_stat_activity: VacuumTruncate, then DataFileTruncate).  That is a
-- stall of the database, in whichever strategy's run it falls, not of the
-- migration.  The tables the migrations create keep the default.
ALTER TABLE warehouse SET (vacuum_truncate = false);
ALTER TABLE district SET (vacuum_truncate = false);
ALTER TABLE customer SET (vacuum_truncate = false);
ALTER TABLE history SET (vacuum_truncate = false);
ALTER TABLE new_order SET (vacuum_truncate = false);
ALTER TABLE orders SET (vacuum_truncate = false);
ALTER TABLE order_line SET (vacuum_truncate = false);
ALTER TABLE item SET (vacuum_truncate = false);
ALTER TABLE stock SET (vacuum_truncate = false);

-- Counts transactions that the harness re-ran because the schema changed
-- under them (a statement of the old code failing with 42P01/42703 after the
-- switch): the equivalent of an application retrying a request.
CREATE SEQUENCE tpcc_schema_retries;
