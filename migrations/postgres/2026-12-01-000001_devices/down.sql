DROP TABLE member_events;
DROP TABLE device_cursors;
DROP TABLE devices;
ALTER TABLE groups DROP COLUMN last_activity_at;
ALTER TABLE group_members DROP CONSTRAINT group_members_cursors_check;
-- The old rule was read <= delivered on the one (default) device.
UPDATE group_members SET last_ack_msg_id = delivered_msg_id;
ALTER TABLE group_members DROP COLUMN own_msgs_after_read;
ALTER TABLE group_members DROP COLUMN delivered_msg_id;
ALTER TABLE group_members ADD CONSTRAINT group_members_check CHECK (last_read_msg_id <= last_ack_msg_id);
