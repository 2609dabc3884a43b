-- Table split (chapter 4.4.1): customer into customer_private (financial
-- columns) and customer_public (name and address), both keyed like customer.
-- A 1:n migration.  This text is what leapfrog.start receives; the eager
-- strategy runs it in one transaction.
CREATE TABLE customer_private (
    c_w_id         int NOT NULL,
    c_d_id         int NOT NULL,
    c_id           int NOT NULL,
    c_credit       char(2),
    c_credit_lim   numeric(12,2),
    c_discount     numeric(4,4),
    c_balance      numeric(12,2),
    c_ytd_payment  numeric(12,2),
    c_payment_cnt  int,
    c_delivery_cnt int,
    c_data         varchar(500),
    PRIMARY KEY (c_w_id, c_d_id, c_id)
);
CREATE TABLE customer_public (
    c_w_id     int NOT NULL,
    c_d_id     int NOT NULL,
    c_id       int NOT NULL,
    c_first    varchar(16),
    c_middle   char(2),
    c_last     varchar(16),
    c_street_1 varchar(20),
    c_street_2 varchar(20),
    c_city     varchar(20),
    c_state    char(2),
    c_zip      char(9),
    c_phone    char(16),
    c_since    timestamp,
    PRIMARY KEY (c_w_id, c_d_id, c_id)
);
CREATE INDEX customer_public_name ON customer_public (c_w_id, c_d_id, c_last, c_first);
INSERT INTO customer_private
SELECT c_w_id, c_d_id, c_id, c_credit, c_credit_lim, c_discount, c_balance,
       c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data
  FROM customer;
INSERT INTO customer_public
SELECT c_w_id, c_d_id, c_id, c_first, c_middle, c_last, c_street_1, c_street_2,
       c_city, c_state, c_zip, c_phone, c_since
  FROM customer;
DROP TABLE customer;
