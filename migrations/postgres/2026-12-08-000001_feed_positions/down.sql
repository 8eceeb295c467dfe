DROP INDEX member_events_unpublished;
DROP INDEX member_events_by_pos;
ALTER TABLE member_events DROP COLUMN pos;
ALTER TABLE member_events
    ADD COLUMN tx BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX member_events_by_tx ON member_events (tx);

DROP INDEX receipt_events_unpublished;
DROP INDEX receipt_events_by_pos;
ALTER TABLE receipt_events DROP COLUMN pos;
ALTER TABLE receipt_events
    ADD COLUMN tx BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX receipt_events_by_tx ON receipt_events (tx);

DROP INDEX group_msgs_unpublished;
DROP INDEX group_msgs_by_pos;
ALTER TABLE group_msgs DROP COLUMN pos;
ALTER TABLE group_msgs
    ADD COLUMN tx BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX group_msgs_by_tx ON group_msgs (tx);

DROP TABLE feed_clock;
