-- Feed positions published in commit order, instead of transaction ids and snapshots.
--
-- A write stores its feed rows with no position (pos NULL: not yet published). After it
-- commits, publication stamps every committed unpublished row with the clock's next value, in
-- one short transaction that holds the clock's row lock: publications take turns, so the rows
-- a reader sees published always form a prefix of the clock (every value up to the clock's
-- `published` is complete), however late a write committed. A reader remembers the clock value
-- it read up to; the positions are plain stored data, so they survive pg_dump and restore, and
-- they never compare transaction ids of different nodes.
CREATE TABLE feed_clock (
    clock_id  SMALLINT PRIMARY KEY,
    -- The last value publication stamped: every row at or below it is committed and visible.
    published BIGINT   NOT NULL
);
INSERT INTO feed_clock (clock_id, published) VALUES (0, 1);

-- Rows already stored count as published at 1: a reader starting now starts after them, and
-- cursors issued before this change (transaction snapshots) are answered as expired.
ALTER TABLE group_msgs ADD COLUMN pos BIGINT DEFAULT 1;
ALTER TABLE group_msgs ALTER COLUMN pos DROP DEFAULT;
DROP INDEX group_msgs_by_tx;
ALTER TABLE group_msgs DROP COLUMN tx;
CREATE INDEX group_msgs_by_pos ON group_msgs (pos);
CREATE INDEX group_msgs_unpublished ON group_msgs (group_id) WHERE pos IS NULL;

ALTER TABLE receipt_events ADD COLUMN pos BIGINT DEFAULT 1;
ALTER TABLE receipt_events ALTER COLUMN pos DROP DEFAULT;
DROP INDEX receipt_events_by_tx;
ALTER TABLE receipt_events DROP COLUMN tx;
CREATE INDEX receipt_events_by_pos ON receipt_events (pos);
CREATE INDEX receipt_events_unpublished ON receipt_events (group_id) WHERE pos IS NULL;

ALTER TABLE member_events ADD COLUMN pos BIGINT DEFAULT 1;
ALTER TABLE member_events ALTER COLUMN pos DROP DEFAULT;
DROP INDEX member_events_by_tx;
ALTER TABLE member_events DROP COLUMN tx;
CREATE INDEX member_events_by_pos ON member_events (pos);
CREATE INDEX member_events_unpublished ON member_events (group_id) WHERE pos IS NULL;
