//! Queries on `groups`: the row and its lock, the per-group message counter, activity.

use diesel::prelude::*;
use std::collections::HashMap;

use super::access::{LockedRow, Membership, MEMBERSHIP_COLUMNS};
use crate::db::engine::raw_sql::RawSql;
use crate::db::models::GroupRow;
use crate::db::AnyConnection;
use crate::domain::{GroupId, MsgId};
use crate::schema::groups;

pub fn find_group(conn: &mut AnyConnection, group_id: GroupId) -> QueryResult<Option<GroupRow>> {
    groups::table
        .find(group_id)
        .select(GroupRow::as_select())
        .first(conn)
        .optional()
}

/// Hands out the group's next message id. The update takes the group's row lock on
/// PostgreSQL, so concurrent senders to one group queue here and ids commit in order with no
/// gaps: a transaction that rolls back also rolls back its increment.
pub fn allocate_msg_id(conn: &mut AnyConnection, group_id: GroupId) -> QueryResult<i64> {
    #[derive(diesel::QueryableByName)]
    struct Allocated {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        last_msg_id: i64,
    }
    // Kept prepared: diesel's own UPDATE is prepared anew on every call.
    let allocated: Vec<Allocated> = RawSql::default()
        .sql("UPDATE groups SET last_msg_id = last_msg_id + 1 WHERE group_id = ")
        .int(group_id)
        .sql(" RETURNING last_msg_id")
        .keep_prepared()
        .load(conn)?;
    allocated
        .into_iter()
        .next()
        .map(|row| row.last_msg_id)
        .ok_or(diesel::result::Error::NotFound)
}

/// Records that the group had a message at `at` (its place in the chat list); never moves the
/// time back.
pub fn touch_activity(
    conn: &mut AnyConnection,
    group_id: GroupId,
    at: chrono::NaiveDateTime,
) -> QueryResult<()> {
    RawSql::default()
        .sql("UPDATE groups SET last_activity_at = ")
        .time(at)
        .sql(" WHERE group_id = ")
        .int(group_id)
        .sql(" AND last_activity_at < ")
        .time(at)
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}

/// Records entries appended through `last_msg_id` under the group's row lock (taken by
/// [`lock_group`]): the group's counter, and, when they include a message, its last activity
/// at `activity` (its place in the chat list), never moved back. `writes_before` (other
/// tables' rows of the same append) go in the same round trip where the engine allows.
pub fn record_appended(
    conn: &mut AnyConnection,
    group_id: GroupId,
    last_msg_id: MsgId,
    activity: Option<chrono::NaiveDateTime>,
    writes_before: Vec<RawSql>,
) -> QueryResult<()> {
    let query = RawSql::default()
        .sql("UPDATE groups SET last_msg_id = ")
        .int(last_msg_id.0);
    let query = match activity {
        Some(at) => query
            .sql(", last_activity_at = CASE WHEN last_activity_at < ")
            .time(at)
            .sql(" THEN ")
            .time(at)
            .sql(" ELSE last_activity_at END"),
        None => query,
    };
    query
        .sql(" WHERE group_id = ")
        .int(group_id.0)
        .keep_prepared()
        .execute_after(writes_before, conn)
        .map(|_| ())
}

