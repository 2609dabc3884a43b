-- Join (chapter 4.4.3): order_line and stock become one denormalized table,
-- orderline_stock (stock LEFT JOIN order_line on the supplying warehouse
-- and item), which makes StockLevel a single-table scan.  An n:n migration;
-- its unit is a join key, found through the index on order_line's
-- (ol_supply_w_id, ol_i_id) that the schema creates for every strategy.
CREATE TABLE orderline_stock (
    s_w_id        int NOT NULL,
    s_i_id        int NOT NULL,
    s_quantity    int,
    s_ytd         int,
    s_order_cnt   int,
    s_remote_cnt  int,
    s_data        varchar(50),
    s_dist_01     char(24),
    s_dist_02     char(24),
    s_dist_03     char(24),
    s_dist_04     char(24),
    s_dist_05     char(24),
    s_dist_06     char(24),
    s_dist_07     char(24),
    s_dist_08     char(24),
    s_dist_09     char(24),
    s_dist_10     char(24),
    ol_w_id       int,
    ol_d_id       int,
    ol_o_id       int,
    ol_number     int,
    ol_delivery_d timestamp,
    ol_quantity   int,
    ol_amount     numeric(6,2),
    ol_dist_info  char(24)
);
INSERT INTO orderline_stock
SELECT s.s_w_id, s.s_i_id, s.s_quantity, s.s_ytd, s.s_order_cnt, s.s_remote_cnt, s.s_data,
       s.s_dist_01, s.s_dist_02, s.s_dist_03, s.s_dist_04, s.s_dist_05,
       s.s_dist_06, s.s_dist_07, s.s_dist_08, s.s_dist_09, s.s_dist_10,
       ol.ol_w_id, ol.ol_d_id, ol.ol_o_id, ol.ol_number, ol.ol_delivery_d,
       ol.ol_quantity, ol.ol_amount, ol.ol_dist_info
  FROM stock s LEFT JOIN order_line ol
    ON ol.ol_supply_w_id = s.s_w_id AND ol.ol_i_id = s.s_i_id;
CREATE UNIQUE INDEX orderline_stock_ol ON orderline_stock (ol_w_id, ol_d_id, ol_o_id, ol_number);
CREATE INDEX orderline_stock_s ON orderline_stock (s_w_id, s_i_id);
DROP TABLE order_line;
DROP TABLE stock;
