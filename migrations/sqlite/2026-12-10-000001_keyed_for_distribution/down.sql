-- The triggers as their migrations made them (2026-12-04 large_groups, 2026-12-07 cursor_counts).
CREATE TRIGGER group_members_count_added AFTER INSERT ON group_members
BEGIN
    UPDATE groups SET member_count = member_count + 1 WHERE group_id = NEW.group_id;
END;
CREATE TRIGGER group_members_count_removed AFTER DELETE ON group_members
BEGIN
    UPDATE groups SET member_count = member_count - 1 WHERE group_id = OLD.group_id;
END;
CREATE TRIGGER group_members_cursors_added AFTER INSERT ON group_members
BEGIN
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.last_read_msg_id, 1, 0, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET read_members = read_members + 1;
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.delivered_msg_id, 0, 1, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET delivered_members = delivered_members + 1;
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.joined_after_msg_id, 0, 0, 1)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET joined_members = joined_members + 1;
END;
CREATE TRIGGER group_members_read_moved AFTER UPDATE OF last_read_msg_id ON group_members
WHEN NEW.last_read_msg_id <> OLD.last_read_msg_id
BEGIN
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.last_read_msg_id, 1, 0, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET read_members = read_members + 1;
    UPDATE cursor_counts SET read_members = read_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.last_read_msg_id;
    DELETE FROM cursor_counts WHERE group_id = OLD.group_id AND msg_id = OLD.last_read_msg_id
        AND read_members = 0 AND delivered_members = 0 AND joined_members = 0;
END;
CREATE TRIGGER group_members_delivered_moved AFTER UPDATE OF delivered_msg_id ON group_members
WHEN NEW.delivered_msg_id <> OLD.delivered_msg_id
BEGIN
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.delivered_msg_id, 0, 1, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET delivered_members = delivered_members + 1;
    UPDATE cursor_counts SET delivered_members = delivered_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.delivered_msg_id;
    DELETE FROM cursor_counts WHERE group_id = OLD.group_id AND msg_id = OLD.delivered_msg_id
        AND read_members = 0 AND delivered_members = 0 AND joined_members = 0;
END;
CREATE TRIGGER group_members_joined_moved AFTER UPDATE OF joined_after_msg_id ON group_members
WHEN NEW.joined_after_msg_id <> OLD.joined_after_msg_id
BEGIN
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.joined_after_msg_id, 0, 0, 1)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET joined_members = joined_members + 1;
    UPDATE cursor_counts SET joined_members = joined_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.joined_after_msg_id;
    DELETE FROM cursor_counts WHERE group_id = OLD.group_id AND msg_id = OLD.joined_after_msg_id
        AND read_members = 0 AND delivered_members = 0 AND joined_members = 0;
END;
CREATE TRIGGER group_members_cursors_removed AFTER DELETE ON group_members
BEGIN
    UPDATE cursor_counts SET read_members = read_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.last_read_msg_id;
    UPDATE cursor_counts SET delivered_members = delivered_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.delivered_msg_id;
    UPDATE cursor_counts SET joined_members = joined_members - 1
        WHERE group_id = OLD.group_id AND msg_id = OLD.joined_after_msg_id;
    DELETE FROM cursor_counts WHERE group_id = OLD.group_id
        AND msg_id IN (OLD.last_read_msg_id, OLD.delivered_msg_id, OLD.joined_after_msg_id)
        AND read_members = 0 AND delivered_members = 0 AND joined_members = 0;
END;
