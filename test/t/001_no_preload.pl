# Without shared_preload_libraries = 'leapfrog', CREATE EXTENSION works but
# every function of the extension fails with SQLSTATE 55000 and a hint
# naming shared_preload_libraries; nothing is created.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('no_preload');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
    CREATE EXTENSION leapfrog;
    CREATE TABLE t (id int PRIMARY KEY, v text);
    INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g;
});

my @calls = (
    [ 'start',     q{SELECT leapfrog.start('np', 'CREATE TABLE t2 (id int PRIMARY KEY, v text); INSERT INTO t2 SELECT id, v FROM t; DROP TABLE t;')} ],
    [ 'complete',  q{SELECT leapfrog.complete('np')} ],
    [ 'remaining', q{SELECT leapfrog.remaining('np')} ],
    [ 'wait',      q{SELECT leapfrog.wait('np', 0)} ],
);
foreach my $call (@calls)
{
    my ($name, $sql) = @$call;
    my ($ret, $stdout, $stderr) =
      $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
    isnt($ret, 0, "$name fails without the preload");
    like($stderr, qr/ERROR:  55000/, "$name: SQLSTATE 55000");
    like($stderr, qr/HINT:  .*shared_preload_libraries/, "$name: hint names shared_preload_libraries");
}

# Nothing changed.
is($node->safe_psql('postgres', q{SELECT count(*) FROM t}), '10', 't untouched');
is($node->safe_psql('postgres', q{SELECT to_regclass('t2') IS NULL}), 't', 'no t2');
is($node->safe_psql('postgres', q{SELECT count(*) FROM leapfrog.migrations}), '0', 'no migration recorded');

$node->stop;
done_testing();
