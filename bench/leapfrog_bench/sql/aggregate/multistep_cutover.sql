DROP TRIGGER bench_aggregate_sync ON order_line;
DROP FUNCTION bench_aggregate_sync();
