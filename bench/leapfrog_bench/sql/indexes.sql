ALTER TABLE warehouse  ADD PRIMARY KEY (w_id);
ALTER TABLE district   ADD PRIMARY KEY (d_w_id, d_id);
ALTER TABLE customer   ADD PRIMARY KEY (c_w_id, c_d_id, c_id);
CREATE INDEX customer_name ON customer (c_w_id, c_d_id, c_last, c_first);
ALTER TABLE new_order  ADD PRIMARY KEY (no_w_id, no_d_id, no_o_id);
ALTER TABLE orders     ADD PRIMARY KEY (o_w_id, o_d_id, o_id);
CREATE INDEX orders_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);
ALTER TABLE order_line ADD PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number);
ALTER TABLE item       ADD PRIMARY KEY (i_id);
ALTER TABLE stock      ADD PRIMARY KEY (s_w_id, s_i_id);
-- The join migration's key on order_line (orderline_stock joins stock on the
-- supplying warehouse and item): Leapfrog finds a join key's rows through
-- it, and every strategy runs with it, so that the base load is the same.
CREATE INDEX order_line_supply ON order_line (ol_supply_w_id, ol_i_id);
