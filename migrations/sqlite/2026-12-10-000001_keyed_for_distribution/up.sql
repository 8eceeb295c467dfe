-- The member count and the histogram of cursors are written by the statements that add,
-- move or remove members (in Rust, as on PostgreSQL), not by triggers.
DROP TRIGGER group_members_count_added;
DROP TRIGGER group_members_count_removed;
DROP TRIGGER group_members_cursors_added;
DROP TRIGGER group_members_read_moved;
DROP TRIGGER group_members_delivered_moved;
DROP TRIGGER group_members_joined_moved;
DROP TRIGGER group_members_cursors_removed;
