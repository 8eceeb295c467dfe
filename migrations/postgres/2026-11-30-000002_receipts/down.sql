DROP INDEX group_msgs_by_sender;
DROP TABLE receipt_events;
DROP INDEX group_msgs_by_tx;
ALTER TABLE group_msgs DROP COLUMN tx;
