//! A group and its members: the group row and its lock, creation and renaming, the one
//! membership check, membership changes with their system lines, the cursors that follow a
//! member's own entries, each user's list of groups, and the member events a user's other
//! devices read.

pub mod access;
pub mod group_lifecycle;
pub mod groups;
pub mod member_events;
pub mod members;
pub(super) mod own_entries;
pub mod system_lines;
pub mod user_groups;
