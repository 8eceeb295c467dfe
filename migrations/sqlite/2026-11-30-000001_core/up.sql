-- Core tables: one row per group message, one cursor pair per membership.
CREATE TABLE groups (
    group_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    owner_id    TEXT    NOT NULL,
    -- The per-group message counter: ids are handed out under the writer lock, so they are contiguous.
    last_msg_id BIGINT  NOT NULL DEFAULT 0,
    created_at  TIMESTAMP NOT NULL
);

CREATE TABLE group_members (
    group_id            BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    user_id             TEXT   NOT NULL,
    role                TEXT   NOT NULL CHECK (role IN ('owner', 'member')),
    -- The group's last_msg_id when this member joined: they see and count only later messages.
    joined_after_msg_id BIGINT NOT NULL,
    last_ack_msg_id     BIGINT NOT NULL,
    last_read_msg_id    BIGINT NOT NULL,
    joined_at           TIMESTAMP NOT NULL,
    PRIMARY KEY (group_id, user_id),
    CHECK (last_read_msg_id <= last_ack_msg_id)
);
CREATE INDEX group_members_by_user ON group_members (user_id, group_id);

CREATE TABLE group_msgs (
    -- Global insertion order; on SQLite the single writer makes it commit order too.
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id      BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    msg_id        BIGINT NOT NULL,
    sender_id     TEXT   NOT NULL,
    client_msg_id TEXT   NOT NULL,
    content       TEXT   NOT NULL,
    created_at    TIMESTAMP NOT NULL,
    UNIQUE (group_id, msg_id),
    UNIQUE (group_id, sender_id, client_msg_id)
);
