-- The groups of each user, keyed by user: the groups they belong to, and the ones they left
-- (or were removed from) while the feeds still hold that change. `group_members` is keyed by
-- group, so a question about one user ("which groups are mine?", asked by every long-poll and
-- chat list) reads every shard of it on Citus; this table answers it from the user's shard,
-- and the statements that follow name those groups, so Citus runs them on their shards alone.
-- Written by the statements that add and remove members; the membership itself (cursors,
-- role, join point) stays in `group_members`.
CREATE TABLE user_groups (
    user_id  TEXT      NOT NULL,
    group_id BIGINT    NOT NULL,
    -- When the user left or was removed; NULL while they belong to the group. Deleted with
    -- the member events after the retention period.
    left_at  TIMESTAMP,
    PRIMARY KEY (user_id, group_id)
);
CREATE INDEX user_groups_left ON user_groups (left_at) WHERE left_at IS NOT NULL;

INSERT INTO user_groups (user_id, group_id, left_at)
SELECT user_id, group_id, NULL FROM group_members;
INSERT INTO user_groups (user_id, group_id, left_at)
SELECT e.user_id, e.group_id, MAX(e.created_at) FROM member_events e
WHERE e.kind = 'left'
GROUP BY e.user_id, e.group_id
ON CONFLICT (user_id, group_id) DO NOTHING;
