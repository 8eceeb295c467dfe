//! The push rule, in one place: when a device with a push target is due a notification for
//! a group, and what it was told.
//!
//! A device is due a notification for a group when either
//! - **new messages:** the group has a message (kind `message`) from someone else above the
//!   device's *position*, created at least the grace period ago. The position is the furthest
//!   of what the device received (its delivered cursor; where the member joined if it never
//!   acked), what its user read (on any device), and what the device was already told of
//!   (`push_group_state.notified_msg_id`); or
//! - **a badge to lower:** the device was told of unread messages in the group and the
//!   group's unread count is lower now (its user read them on another device, or they were
//!   recalled), so the phone must hear its new badge.
//!
//! Nothing here asks whether a device is "online": a device that acked the messages is not due
//! and one that did not is, whatever its user does elsewhere. The fragments below read the
//! current `group_members` and `groups` rows (unaliased, as `unread::unread_sql` needs), the
//! device's `device_cursors` row as `dc` and its `push_group_state` row as `ps`.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

use crate::db::engine::distribution::on_citus;
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::engine::row_locks::{lock_in_order, Busy};
use crate::db::member_cursors::unread::unread_sql;
use crate::db::AnyConnection;
use crate::domain::GroupId;
use crate::schema::group_msgs;

/// The device's position in the group (see the module doc). SQLite's scalar `max` is
/// PostgreSQL's `GREATEST`.
fn position_sql(conn: &AnyConnection) -> String {
    let greatest = match conn {
        AnyConnection::Postgresql(_) => "GREATEST",
        AnyConnection::Sqlite(_) => "MAX",
    };
    format!(
        "{greatest}(COALESCE(dc.last_ack_msg_id, group_members.joined_after_msg_id), \
         group_members.last_read_msg_id, COALESCE(ps.notified_msg_id, 0))"
    )
}

/// Which device the fragments are about.
#[derive(Clone, Copy)]
enum DeviceRef<'a> {
    /// A column of an outer query.
    Column(&'static str),
    /// A bound device id.
    Id(&'a str),
}

impl DeviceRef<'_> {
    fn append(self, query: RawSql) -> RawSql {
        match self {
            DeviceRef::Column(column) => query.sql(column),
            DeviceRef::Id(id) => query.text(id),
        }
    }
}

/// `FROM` the memberships of the device's user, with the device's rows beside them.
fn from_memberships(query: RawSql, device: DeviceRef<'_>) -> RawSql {
    let query = query.sql(
        " FROM group_members JOIN groups ON groups.group_id = group_members.group_id \
          LEFT JOIN device_cursors dc ON dc.group_id = group_members.group_id \
            AND dc.user_id = group_members.user_id AND dc.device_id = ",
    );
    let query = device.append(query).sql(
        " LEFT JOIN push_group_state ps \
            ON ps.group_id = group_members.group_id AND ps.device_id = ",
    );
    device.append(query)
}

/// True when the group has new messages the device is due (see the module doc): messages
/// from others above its position created at or before `grace_cutoff`.
fn new_messages_due(query: RawSql, conn: &AnyConnection, grace_cutoff: NaiveDateTime) -> RawSql {
    let position = position_sql(conn);
    query
        .sql(&format!(
            "(groups.last_msg_id > {position} AND EXISTS (SELECT 1 FROM group_msgs m \
               WHERE m.group_id = group_members.group_id AND m.msg_id > {position} \
                 AND m.kind = 'message' AND m.sender_id <> group_members.user_id \
                 AND m.created_at <= "
        ))
        .time(grace_cutoff)
        .sql("))")
}

/// True when the device was told of more unread messages than the group has now.
fn badge_to_lower() -> String {
    format!(
        "(ps.notified_unread > 0 AND ps.notified_unread > {})",
        unread_sql()
    )
}

/// When the push job may act.
#[derive(Debug, Clone, Copy)]
pub struct Cutoffs {
    /// Messages created at or before this are past the grace period.
    pub grace: NaiveDateTime,
    /// Devices whose last notification was built at or before this may get another.
    pub interval: NaiveDateTime,
}

#[derive(QueryableByName)]
struct DueDevice {
    #[diesel(sql_type = Text)]
    device_id: String,
}

