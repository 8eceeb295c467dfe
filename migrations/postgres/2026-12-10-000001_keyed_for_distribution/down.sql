DROP INDEX push_group_state_by_device;
ALTER TABLE push_group_state DROP CONSTRAINT push_group_state_pkey;
ALTER TABLE push_group_state ADD CONSTRAINT push_group_state_pkey PRIMARY KEY (device_id, group_id);
DELETE FROM push_group_state ps WHERE NOT EXISTS
    (SELECT 1 FROM push_targets pt WHERE pt.device_id = ps.device_id);
ALTER TABLE push_group_state ADD CONSTRAINT push_group_state_device_id_fkey
    FOREIGN KEY (device_id) REFERENCES push_targets (device_id) ON DELETE CASCADE;
DELETE FROM device_cursors dc WHERE NOT EXISTS
    (SELECT 1 FROM devices d WHERE d.device_id = dc.device_id);
ALTER TABLE device_cursors ADD CONSTRAINT device_cursors_device_id_fkey
    FOREIGN KEY (device_id) REFERENCES devices (device_id) ON DELETE CASCADE;

ALTER TABLE member_events DROP CONSTRAINT member_events_pkey;
ALTER TABLE member_events ADD CONSTRAINT member_events_pkey PRIMARY KEY (id);
ALTER TABLE receipt_events DROP CONSTRAINT receipt_events_pkey;
ALTER TABLE receipt_events ADD CONSTRAINT receipt_events_pkey PRIMARY KEY (id);

ALTER TABLE mentions DROP CONSTRAINT mentions_group_id_msg_id_fkey;
ALTER TABLE group_msgs DROP CONSTRAINT group_msgs_pkey;
ALTER TABLE group_msgs ADD CONSTRAINT group_msgs_group_id_msg_id_key UNIQUE (group_id, msg_id);
ALTER TABLE group_msgs ADD CONSTRAINT group_msgs_pkey PRIMARY KEY (id);
ALTER TABLE mentions ADD CONSTRAINT mentions_group_id_msg_id_fkey
    FOREIGN KEY (group_id, msg_id) REFERENCES group_msgs (group_id, msg_id) ON DELETE CASCADE;

-- The triggers as their migrations made them (2026-12-04 large_groups, 2026-12-07 cursor_counts).
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
