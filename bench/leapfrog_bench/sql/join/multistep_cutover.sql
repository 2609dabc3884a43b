DROP TABLE order_line;
DROP TABLE stock;
DROP FUNCTION bench_join_sync_ol();
DROP FUNCTION bench_join_sync_s();
