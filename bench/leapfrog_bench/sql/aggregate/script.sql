-- Aggregate (chapter 4.4.2): the order totals that Delivery computes with
-- SUM(ol_amount) become a table the new code maintains.  An n:1 migration;
-- order_line stays, tracked in place: a write of an order's lines first
-- migrates the order's total (README, "Inputs that stay live").
CREATE TABLE order_total (
    ot_w_id   int NOT NULL,
    ot_d_id   int NOT NULL,
    ot_o_id   int NOT NULL,
    ot_amount numeric(12,2),
    PRIMARY KEY (ot_w_id, ot_d_id, ot_o_id)
);
INSERT INTO order_total
SELECT ol_w_id, ol_d_id, ol_o_id, sum(ol_amount)
  FROM order_line
 GROUP BY ol_w_id, ol_d_id, ol_o_id;
