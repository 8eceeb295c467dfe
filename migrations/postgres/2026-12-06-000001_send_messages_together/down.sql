DROP FUNCTION chorus_send_messages(BIGINT, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TIMESTAMP);

-- The one-message function this migration replaced, as its own migration made it.
-- A plain message (text and optional client data: no mentions, no reply) sent in one
-- statement: the server calls this function outside any transaction, so the whole send is one
-- round trip and one commit. Every other entry, and every send this function does not store,
-- goes through the server's general path, which decides refusals and duplicates; this function
-- only ever stores a message or leaves everything as it found it.
--
-- Returns the new message's id and time, or no row when it stored nothing: no such group, the
-- sender is not a member, or the sender already used this client_msg_id in this group.
--
-- The cursor moves below are the ones the general path makes (members::advance_past_own_entry
-- and devices::advance_device_past_own); the API tests run both paths on PostgreSQL.
CREATE FUNCTION chorus_send_message(
    p_group_id BIGINT,
    p_sender_id TEXT,
    p_device_id TEXT,
    p_client_msg_id TEXT,
    p_content TEXT,
    p_ext TEXT,
    p_now TIMESTAMP
) RETURNS TABLE (stored_msg_id BIGINT, stored_at TIMESTAMP) LANGUAGE plpgsql AS $$
DECLARE
    new_id BIGINT;
    activity TIMESTAMP;
    stamp TIMESTAMP;
BEGIN
    -- A sender who is not a member is refused without taking the group's lock (a removed
    -- member's client retrying in a loop must not slow the group's senders).
    PERFORM 1 FROM group_members WHERE group_id = p_group_id AND user_id = p_sender_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The group's row lock orders the group's sends: ids are handed out one by one, and
    -- membership changes (which take this lock first) cannot interleave with the send.
    UPDATE groups SET last_msg_id = last_msg_id + 1 WHERE group_id = p_group_id
        RETURNING last_msg_id, last_activity_at INTO new_id, activity;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Again, in a statement of its own, so it reads membership as of after the lock was taken.
    PERFORM 1 FROM group_members WHERE group_id = p_group_id AND user_id = p_sender_id;
    IF NOT FOUND THEN
        UPDATE groups SET last_msg_id = last_msg_id - 1 WHERE group_id = p_group_id;
        RETURN;
    END IF;
    -- The server's clock, as every other entry has; p_now was read before the lock was
    -- taken, so it is raised to the group's last activity to keep stamps in id order.
    stamp := GREATEST(p_now, activity);
    INSERT INTO group_msgs (group_id, msg_id, kind, sender_id, client_msg_id, content,
                            created_at, mention_all, ext)
        VALUES (p_group_id, new_id, 'message', p_sender_id, p_client_msg_id, p_content,
                stamp, FALSE, p_ext)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        -- A repeat of an earlier send: the id goes back (the lock is still held, so no later
        -- send took one), and the general path answers with the original.
        UPDATE groups SET last_msg_id = last_msg_id - 1 WHERE group_id = p_group_id;
        RETURN;
    END IF;
    UPDATE groups SET last_activity_at = stamp
        WHERE group_id = p_group_id AND last_activity_at < stamp;
    -- The sender has read and received their own message: each cursor that stood just below
    -- it moves onto it; one left further back stays, and the message counts as the sender's
    -- own above their read cursor.
    UPDATE group_members SET
        own_msgs_after_read = CASE WHEN last_read_msg_id = new_id - 1
                                   THEN own_msgs_after_read ELSE own_msgs_after_read + 1 END,
        last_read_msg_id = CASE WHEN last_read_msg_id = new_id - 1
                                THEN new_id ELSE last_read_msg_id END,
        delivered_msg_id = CASE WHEN delivered_msg_id = new_id - 1
                                THEN new_id ELSE delivered_msg_id END,
        last_ack_msg_id = CASE WHEN p_device_id IS NULL AND last_ack_msg_id = new_id - 1
                               THEN new_id ELSE last_ack_msg_id END
        WHERE group_id = p_group_id AND user_id = p_sender_id;
    IF NOT FOUND THEN
        -- Cannot happen while removals lock the group's row first; if it did, the whole
        -- statement rolls back rather than store a message from no member.
        RAISE EXCEPTION 'chorus_send_message: the membership of % in group % vanished',
            p_sender_id, p_group_id;
    END IF;
    IF p_device_id IS NOT NULL THEN
        UPDATE device_cursors SET last_ack_msg_id = new_id
            WHERE group_id = p_group_id AND user_id = p_sender_id AND device_id = p_device_id
              AND last_ack_msg_id = new_id - 1;
    END IF;
    stored_msg_id := new_id;
    stored_at := stamp;
    RETURN NEXT;
END $$;
