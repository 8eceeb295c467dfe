-- Delivery per device, reading per user, one's own messages never unread, and the chat list.

-- A member's cursors. last_ack_msg_id stays the delivered cursor of the member's default
-- device (requests that name no device); delivered_msg_id is the highest message delivered to
-- any of their devices, which is what receipts count; own_msgs_after_read counts the member's
-- own messages above their read cursor, so unread = last_msg_id - last_read_msg_id -
-- own_msgs_after_read without counting message rows.
ALTER TABLE group_members DROP CONSTRAINT group_members_check;
ALTER TABLE group_members ADD COLUMN delivered_msg_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE group_members ADD COLUMN own_msgs_after_read BIGINT NOT NULL DEFAULT 0;
UPDATE group_members SET
    delivered_msg_id = last_ack_msg_id,
    own_msgs_after_read = (
        SELECT count(*) FROM group_msgs m
        WHERE m.group_id = group_members.group_id
          AND m.sender_id = group_members.user_id
          AND m.msg_id > group_members.last_read_msg_id);
ALTER TABLE group_members ALTER COLUMN delivered_msg_id DROP DEFAULT;
ALTER TABLE group_members ADD CONSTRAINT group_members_cursors_check CHECK (
    last_read_msg_id <= delivered_msg_id
    AND last_ack_msg_id <= delivered_msg_id
    AND own_msgs_after_read >= 0);

-- When the group last had a message (its creation time until then): the chat list's order.
ALTER TABLE groups ADD COLUMN last_activity_at TIMESTAMP;
UPDATE groups SET last_activity_at = COALESCE(
    (SELECT max(m.created_at) FROM group_msgs m WHERE m.group_id = groups.group_id),
    created_at);
ALTER TABLE groups ALTER COLUMN last_activity_at SET NOT NULL;

-- A user's named devices. A row appears the first time a token naming the device is used.
CREATE TABLE devices (
    device_id    TEXT      PRIMARY KEY,
    user_id      TEXT      NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    last_seen_at TIMESTAMP NOT NULL,
    -- Set while the user has the device signed out; cleared when it signs in again.
    removed_at   TIMESTAMP,
    -- The last sign-out: tokens issued until then stay refused, also after a new sign-in.
    tokens_refused_until TIMESTAMP
);
CREATE INDEX devices_by_user ON devices (user_id);
CREATE INDEX devices_by_last_seen ON devices (last_seen_at);

-- A named device's delivered cursor in one group, created by its first ack there. Without a
-- row the device has received nothing of the group yet (it starts where the member joined).
CREATE TABLE device_cursors (
    group_id        BIGINT NOT NULL,
    user_id         TEXT   NOT NULL,
    device_id       TEXT   NOT NULL REFERENCES devices (device_id) ON DELETE CASCADE,
    last_ack_msg_id BIGINT NOT NULL,
    PRIMARY KEY (group_id, user_id, device_id),
    FOREIGN KEY (group_id, user_id) REFERENCES group_members (group_id, user_id) ON DELETE CASCADE
);
CREATE INDEX device_cursors_by_device ON device_cursors (device_id);

-- Changes to a user's own membership state, for that user's other devices' /v1/sync: their
-- read cursor moved, they joined a group, they left or were removed. Deleted with receipt
-- changes after the retention period.
CREATE TABLE member_events (
    id         BIGSERIAL PRIMARY KEY,
    tx         BIGINT    NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    user_id    TEXT      NOT NULL,
    group_id   BIGINT    NOT NULL,
    kind       TEXT      NOT NULL CHECK (kind IN ('read', 'joined', 'left')),
    -- The device that caused it ('' for the default device), whose own polls skip it.
    device_id  TEXT      NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX member_events_by_tx ON member_events (tx);
CREATE INDEX member_events_by_created_at ON member_events (created_at);
