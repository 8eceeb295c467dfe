-- Receipt counts from a histogram of the members' cursors instead of a range of an index:
-- for each group and message id, how many members have their read cursor, their delivered
-- cursor and their join point exactly there. "How many members have read message m" is then
-- the sum of the rows at or above m: as many rows as distinct cursor values there, however
-- many members share them.
CREATE TABLE cursor_counts (
    group_id          BIGINT NOT NULL,
    msg_id            BIGINT NOT NULL,
    read_members      BIGINT NOT NULL,
    delivered_members BIGINT NOT NULL,
    joined_members    BIGINT NOT NULL,
    PRIMARY KEY (group_id, msg_id)
);
-- The rows no member's cursor is at any more, which the folding job deletes after each fold:
-- a row per message ever read would otherwise pile up.
CREATE INDEX cursor_counts_emptied ON cursor_counts (group_id, msg_id)
    WHERE read_members = 0 AND delivered_members = 0 AND joined_members = 0;

-- Writes do not update the histogram: its row at the newest message is the one every ack and
-- every send of the group moves a cursor to, and a transaction that updated it would hold it
-- until its commit, so acks and sends of one group would wait for each other (and for
-- whatever those transactions wait for). Instead every write that moves, adds or removes
-- cursors appends its moves here (+1 where a cursor now is, -1 where it was), which takes no
-- shared lock, and a background job of every instance folds them into cursor_counts in
-- short transactions of its own. A count reads both, so it is exact at any moment.
CREATE TABLE cursor_moves (
    group_id          BIGINT NOT NULL,
    msg_id            BIGINT NOT NULL,
    read_members      BIGINT NOT NULL,
    delivered_members BIGINT NOT NULL,
    joined_members    BIGINT NOT NULL
);
CREATE INDEX cursor_moves_by_place ON cursor_moves (group_id, msg_id);
-- No key: a fold takes any rows. Logical replication (a way to move the database) needs a
-- replica identity to carry the fold's deletes; with none it would refuse them.
ALTER TABLE cursor_moves REPLICA IDENTITY FULL;

-- Members come and go in bulk (a thousand per request): those statements append their moves
-- summed per place, once per statement. Cursors move one member at a time or a few (an ack,
-- a send, a shared statement of acks): a row trigger appends plain rows, cheaper per row than
-- a statement trigger's transition tables, and a cursor update that moves nothing does not
-- call it at all. The fold sums them either way.
CREATE FUNCTION group_members_cursors_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cursor_moves
    SELECT group_id, msg_id, sum(r), sum(d), sum(j)
    FROM added,
         LATERAL (VALUES (last_read_msg_id, 1, 0, 0), (delivered_msg_id, 0, 1, 0),
                         (joined_after_msg_id, 0, 0, 1)) AS m(msg_id, r, d, j)
    GROUP BY group_id, msg_id;
    RETURN NULL;
END $$;

CREATE FUNCTION group_members_cursors_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cursor_moves
    SELECT group_id, msg_id, sum(r), sum(d), sum(j)
    FROM removed,
         LATERAL (VALUES (last_read_msg_id, -1, 0, 0), (delivered_msg_id, 0, -1, 0),
                         (joined_after_msg_id, 0, 0, -1)) AS m(msg_id, r, d, j)
    GROUP BY group_id, msg_id;
    RETURN NULL;
END $$;

-- A move counts the row in as it is now and out as it was. The read and delivered cursors
-- usually move together (a send, an ack of everything): then one row at each end says so.
CREATE FUNCTION group_members_cursors_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.last_read_msg_id = NEW.delivered_msg_id
       AND OLD.last_read_msg_id = OLD.delivered_msg_id THEN
        INSERT INTO cursor_moves VALUES (NEW.group_id, NEW.last_read_msg_id, 1, 1, 0),
                                        (OLD.group_id, OLD.last_read_msg_id, -1, -1, 0);
    ELSE
        INSERT INTO cursor_moves VALUES (NEW.group_id, NEW.last_read_msg_id, 1, 0, 0),
                                        (OLD.group_id, OLD.last_read_msg_id, -1, 0, 0),
                                        (NEW.group_id, NEW.delivered_msg_id, 0, 1, 0),
                                        (OLD.group_id, OLD.delivered_msg_id, 0, -1, 0);
    END IF;
    IF NEW.joined_after_msg_id <> OLD.joined_after_msg_id THEN
        INSERT INTO cursor_moves VALUES (NEW.group_id, NEW.joined_after_msg_id, 0, 0, 1),
                                        (OLD.group_id, OLD.joined_after_msg_id, 0, 0, -1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER group_members_cursors_added AFTER INSERT ON group_members
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT
    EXECUTE FUNCTION group_members_cursors_added();
CREATE TRIGGER group_members_cursors_moved AFTER UPDATE ON group_members
    FOR EACH ROW WHEN (NEW.last_read_msg_id <> OLD.last_read_msg_id
                       OR NEW.delivered_msg_id <> OLD.delivered_msg_id
                       OR NEW.joined_after_msg_id <> OLD.joined_after_msg_id)
    EXECUTE FUNCTION group_members_cursors_moved();
CREATE TRIGGER group_members_cursors_removed AFTER DELETE ON group_members
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
    EXECUTE FUNCTION group_members_cursors_removed();

INSERT INTO cursor_counts (group_id, msg_id, read_members, delivered_members, joined_members)
SELECT group_id, msg_id, sum(r), sum(d), sum(j)
FROM group_members,
     LATERAL (VALUES (last_read_msg_id, 1, 0, 0), (delivered_msg_id, 0, 1, 0),
                     (joined_after_msg_id, 0, 0, 1)) AS m(msg_id, r, d, j)
GROUP BY group_id, msg_id;

-- Nothing else reads a range of these: without them a cursor move changes no indexed
-- column, and PostgreSQL updates the row in place (a HOT update) again.
DROP INDEX group_members_by_read;
DROP INDEX group_members_by_delivered;
DROP INDEX group_members_by_joined;
