-- Receipt counts from a histogram of the members' cursors instead of a range of an index:
-- for each group and message id, how many members have their read cursor, their delivered
-- cursor and their join point exactly there. "How many members have read message m" is then
-- the sum of the rows at or above m: as many rows as distinct cursor values there, however
-- many members share them.
--
-- Triggers keep it: every write that moves, adds or removes a member's cursors (acks, sends,
-- joins, removals) counts itself. SQLite has only row triggers; under its single writer they
-- cost a few row updates each. `INSERT OR REPLACE` into group_members would delete a row
-- without firing its delete trigger (recursive triggers are off): no statement uses it, and
-- none may.
CREATE TABLE cursor_counts (
    group_id          BIGINT NOT NULL,
    msg_id            BIGINT NOT NULL,
    read_members      BIGINT NOT NULL,
    delivered_members BIGINT NOT NULL,
    joined_members    BIGINT NOT NULL,
    PRIMARY KEY (group_id, msg_id)
) WITHOUT ROWID;

CREATE TRIGGER group_members_cursors_added AFTER INSERT ON group_members
BEGIN
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.last_read_msg_id, 1, 0, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET read_members = read_members + 1;
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.delivered_msg_id, 0, 1, 0)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET delivered_members = delivered_members + 1;
    INSERT INTO cursor_counts VALUES (NEW.group_id, NEW.joined_after_msg_id, 0, 0, 1)
        ON CONFLICT (group_id, msg_id) DO UPDATE SET joined_members = joined_members + 1;
END;

-- A move first counts the member where the cursor is now, then uncounts them where it was,
-- then drops that row if no member's cursor is at it any more (a row per message ever read
-- would otherwise pile up).
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

INSERT INTO cursor_counts (group_id, msg_id, read_members, delivered_members, joined_members)
SELECT group_id, msg_id, sum(r), sum(d), sum(j) FROM (
    SELECT group_id, last_read_msg_id AS msg_id, 1 AS r, 0 AS d, 0 AS j FROM group_members
    UNION ALL SELECT group_id, delivered_msg_id, 0, 1, 0 FROM group_members
    UNION ALL SELECT group_id, joined_after_msg_id, 0, 0, 1 FROM group_members
) AS moves
GROUP BY group_id, msg_id;

-- Nothing else reads a range of these; without them a cursor move updates one index less.
DROP INDEX group_members_by_read;
DROP INDEX group_members_by_delivered;
DROP INDEX group_members_by_joined;
