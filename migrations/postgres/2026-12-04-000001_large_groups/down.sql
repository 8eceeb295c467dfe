DROP INDEX group_members_by_joined;
DROP INDEX group_members_by_delivered;
DROP INDEX group_members_by_read;
ALTER TABLE group_members DROP CONSTRAINT group_members_cursors_from_join;
DROP TRIGGER group_members_count_removed ON group_members;
DROP TRIGGER group_members_count_added ON group_members;
DROP FUNCTION group_members_counted_out();
DROP FUNCTION group_members_counted_in();
ALTER TABLE groups DROP COLUMN member_count;
