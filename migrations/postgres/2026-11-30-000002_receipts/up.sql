-- Change feeds for long-polls. PostgreSQL hands out sequence values in one order and commits
-- in another, so "ids above the last one I saw" can skip a row that commits late. Each row
-- records the id of the transaction that wrote it instead, and readers ask which of those
-- transactions a snapshot could see (pg_visible_in_snapshot): nothing is skipped.
ALTER TABLE group_msgs
    ADD COLUMN tx BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX group_msgs_by_tx ON group_msgs (tx);

-- Receipt changes: one row per ack that moved a cursor (never one per message or recipient).
CREATE TABLE receipt_events (
    id          BIGSERIAL PRIMARY KEY,
    tx          BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    group_id    BIGINT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    reader_id   TEXT   NOT NULL,
    -- Messages in (from_msg_id, to_msg_id] may have changed delivered or read counts.
    from_msg_id BIGINT NOT NULL,
    to_msg_id   BIGINT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX receipt_events_by_tx ON receipt_events (tx);
CREATE INDEX receipt_events_by_created_at ON receipt_events (created_at);

-- A sender's own messages in a range: the join of the receipt feed.
CREATE INDEX group_msgs_by_sender ON group_msgs (group_id, sender_id, msg_id);
