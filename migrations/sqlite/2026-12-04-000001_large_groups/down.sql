DROP INDEX group_members_by_joined;
DROP INDEX group_members_by_delivered;
DROP INDEX group_members_by_read;
DROP TRIGGER group_members_count_removed;
DROP TRIGGER group_members_count_added;
ALTER TABLE groups DROP COLUMN member_count;
