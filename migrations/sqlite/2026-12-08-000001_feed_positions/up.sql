-- Feed positions published in commit order (the same scheme as on PostgreSQL). A write stores
-- its feed rows with no position (pos NULL); the writer lane stamps them with the clock's next
-- value inside the batch that stores them, so on SQLite a row is published when it commits.
CREATE TABLE feed_clock (
    clock_id  SMALLINT PRIMARY KEY,
    -- The last value publication stamped: every row at or below it is committed and visible.
    published BIGINT   NOT NULL
);
INSERT INTO feed_clock (clock_id, published) VALUES (0, 1);

ALTER TABLE group_msgs ADD COLUMN pos BIGINT;
UPDATE group_msgs SET pos = 1;
CREATE INDEX group_msgs_by_pos ON group_msgs (pos);
CREATE INDEX group_msgs_unpublished ON group_msgs (group_id) WHERE pos IS NULL;

ALTER TABLE receipt_events ADD COLUMN pos BIGINT;
UPDATE receipt_events SET pos = 1;
CREATE INDEX receipt_events_by_pos ON receipt_events (pos);
CREATE INDEX receipt_events_unpublished ON receipt_events (group_id) WHERE pos IS NULL;

ALTER TABLE member_events ADD COLUMN pos BIGINT;
UPDATE member_events SET pos = 1;
CREATE INDEX member_events_by_pos ON member_events (pos);
CREATE INDEX member_events_unpublished ON member_events (group_id) WHERE pos IS NULL;
