-- Receipt changes: one row per ack that moved a cursor (never one per message or recipient).
-- A sender's long-poll joins these ranges with its own messages. Rows are deleted after the
-- retention period: receipts are derived from cursors, this is only the change feed.
CREATE TABLE receipt_events (
    -- Insertion order; the single writer makes it commit order, which change cursors rely on.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id    BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    reader_id   TEXT   NOT NULL,
    -- Messages in (from_msg_id, to_msg_id] may have changed delivered or read counts.
    from_msg_id BIGINT NOT NULL,
    to_msg_id   BIGINT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX receipt_events_by_created_at ON receipt_events (created_at);

-- A sender's own messages in a range: the join of the receipt feed.
CREATE INDEX group_msgs_by_sender ON group_msgs (group_id, sender_id, msg_id);
