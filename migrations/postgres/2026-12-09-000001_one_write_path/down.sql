-- Restores the functions as their migrations made them.
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

CREATE FUNCTION chorus_send_messages(
    p_group_id BIGINT,
    p_sender_ids TEXT[],
    p_device_ids TEXT[],
    p_client_msg_ids TEXT[],
    p_contents TEXT[],
    p_exts TEXT[],
    p_now TIMESTAMP
) RETURNS TABLE (ordinal INT, stored_msg_id BIGINT, stored_at TIMESTAMP) LANGUAGE plpgsql AS $$
DECLARE
    senders_in_group TEXT[];
    last_id BIGINT;
    first_id BIGINT;
    activity TIMESTAMP;
    stamp TIMESTAMP;
BEGIN
    IF array_length(p_sender_ids, 1) IS DISTINCT FROM array_length(p_device_ids, 1)
       OR array_length(p_sender_ids, 1) IS DISTINCT FROM array_length(p_client_msg_ids, 1)
       OR array_length(p_sender_ids, 1) IS DISTINCT FROM array_length(p_contents, 1)
       OR array_length(p_sender_ids, 1) IS DISTINCT FROM array_length(p_exts, 1) THEN
        RAISE EXCEPTION 'chorus_send_messages: the arrays describe different numbers of messages';
    END IF;
    -- Senders who are not members are refused without taking the group's lock (a removed
    -- member's client retrying in a loop must not slow the group's senders).
    PERFORM 1 FROM group_members WHERE group_id = p_group_id AND user_id = ANY (p_sender_ids);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The group's row lock orders the group's sends: ids are handed out one by one, and
    -- membership changes (which take this lock first) cannot interleave with the sends.
    -- NO KEY UPDATE, the lock an UPDATE of the row's other columns takes: it lets an ack
    -- that holds a member's row insert rows referring to the group (a foreign key's KEY
    -- SHARE lock), where FOR UPDATE would deadlock with it.
    SELECT g.last_msg_id, g.last_activity_at INTO last_id, activity
        FROM groups g WHERE g.group_id = p_group_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Again, in a statement of its own, so it reads membership as of after the lock was taken.
    SELECT array_agg(user_id) INTO senders_in_group
        FROM group_members WHERE group_id = p_group_id AND user_id = ANY (p_sender_ids);
    IF senders_in_group IS NULL THEN
        RETURN;
    END IF;
    -- The server's clock, as every other entry has; p_now was read before the lock was
    -- taken, so it is raised to the group's last activity and to the stamp of the group's
    -- last entry (a recall or an edit stamps its entry without moving the activity time)
    -- to keep stamps in id order.
    stamp := GREATEST(p_now, activity,
                      (SELECT m.created_at FROM group_msgs m
                        WHERE m.group_id = p_group_id AND m.msg_id = last_id));
    first_id := last_id + 1;
    FOR i IN 1 .. array_length(p_sender_ids, 1) LOOP
        CONTINUE WHEN NOT (p_sender_ids[i] = ANY (senders_in_group));
        -- A repeat of an earlier send (in an earlier call or earlier in this one) stores
        -- nothing and takes no id; the general path answers with the original.
        INSERT INTO group_msgs (group_id, msg_id, kind, sender_id, client_msg_id, content,
                                created_at, mention_all, ext)
            VALUES (p_group_id, last_id + 1, 'message', p_sender_ids[i], p_client_msg_ids[i],
                    p_contents[i], stamp, FALSE, p_exts[i])
            ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        last_id := last_id + 1;
        -- The sender has read and received their own message: each cursor that stood just
        -- below it moves onto it; one left further back stays, and the message counts as the
        -- sender's own above their read cursor.
        UPDATE group_members SET
            own_msgs_after_read = CASE WHEN last_read_msg_id = last_id - 1
                                       THEN own_msgs_after_read ELSE own_msgs_after_read + 1 END,
            last_read_msg_id = CASE WHEN last_read_msg_id = last_id - 1
                                    THEN last_id ELSE last_read_msg_id END,
            delivered_msg_id = CASE WHEN delivered_msg_id = last_id - 1
                                    THEN last_id ELSE delivered_msg_id END,
            last_ack_msg_id = CASE WHEN p_device_ids[i] IS NULL AND last_ack_msg_id = last_id - 1
                                   THEN last_id ELSE last_ack_msg_id END
            WHERE group_id = p_group_id AND user_id = p_sender_ids[i];
        IF NOT FOUND THEN
            -- Cannot happen while removals lock the group's row first; if it did, the whole
            -- statement rolls back rather than store a message from no member.
            RAISE EXCEPTION 'chorus_send_messages: the membership of % in group % vanished',
                p_sender_ids[i], p_group_id;
        END IF;
        IF p_device_ids[i] IS NOT NULL THEN
            UPDATE device_cursors SET last_ack_msg_id = last_id
                WHERE group_id = p_group_id AND user_id = p_sender_ids[i]
                  AND device_id = p_device_ids[i] AND last_ack_msg_id = last_id - 1;
        END IF;
        ordinal := i;
        stored_msg_id := last_id;
        stored_at := stamp;
        RETURN NEXT;
    END LOOP;
    IF last_id >= first_id THEN
        UPDATE groups SET last_msg_id = last_id,
                          last_activity_at = GREATEST(last_activity_at, stamp)
            WHERE group_id = p_group_id;
    END IF;
END $$;
