-- Every table keyed for distribution by the rows' owner, so that Citus (or any sharding by
-- key) can place each write on one shard:
--   * by group_id: groups, group_members, group_msgs, mentions, receipt_events,
--     member_events, cursor_counts, cursor_moves, device_cursors, push_group_state;
--   * by device_id: devices, push_targets;
--   * feed_clock is one small row every node reads.
-- A primary key or unique index must hold the distribution column, and a foreign key or a
-- trigger must not reach rows of another key.

-- The member count and the histogram of cursors are written by the statements that add,
-- move or remove members (in Rust, where the write knows both ends of every move), not by
-- triggers: statement triggers with transition tables do not run on shards, and a trigger on
-- a distributed table runs on a worker that may not own the rows it writes.
DROP TRIGGER group_members_count_added ON group_members;
DROP TRIGGER group_members_count_removed ON group_members;
DROP TRIGGER group_members_cursors_added ON group_members;
DROP TRIGGER group_members_cursors_moved ON group_members;
DROP TRIGGER group_members_cursors_removed ON group_members;
DROP FUNCTION group_members_counted_in();
DROP FUNCTION group_members_counted_out();
DROP FUNCTION group_members_cursors_added();
DROP FUNCTION group_members_cursors_moved();
DROP FUNCTION group_members_cursors_removed();

-- A message's natural key is its key: (group_id, msg_id) was unique already. `id` stays, a
-- plain column, for the order retention deletes in.
ALTER TABLE mentions DROP CONSTRAINT mentions_group_id_msg_id_fkey;
ALTER TABLE group_msgs DROP CONSTRAINT group_msgs_pkey;
ALTER TABLE group_msgs DROP CONSTRAINT group_msgs_group_id_msg_id_key;
ALTER TABLE group_msgs ADD CONSTRAINT group_msgs_pkey PRIMARY KEY (group_id, msg_id);
ALTER TABLE mentions ADD CONSTRAINT mentions_group_id_msg_id_fkey
    FOREIGN KEY (group_id, msg_id) REFERENCES group_msgs (group_id, msg_id) ON DELETE CASCADE;

ALTER TABLE receipt_events DROP CONSTRAINT receipt_events_pkey;
ALTER TABLE receipt_events ADD CONSTRAINT receipt_events_pkey PRIMARY KEY (group_id, id);
ALTER TABLE member_events DROP CONSTRAINT member_events_pkey;
ALTER TABLE member_events ADD CONSTRAINT member_events_pkey PRIMARY KEY (group_id, id);

-- A device's cursor rows and what its pushes told it live with the group they are about;
-- the device's own rows live with the device. Signing a device out or forgetting it deletes
-- its rows in groups itself (src/db/devices.rs, src/db/push_targets.rs).
ALTER TABLE device_cursors DROP CONSTRAINT device_cursors_device_id_fkey;
ALTER TABLE push_group_state DROP CONSTRAINT push_group_state_device_id_fkey;
ALTER TABLE push_group_state DROP CONSTRAINT push_group_state_pkey;
ALTER TABLE push_group_state ADD CONSTRAINT push_group_state_pkey PRIMARY KEY (group_id, device_id);
CREATE INDEX push_group_state_by_device ON push_group_state (device_id);
