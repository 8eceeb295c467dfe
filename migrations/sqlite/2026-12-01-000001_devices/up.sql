-- Delivery per device, reading per user, one's own messages never unread, and the chat list.

-- A member's cursors. last_ack_msg_id stays the delivered cursor of the member's default
-- device (requests that name no device); delivered_msg_id is the highest message delivered to
-- any of their devices, which is what receipts count; own_msgs_after_read counts the member's
-- own messages above their read cursor, so unread = last_msg_id - last_read_msg_id -
-- own_msgs_after_read without counting message rows. SQLite cannot drop a CHECK, so the
-- table is rebuilt.
CREATE TABLE group_members_new (
    group_id            BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    user_id             TEXT   NOT NULL,
    role                TEXT   NOT NULL CHECK (role IN ('owner', 'member')),
    joined_after_msg_id BIGINT NOT NULL,
    last_ack_msg_id     BIGINT NOT NULL,
    last_read_msg_id    BIGINT NOT NULL,
    joined_at           TIMESTAMP NOT NULL,
    delivered_msg_id    BIGINT NOT NULL,
    own_msgs_after_read BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, user_id),
    CHECK (last_read_msg_id <= delivered_msg_id
           AND last_ack_msg_id <= delivered_msg_id
           AND own_msgs_after_read >= 0)
);
INSERT INTO group_members_new
    (group_id, user_id, role, joined_after_msg_id, last_ack_msg_id, last_read_msg_id, joined_at,
     delivered_msg_id, own_msgs_after_read)
SELECT gm.group_id, gm.user_id, gm.role, gm.joined_after_msg_id, gm.last_ack_msg_id,
       gm.last_read_msg_id, gm.joined_at, gm.last_ack_msg_id,
       (SELECT count(*) FROM group_msgs m
        WHERE m.group_id = gm.group_id AND m.sender_id = gm.user_id
          AND m.msg_id > gm.last_read_msg_id)
FROM group_members gm;
DROP INDEX group_members_by_user;
DROP TABLE group_members;
ALTER TABLE group_members_new RENAME TO group_members;
CREATE INDEX group_members_by_user ON group_members (user_id, group_id);

-- When the group last had a message (its creation time until then): the chat list's order.
ALTER TABLE groups ADD COLUMN last_activity_at TIMESTAMP NOT NULL DEFAULT '1970-01-01 00:00:00';
UPDATE groups SET last_activity_at = COALESCE(
    (SELECT max(m.created_at) FROM group_msgs m WHERE m.group_id = groups.group_id),
    created_at);

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
-- read cursor moved, they joined a group, they left or were removed. Insertion order is
-- commit order under the single writer, which feed positions rely on. Deleted with receipt
-- changes after the retention period.
CREATE TABLE member_events (
    id         INTEGER   PRIMARY KEY AUTOINCREMENT,
    user_id    TEXT      NOT NULL,
    group_id   BIGINT    NOT NULL,
    kind       TEXT      NOT NULL CHECK (kind IN ('read', 'joined', 'left')),
    -- The device that caused it ('' for the default device), whose own polls skip it.
    device_id  TEXT      NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX member_events_by_created_at ON member_events (created_at);
