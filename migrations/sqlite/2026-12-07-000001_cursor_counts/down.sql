CREATE INDEX group_members_by_read ON group_members (group_id, last_read_msg_id);
CREATE INDEX group_members_by_delivered ON group_members (group_id, delivered_msg_id);
CREATE INDEX group_members_by_joined ON group_members (group_id, joined_after_msg_id);
DROP TRIGGER group_members_cursors_removed;
DROP TRIGGER group_members_joined_moved;
DROP TRIGGER group_members_delivered_moved;
DROP TRIGGER group_members_read_moved;
DROP TRIGGER group_members_cursors_added;
DROP TABLE cursor_counts;
