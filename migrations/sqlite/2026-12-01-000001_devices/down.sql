DROP INDEX member_events_by_created_at;
DROP TABLE member_events;
DROP INDEX device_cursors_by_device;
DROP TABLE device_cursors;
DROP INDEX devices_by_last_seen;
DROP INDEX devices_by_user;
DROP TABLE devices;
ALTER TABLE groups DROP COLUMN last_activity_at;
-- The old rule was read <= delivered on the one (default) device.
CREATE TABLE group_members_old (
    group_id            BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    user_id             TEXT   NOT NULL,
    role                TEXT   NOT NULL CHECK (role IN ('owner', 'member')),
    joined_after_msg_id BIGINT NOT NULL,
    last_ack_msg_id     BIGINT NOT NULL,
    last_read_msg_id    BIGINT NOT NULL,
    joined_at           TIMESTAMP NOT NULL,
    PRIMARY KEY (group_id, user_id),
    CHECK (last_read_msg_id <= last_ack_msg_id)
);
INSERT INTO group_members_old
SELECT group_id, user_id, role, joined_after_msg_id, delivered_msg_id, last_read_msg_id, joined_at
FROM group_members;
DROP INDEX group_members_by_user;
DROP TABLE group_members;
ALTER TABLE group_members_old RENAME TO group_members;
CREATE INDEX group_members_by_user ON group_members (user_id, group_id);
