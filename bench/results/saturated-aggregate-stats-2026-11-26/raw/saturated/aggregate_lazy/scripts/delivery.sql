\set w_id random(1, :nw)
SELECT tpcc_delivery(:w_id, :nw);
