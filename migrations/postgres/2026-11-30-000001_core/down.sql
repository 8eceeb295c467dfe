DROP TABLE group_msgs;
DROP INDEX group_members_by_user;
DROP TABLE group_members;
DROP TABLE groups;
