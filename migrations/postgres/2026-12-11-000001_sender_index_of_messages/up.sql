-- Every query that walks a sender's entries by id counts messages only (`kind = 'message'`):
-- the receipts feed's join and the count of a member's own messages above their read cursor.
-- Partial, the index serves them and cannot serve the look-up of a send's
-- (sender, client_msg_id), which the unique index answers in one probe. While a table has no
-- statistics yet (a new database, before autovacuum first analyzes it), PostgreSQL rated the
-- two indexes alike and walked every entry the sender had in the group instead.
DROP INDEX group_msgs_by_sender;
CREATE INDEX group_msgs_by_sender ON group_msgs (group_id, sender_id, msg_id)
    WHERE kind = 'message';