/// Locks a group's row for a write to its log (see [`lock_group`]) and reads the
/// memberships of `user_ids` in it, by user, for a write that decides from them: on
/// PostgreSQL each found membership row is locked too, after the group's row and in user
/// order, so it is read as it is now and stays so until the write is done. One round trip
/// when any of them is a member; a user without a row is not a member. None when the group
/// does not exist. SQLite has one writer: the group's lock, then the rows as they are.
///
/// Only a writer that takes the group's row may lock this way; one that does not (an ack)
/// locks members with [`super::access::lock_memberships`], or it could wait in a cycle
/// with a sender.
pub fn lock_group_and_members(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_ids: &[&str],
) -> QueryResult<Option<LockedWithMembers>> {
    let mut user_ids = user_ids.to_vec();
    user_ids.sort_unstable();
    user_ids.dedup();
    // The group's row comes first in FROM, so on PostgreSQL each row of the join locks it
    // before the member's: the order every writer of the group takes them in.
    let members_query = |locking: &str| {
        RawSql::default()
            .sql(&format!(
                "SELECT {MEMBERSHIP_COLUMNS} FROM groups g JOIN group_members m \
                 ON m.group_id = g.group_id WHERE g.group_id = "
            ))
            .int(group_id)
            .sql(" AND m.group_id = ")
            .int(group_id)
            .sql(" AND m.user_id")
            .in_texts(&user_ids)
            .sql(&format!(" ORDER BY m.user_id{locking}"))
            .keep_prepared()
    };
    let (locked, found) = match conn {
        AnyConnection::Postgresql(_) => {
            let found: Vec<LockedRow> = members_query(" FOR NO KEY UPDATE").load(conn)?;
            match found.first() {
                Some(row) => (LockedGroup::of(&row.group), found),
                // None of them a member: the group's row alone.
                None => match lock_group(conn, group_id) {
                    Err(diesel::result::Error::NotFound) => return Ok(None),
                    other => (other?, found),
                },
            }
        }
        AnyConnection::Sqlite(_) => {
            let locked = match lock_group(conn, group_id) {
                Err(diesel::result::Error::NotFound) => return Ok(None),
                other => other?,
            };
            (locked, members_query("").load(conn)?)
        }
    };
    let members = found
        .into_iter()
        .map(|LockedRow { group, member }| (member.user_id.clone(), Membership { group, member }))
        .collect();
    Ok(Some(LockedWithMembers {
        group: locked,
        members,
    }))
}

/// What [`lock_group_and_members`] read under the locks.
#[derive(Debug)]
pub struct LockedWithMembers {
    pub group: LockedGroup,
    /// The memberships found, by user; a user without one is not a member.
    pub members: HashMap<String, Membership>,
}

/// The group's last message id and member count, read while holding its row lock
/// (PostgreSQL) until the transaction ends: members added now join exactly after the last
/// committed message, and no other change of membership can slip between the count and the
/// caller's own.
pub fn lock_group(conn: &mut AnyConnection, group_id: GroupId) -> QueryResult<LockedGroup> {
    #[derive(diesel::QueryableByName)]
    struct Locked {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        last_msg_id: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        member_count: i64,
    }
    // PostgreSQL locks the row as an update of non-key columns would, without writing a new
    // version of it (the append updates the row once, at its end). SQLite has no row locks
    // and no SELECT … FOR UPDATE: a write that changes nothing makes the transaction the
    // writer. Kept prepared: every send runs it.
    let query = match conn {
        AnyConnection::Postgresql(_) => RawSql::default()
            .sql("SELECT last_msg_id, member_count FROM groups WHERE group_id = ")
            .int(group_id)
            .sql(" FOR NO KEY UPDATE"),
        AnyConnection::Sqlite(_) => RawSql::default()
            .sql("UPDATE groups SET last_msg_id = last_msg_id WHERE group_id = ")
            .int(group_id)
            .sql(" RETURNING last_msg_id, member_count"),
    };
    let locked: Vec<Locked> = query.keep_prepared().load(conn)?;
    let locked = locked
        .into_iter()
        .next()
        .ok_or(diesel::result::Error::NotFound)?;
    Ok(LockedGroup {
        last_msg_id: locked.last_msg_id,
        member_count: locked.member_count,
    })
}

/// What [`lock_group`] read under the lock.
#[derive(Debug, Clone, Copy)]
pub struct LockedGroup {
    pub last_msg_id: i64,
    pub member_count: i64,
}

impl LockedGroup {
    /// The figures of a group's row read under its lock.
    pub fn of(group: &GroupRow) -> LockedGroup {
        LockedGroup {
            last_msg_id: group.last_msg_id,
            member_count: group.member_count,
        }
    }
}
