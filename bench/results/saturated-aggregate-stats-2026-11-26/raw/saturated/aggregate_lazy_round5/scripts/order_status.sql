\set w_id random(1, :nw)
SELECT tpcc_order_status(:w_id, :nw);
