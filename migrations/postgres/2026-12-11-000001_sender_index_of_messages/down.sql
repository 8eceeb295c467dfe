DROP INDEX group_msgs_by_sender;
CREATE INDEX group_msgs_by_sender ON group_msgs (group_id, sender_id, msg_id);
