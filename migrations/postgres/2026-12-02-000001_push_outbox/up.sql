-- Waking phones that are not polling. A device may register a push target; a background job
-- tells the operator's push service when the device is due a notification. What is due is
-- decided from cursors (what the device received, what its user read) and from what the
-- device was already told, kept here: one row per device and one per device and group, never
-- one per message.

-- A named device's push target, and its outbox of at most one notification being delivered.
CREATE TABLE push_targets (
    device_id       TEXT      PRIMARY KEY REFERENCES devices (device_id) ON DELETE CASCADE,
    user_id         TEXT      NOT NULL,
    -- Opaque to Chorus: handed to the push service as registered.
    platform        TEXT      NOT NULL,
    token           TEXT      NOT NULL,
    registered_at   TIMESTAMP NOT NULL,
    -- When the last notification was built: the next waits CHORUS_PUSH_INTERVAL_MS after it.
    last_built_at   TIMESTAMP,
    -- Notifications built for this device so far; a notification's key ends in its number.
    built_count     BIGINT    NOT NULL DEFAULT 0,
    -- The notification being delivered (all NULL: none). Built and stored in one transaction
    -- with the marks below, so a crash between building and delivering loses nothing.
    pending_key     TEXT,
    pending_body    TEXT,
    pending_since   TIMESTAMP,
    attempts        BIGINT    NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMP,
    -- The instance delivering it, until when: another instance takes over after that.
    lease_owner     TEXT,
    lease_until     TIMESTAMP
);
CREATE INDEX push_targets_by_user ON push_targets (user_id);
CREATE INDEX push_targets_pending ON push_targets (next_attempt_at) WHERE pending_key IS NOT NULL;

-- What a device was last told of a group: the group's last message then, and its unread
-- count then (a lower count now means the user read elsewhere: the badge must be updated).
CREATE TABLE push_group_state (
    device_id       TEXT   NOT NULL REFERENCES push_targets (device_id) ON DELETE CASCADE,
    group_id        BIGINT NOT NULL,
    user_id         TEXT   NOT NULL,
    notified_msg_id BIGINT NOT NULL,
    notified_unread BIGINT NOT NULL,
    PRIMARY KEY (device_id, group_id),
    FOREIGN KEY (group_id, user_id) REFERENCES group_members (group_id, user_id) ON DELETE CASCADE
);
CREATE INDEX push_group_state_by_member ON push_group_state (group_id, user_id);
