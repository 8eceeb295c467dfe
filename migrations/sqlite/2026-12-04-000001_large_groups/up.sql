-- Groups of many members: a kept member count, and the cursor indexes that let receipt counts
-- read a range of an index instead of every membership row.

ALTER TABLE groups ADD COLUMN member_count BIGINT NOT NULL DEFAULT 0;
UPDATE groups SET member_count =
    (SELECT count(*) FROM group_members m WHERE m.group_id = groups.group_id);

-- SQLite has only row triggers; under its single writer an update of the same row is cheap.
CREATE TRIGGER group_members_count_added AFTER INSERT ON group_members
BEGIN
    UPDATE groups SET member_count = member_count + 1 WHERE group_id = NEW.group_id;
END;
CREATE TRIGGER group_members_count_removed AFTER DELETE ON group_members
BEGIN
    UPDATE groups SET member_count = member_count - 1 WHERE group_id = OLD.group_id;
END;

-- Receipt counts subtract the members who joined after a message from those whose cursor
-- reached it, which is right only because a member's cursors start where they joined and
-- never go back (PostgreSQL checks it with a constraint; SQLite cannot add one to a table).
CREATE INDEX group_members_by_read ON group_members (group_id, last_read_msg_id);
CREATE INDEX group_members_by_delivered ON group_members (group_id, delivered_msg_id);
CREATE INDEX group_members_by_joined ON group_members (group_id, joined_after_msg_id);
