-- After the cut-over, once no transaction that began before it is left.
DROP TRIGGER bench_aggregate_sync ON order_line;
DROP FUNCTION bench_aggregate_sync();
