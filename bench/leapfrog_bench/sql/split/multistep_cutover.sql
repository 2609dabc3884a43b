-- Cut-over: the caller holds ACCESS EXCLUSIVE on customer; the new code
-- (tx.sql) follows in the same transaction.
DROP TABLE customer;
DROP FUNCTION bench_split_sync();
