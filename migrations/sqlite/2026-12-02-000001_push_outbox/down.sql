DROP INDEX push_group_state_by_member;
DROP TABLE push_group_state;
DROP INDEX push_targets_pending;
DROP INDEX push_targets_by_user;
DROP TABLE push_targets;
