-- Groups of many members: a kept member count, and the cursor indexes that let receipt counts
-- read a range of an index instead of every membership row.

ALTER TABLE groups ADD COLUMN member_count BIGINT NOT NULL DEFAULT 0;
UPDATE groups SET member_count =
    (SELECT count(*) FROM group_members m WHERE m.group_id = groups.group_id);

-- The count moves with the rows, once per statement: adding a thousand members updates the
-- group's row once, not a thousand times.
CREATE FUNCTION group_members_counted_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE groups g SET member_count = g.member_count + a.n
    FROM (SELECT group_id, count(*) AS n FROM added GROUP BY group_id) a
    WHERE g.group_id = a.group_id;
    RETURN NULL;
END $$;

CREATE FUNCTION group_members_counted_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE groups g SET member_count = g.member_count - r.n
    FROM (SELECT group_id, count(*) AS n FROM removed GROUP BY group_id) r
    WHERE g.group_id = r.group_id;
    RETURN NULL;
END $$;

CREATE TRIGGER group_members_count_added AFTER INSERT ON group_members
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT
    EXECUTE FUNCTION group_members_counted_in();
CREATE TRIGGER group_members_count_removed AFTER DELETE ON group_members
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
    EXECUTE FUNCTION group_members_counted_out();

-- Receipt counts subtract the members who joined after a message from those whose cursor
-- reached it, which is right only because a member's cursors start where they joined.
ALTER TABLE group_members ADD CONSTRAINT group_members_cursors_from_join
    CHECK (last_read_msg_id >= joined_after_msg_id AND delivered_msg_id >= joined_after_msg_id);

CREATE INDEX group_members_by_read ON group_members (group_id, last_read_msg_id);
CREATE INDEX group_members_by_delivered ON group_members (group_id, delivered_msg_id);
CREATE INDEX group_members_by_joined ON group_members (group_id, joined_after_msg_id);
