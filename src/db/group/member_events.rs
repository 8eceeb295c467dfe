//! Rows of `member_events`: changes to a user's own membership state (their read cursor moved,
//! they joined or left a group), which the user's other devices learn of through `/v1/sync`.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::member_cursors::receipts::delete_oldest_before;
use crate::db::models::now_utc;
use crate::db::AnyConnection;
use crate::domain::DeviceId;
use crate::domain::GroupId;
use crate::schema::member_events;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberEventKind {
    Read,
    Joined,
    Left,
}

impl MemberEventKind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            MemberEventKind::Read => "read",
            MemberEventKind::Joined => "joined",
            MemberEventKind::Left => "left",
        }
    }
}

/// Who caused a member event: one of the user's devices, or something else.
#[derive(Debug, Clone, Copy)]
pub enum Cause<'a> {
    /// A device of the user (None: their default device). Its own polls skip the event.
    Device(Option<&'a DeviceId>),
    /// The group's owner or the service (joins, removals, messages expiring): no poll of the
    /// user skips it. Stored as a value no device id can take.
    NotTheUser,
}

impl<'a> Cause<'a> {
    fn column(self) -> &'a str {
        match self {
            Cause::Device(device) => device_column(device),
            Cause::NotTheUser => "#",
        }
    }
}

/// The device column's value: '' for the default device.
pub fn device_column(device: Option<&DeviceId>) -> &str {
    device.map_or("", DeviceId::as_str)
}

#[derive(Insertable)]
#[diesel(table_name = member_events)]
struct NewMemberEvent<'a> {
    user_id: &'a str,
    group_id: i64,
    kind: &'a str,
    device_id: &'a str,
    created_at: NaiveDateTime,
}

/// Records one change for `users` in the group.
pub fn record_member_events(
    conn: &mut AnyConnection,
    group_id: GroupId,
    users: &[&str],
    kind: MemberEventKind,
    cause: Cause<'_>,
) -> QueryResult<()> {
    let pairs: Vec<(i64, &str)> = users.iter().map(|&user_id| (group_id.0, user_id)).collect();
    insert_events(conn, &pairs, kind, cause)
}

/// Records that each (group, user, device) of `reads` read in the group from that device
/// (None: the user's default device): their other devices hear of it.
pub fn record_reads(
    conn: &mut AnyConnection,
    reads: &[(i64, &str, Option<&DeviceId>)],
) -> QueryResult<()> {
    let rows: Vec<(i64, &str, &str)> = reads
        .iter()
        .map(|&(group_id, user_id, device)| (group_id, user_id, Cause::Device(device).column()))
        .collect();
    for statement in insert_statements(&rows, MemberEventKind::Read) {
        statement.execute(conn)?;
    }
    Ok(())
}

/// The statements [`record_reads`] runs (none for no reads), for a caller that runs them
/// beside others.
pub fn reads_statements(reads: &[(i64, &str, Option<&DeviceId>)]) -> Vec<RawSql> {
    let rows: Vec<(i64, &str, &str)> = reads
        .iter()
        .map(|&(group_id, user_id, device)| (group_id, user_id, Cause::Device(device).column()))
        .collect();
    insert_statements(&rows, MemberEventKind::Read)
}

fn insert_events(
    conn: &mut AnyConnection,
    pairs: &[(i64, &str)],
    kind: MemberEventKind,
    cause: Cause<'_>,
) -> QueryResult<()> {
    let device_id = cause.column();
    let rows: Vec<(i64, &str, &str)> = pairs
        .iter()
        .map(|&(group_id, user_id)| (group_id, user_id, device_id))
        .collect();
    insert_rows(conn, &rows, kind)
}

/// Events of one kind, each (group, user, device column).
fn insert_rows(
    conn: &mut AnyConnection,
    events: &[(i64, &str, &str)],
    kind: MemberEventKind,
) -> QueryResult<()> {
    for statement in insert_statements(events, kind) {
        statement.execute(conn)?;
    }
    Ok(())
}

/// The statements that insert `events` of one kind.
fn insert_statements(events: &[(i64, &str, &str)], kind: MemberEventKind) -> Vec<RawSql> {
    let now = now_utc();
    events
        .chunks(500)
        .map(|chunk| {
            let rows: Vec<Vec<Value<'_>>> = chunk
                .iter()
                .map(|&(group_id, user_id, device_id)| {
                    vec![
                        Value::Int(group_id),
                        Value::Text(user_id),
                        Value::Text(device_id),
                    ]
                })
                .collect();
            // Kept prepared: on PostgreSQL the text is the same for any number of rows, on
            // SQLite for one (an ack of one group).
            RawSql::default()
                .sql(
                    "INSERT INTO member_events (user_id, group_id, kind, device_id, created_at) \
                     SELECT t.u, t.g, ",
                )
                .text(kind.as_str())
                .sql(", t.d, ")
                .time(now)
                .sql(" FROM ")
                .rows("t", &["g", "u", "d"], &rows)
                .keep_prepared()
        })
        .collect()
}

/// Deletes up to `batch` member events older than `cutoff` (they live as long as receipt
/// changes, the age at which long-poll cursors expire); returns how many went.
pub fn delete_member_events_before(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    delete_oldest_before(conn, "member_events", cutoff, batch)
}
