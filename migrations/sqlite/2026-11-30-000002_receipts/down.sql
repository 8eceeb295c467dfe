DROP INDEX group_msgs_by_sender;
DROP INDEX receipt_events_by_created_at;
DROP TABLE receipt_events;
