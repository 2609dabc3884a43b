\set w_id random(1, :nw)
SELECT tpcc_payment(:w_id, :nw);
