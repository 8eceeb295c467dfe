DROP TABLE user_groups;
