-- The groups each user belongs to, keyed by user. `group_members` is keyed by group, so a
-- question about one user ("which groups are mine?", asked by every long-poll to know what
-- to wait on) reads every shard of it on Citus; this table answers it from the user's shard.
-- Written by the statements that add and remove members; the membership itself (cursors,
-- role, join point) stays in `group_members`.
CREATE TABLE user_groups (
    user_id  TEXT   NOT NULL,
    group_id BIGINT NOT NULL,
    PRIMARY KEY (user_id, group_id)
);

INSERT INTO user_groups (user_id, group_id) SELECT user_id, group_id FROM group_members;
