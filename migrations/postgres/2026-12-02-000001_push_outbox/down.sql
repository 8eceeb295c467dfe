DROP TABLE push_group_state;
DROP TABLE push_targets;
