\set w_id random(1, :nw)
SELECT tpcc_stock_level(:w_id, :nw);
