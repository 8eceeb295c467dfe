-- Entries of a group's log beyond plain messages: recalls, edits and deletes (each its own
-- entry naming the message it changes), and system lines for membership changes. Mentions,
-- replies and client data on messages.
--
-- kind of an entry:
--   message                    a user's message (the only kind that counts as unread)
--   recalled, deleted          a message after its sender recalled it or the owner deleted it
--                              (its content, ext and mentions are gone)
--   recall, edit, delete       a change entry; target_msg_id names the message it changed
--   member_joined, member_left, member_removed, group_renamed   a system line; detail says who
ALTER TABLE group_msgs ADD COLUMN kind TEXT NOT NULL DEFAULT 'message'
    CHECK (kind IN ('message', 'recalled', 'deleted', 'recall', 'edit', 'delete',
                    'member_joined', 'member_left', 'member_removed', 'group_renamed'));
ALTER TABLE group_msgs ADD COLUMN target_msg_id BIGINT;
ALTER TABLE group_msgs ADD COLUMN reply_to_msg_id BIGINT;
ALTER TABLE group_msgs ADD COLUMN mention_all BOOLEAN NOT NULL DEFAULT FALSE;
-- The client's JSON object, as the client wrote it.
ALTER TABLE group_msgs ADD COLUMN ext TEXT;
-- A system line's JSON object (who joined or left, the new name).
ALTER TABLE group_msgs ADD COLUMN detail TEXT;
ALTER TABLE group_msgs ADD COLUMN edited_at TIMESTAMP;
ALTER TABLE group_msgs ADD COLUMN retracted_at TIMESTAMP;

-- The entries that do not count as unread, by position: a member's unread count subtracts
-- those above their read cursor, so its cost grows with such entries in the unread range
-- (normally none), never with the number of messages.
CREATE INDEX group_msgs_not_counted ON group_msgs (group_id, msg_id) WHERE kind <> 'message';
-- Messages that mention everyone, by position: counted the same way for each member.
CREATE INDEX group_msgs_mention_all ON group_msgs (group_id, msg_id) WHERE mention_all;

-- One row per member a message mentions by name (never one per member for @all). Removed with
-- the message's content when it is recalled or deleted.
CREATE TABLE mentions (
    group_id BIGINT NOT NULL,
    msg_id   BIGINT NOT NULL,
    user_id  TEXT   NOT NULL,
    PRIMARY KEY (group_id, msg_id, user_id),
    FOREIGN KEY (group_id, msg_id) REFERENCES group_msgs (group_id, msg_id) ON DELETE CASCADE
);
-- A member's mentions above their read cursor: their unread mention count.
CREATE INDEX mentions_by_member ON mentions (group_id, user_id, msg_id);
