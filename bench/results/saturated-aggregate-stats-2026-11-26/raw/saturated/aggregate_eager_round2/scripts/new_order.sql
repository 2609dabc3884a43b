\set w_id random(1, :nw)
SELECT tpcc_new_order(:w_id, :nw);