/// Up to `limit` devices due a notification now, that have none being delivered and got their
/// last one at least the interval ago; those waiting longest first. On Citus, see
/// [`due_devices_by_candidate`].
pub fn due_devices(
    conn: &mut AnyConnection,
    cutoffs: Cutoffs,
    limit: i64,
    scan: &mut CandidateScan,
) -> QueryResult<Vec<String>> {
    if on_citus(conn) {
        return due_devices_by_candidate(conn, cutoffs, limit, scan);
    }
    let query = RawSql::default()
        .sql(
            "SELECT pt.device_id AS device_id FROM push_targets pt \
             WHERE pt.pending_key IS NULL \
               AND (pt.last_built_at IS NULL OR pt.last_built_at <= ",
        )
        .time(cutoffs.interval)
        .sql(") AND EXISTS (SELECT 1");
    let query = from_memberships(query, DeviceRef::Column("pt.device_id"))
        .sql(" WHERE group_members.user_id = pt.user_id AND (");
    let query = new_messages_due(query, conn, cutoffs.grace)
        .sql(&format!(
            " OR {}))  ORDER BY COALESCE(pt.last_built_at, pt.registered_at), pt.device_id LIMIT ",
            badge_to_lower()
        ))
        .int(limit);
    let rows: Vec<DueDevice> = query.load(conn)?;
    Ok(rows.into_iter().map(|r| r.device_id).collect())
}

/// Where a scan of push targets for [`due_devices_by_candidate`] goes on: after this device
/// id (None: from the first), wrapping round at the last.
#[derive(Debug, Default, Clone)]
pub struct CandidateScan {
    after: Option<String>,
}

/// Push targets examined per call on Citus: a bound on the round trips one call costs.
const CANDIDATES_PER_CALL: i64 = 200;

/// Citus: push targets live on their devices' shards and memberships on their groups', so no
/// one statement can join them by user. The targets that may get a notification are read
/// first, in device order from where the last call stopped (so every target is examined in
/// turn, however many others are never due), then each is checked by a statement over its
/// user's memberships that names the user and the device, by the same rule.
fn due_devices_by_candidate(
    conn: &mut AnyConnection,
    cutoffs: Cutoffs,
    limit: i64,
    scan: &mut CandidateScan,
) -> QueryResult<Vec<String>> {
    #[derive(QueryableByName)]
    struct Candidate {
        #[diesel(sql_type = Text)]
        device_id: String,
        #[diesel(sql_type = Text)]
        user_id: String,
    }
    let query = RawSql::default()
        .sql(
            "SELECT device_id, user_id FROM push_targets WHERE pending_key IS NULL \
               AND (last_built_at IS NULL OR last_built_at <= ",
        )
        .time(cutoffs.interval)
        .sql(")");
    let query = match &scan.after {
        Some(after) => query.sql(" AND device_id > ").text(after),
        None => query,
    };
    let candidates: Vec<Candidate> = query
        .sql(" ORDER BY device_id LIMIT ")
        .int(CANDIDATES_PER_CALL)
        .load(conn)?;
    let start = scan.after.clone();
    scan.after = match candidates.last() {
        Some(last) if candidates.len() as i64 == CANDIDATES_PER_CALL => {
            Some(last.device_id.clone())
        }
        // The end of the targets: the next call starts from the first again.
        _ => None,
    };
    let mut due = Vec::new();
    let mut examined: Option<String> = None;
    for candidate in candidates {
        if due.len() as i64 >= limit {
            // The rest are examined on a later call: the scan goes on after the last one
            // examined here.
            scan.after = examined.or(start);
            break;
        }
        if device_is_due(
            conn,
            &candidate.device_id,
            &candidate.user_id,
            cutoffs.grace,
        )? {
            due.push(candidate.device_id.clone());
        }
        examined = Some(candidate.device_id);
    }
    Ok(due)
}

/// Whether the user's device is due a notification for any of the user's groups.
fn device_is_due(
    conn: &mut AnyConnection,
    device_id: &str,
    user_id: &str,
    grace_cutoff: NaiveDateTime,
) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Due {
        #[diesel(sql_type = BigInt)]
        #[allow(dead_code)]
        due: i64,
    }
    let query = from_memberships(
        RawSql::default().sql("SELECT CAST(1 AS BIGINT) AS due"),
        DeviceRef::Id(device_id),
    )
    .sql(" WHERE group_members.user_id = ")
    .text(user_id)
    .sql(" AND (");
    let found: Vec<Due> = new_messages_due(query, conn, grace_cutoff)
        .sql(&format!(" OR {}) LIMIT 1", badge_to_lower()))
        .load(conn)?;
    Ok(!found.is_empty())
}

/// One group a notification tells of.
#[derive(QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueGroup {
    #[diesel(sql_type = BigInt)]
    pub group_id: i64,
    #[diesel(sql_type = BigInt)]
    pub last_msg_id: i64,
    /// The user's unread count in the group (as `GET /v1/me/groups` has it).
    #[diesel(sql_type = BigInt)]
    pub unread_count: i64,
    /// 1: new messages are due; 0: only the badge is to be lowered.
    #[diesel(sql_type = BigInt)]
    pub has_new: i64,
}

