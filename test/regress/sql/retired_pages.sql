--
-- retired_pages: a retired table only loses rows until it is dropped, so
-- its pages are not pruned on the statements' time (migrate.c,
-- leave_unpruned): the claim that deletes a row clears its page's prune
-- hint, and the next statement that reads the page leaves the deleted row
-- as it is.  Without that, the read pruned the page: the deleted row's
-- line pointer became dead (lp_flags 3).
--
CREATE EXTENSION pageinspect;
CREATE SCHEMA rp;
-- rows of about 230 bytes: 35 to a page, page 0 full
CREATE TABLE rp.src (id int PRIMARY KEY, pad text);
INSERT INTO rp.src SELECT g, repeat('x', 190) FROM generate_series(1, 200) g;
SELECT 'rp.src'::regclass::oid AS src_oid \gset
SELECT leapfrog.start('pages', $$
  CREATE TABLE rp.dst (id int PRIMARY KEY, pad text);
  INSERT INTO rp.dst SELECT * FROM rp.src;
  DROP TABLE rp.src;
$$);
-- (the retired table: the same OID, a name with OIDs in it, not printed)
SELECT :src_oid::regclass::text AS retired \gset
SELECT upper - lower < 819 AS nearly_full FROM page_header(get_raw_page(:'retired', 0));
-- a statement migrates row 1, on page 0
UPDATE rp.dst SET pad = 'y' WHERE id = 1;
SELECT prune_xid FROM page_header(get_raw_page(:'retired', 0));
-- the next one reads page 0 (its look-up, its claim of row 2)
UPDATE rp.dst SET pad = 'y' WHERE id = 2;
SELECT lp, lp_flags, t_xmax <> '0' AS deleted
  FROM heap_page_items(get_raw_page(:'retired', 0)) WHERE lp <= 3 ORDER BY lp;
SELECT prune_xid FROM page_header(get_raw_page(:'retired', 0));
SELECT id, pad = 'y' AS updated FROM rp.dst WHERE id <= 3 ORDER BY id;
SELECT leapfrog.complete('pages');
SELECT count(*), count(*) FILTER (WHERE pad = 'y') AS updated FROM rp.dst;
DROP SCHEMA rp CASCADE;
DROP EXTENSION pageinspect;