/// The groups the device is due a notification for, by group id.
pub fn due_groups(
    conn: &mut AnyConnection,
    device_id: &str,
    user_id: &str,
    grace_cutoff: NaiveDateTime,
) -> QueryResult<Vec<DueGroup>> {
    let unread = unread_sql();
    let query = RawSql::default().sql(&format!(
        "SELECT group_id, last_msg_id, \
           CASE WHEN unread_count < 0 THEN 0 ELSE unread_count END AS unread_count, has_new \
         FROM (SELECT group_members.group_id AS group_id, groups.last_msg_id AS last_msg_id, \
                 CAST({unread} AS BIGINT) AS unread_count, \
                 CAST(COALESCE(ps.notified_unread, 0) AS BIGINT) AS notified_unread, \
                 CAST(CASE WHEN "
    ));
    let query =
        new_messages_due(query, conn, grace_cutoff).sql(" THEN 1 ELSE 0 END AS BIGINT) AS has_new");
    from_memberships(query, DeviceRef::Id(device_id))
        .sql(" WHERE group_members.user_id = ")
        .text(user_id)
        .sql(
            ") per_group WHERE has_new = 1 \
               OR (notified_unread > 0 AND notified_unread > unread_count) \
             ORDER BY group_id",
        )
        .load(conn)
}

/// Records what a notification told the device: for groups with new messages, everything up
/// to the group's last message (also those still in their grace period, which its unread
/// count includes); for every group, its unread count.
pub fn mark_told(
    conn: &mut AnyConnection,
    device_id: &str,
    user_id: &str,
    groups: &[DueGroup],
) -> QueryResult<()> {
    for group in groups {
        let told_up_to = if group.has_new == 1 {
            group.last_msg_id
        } else {
            0
        };
        RawSql::default()
            .sql(
                "INSERT INTO push_group_state \
                   (device_id, group_id, user_id, notified_msg_id, notified_unread) VALUES (",
            )
            .text(device_id)
            .sql(", ")
            .int(group.group_id)
            .sql(", ")
            .text(user_id)
            .sql(", ")
            .int(told_up_to)
            .sql(", ")
            .int(group.unread_count)
            .sql(
                ") ON CONFLICT (device_id, group_id) DO UPDATE SET \
                   notified_msg_id = CASE WHEN excluded.notified_msg_id > \
                     push_group_state.notified_msg_id THEN excluded.notified_msg_id \
                     ELSE push_group_state.notified_msg_id END, \
                   notified_unread = excluded.notified_unread",
            )
            .execute(conn)?;
    }
    Ok(())
}

/// PostgreSQL: locks the badge rows of the (group, device) pairs, in (group, device) order,
/// before the unread counts that [`note_reads_on_devices`] writes are counted, and answers
/// the pairs whose badge may be lowered: those whose row it locked. A notification built
/// meanwhile (telling of a message that arrived after the count) then waits and writes after
/// this transaction, instead of being lowered to a count that misses its message, which no
/// later notification would correct. A row that did not exist yet is left to whoever
/// creates it: a notification's count is never below the unread count it was built from,
/// and a count that turns out too high is lowered by the next one. SQLite has one writer:
/// nothing is written between the count and the update, and every badge may be lowered.
pub fn lock_badges(
    conn: &mut AnyConnection,
    pairs: &[(i64, &str)],
) -> QueryResult<Vec<(i64, String)>> {
    let locked = lock_in_order(conn, "push_group_state", "device_id", pairs, Busy::Wait)?;
    Ok(locked.unwrap_or_else(|| {
        pairs
            .iter()
            .map(|&(group_id, device)| (group_id, device.to_owned()))
            .collect()
    }))
}

/// After devices themselves moved their users' read cursors, each (group, device, unread
/// count): a device knows the group's new unread count, so lowering its badge by push would
/// only repeat it. One update, of no row for devices without a push target. Only pairs
/// [`lock_badges`] answered, taken before counting.
pub fn note_reads_on_devices(
    conn: &mut AnyConnection,
    reads: &[(i64, &str, i64)],
) -> QueryResult<()> {
    if reads.is_empty() {
        return Ok(());
    }
    let rows: Vec<Vec<Value<'_>>> = reads
        .iter()
        .map(|&(group_id, device, unread)| {
            vec![
                Value::Int(group_id),
                Value::Text(device),
                Value::Int(unread),
            ]
        })
        .collect();
    RawSql::default()
        .sql("UPDATE push_group_state SET notified_unread = t.unread FROM ")
        .rows("t", &["g", "d", "unread"], &rows)
        .sql(
            " WHERE push_group_state.group_id = t.g AND push_group_state.device_id = t.d \
             AND push_group_state.notified_unread > t.unread",
        )
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}

/// The group's last message from someone other than `user_id`: its sender and text, for a
/// notification that shows content.
pub fn last_message_from_others(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_id: &str,
) -> QueryResult<Option<(String, String)>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id.0))
        .filter(group_msgs::kind.eq("message"))
        .filter(group_msgs::sender_id.ne(user_id))
        .order(group_msgs::msg_id.desc())
        .select((group_msgs::sender_id, group_msgs::content))
        .first(conn)
        .optional()
}
