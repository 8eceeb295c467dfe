//! Queries on `devices` and `device_cursors`: a user's named devices and what each received.
//!
//! A request that names no device uses the member's default device, whose delivered cursor is
//! `group_members.last_ack_msg_id`. A named device keeps its own delivered cursor per group in
//! `device_cursors`, created by its first ack there; without a row it has received nothing of
//! the group (it starts where the member joined). The read cursor is the user's, on every
//! device.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::BigInt;

use super::push_targets::{delete_push_target, forget_what_devices_were_told};
use crate::db::engine::raw_sql::RawSql;
use crate::db::models::now_utc;
use crate::db::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::on_engine;
use crate::schema::{device_cursors, devices};

/// How stale `last_seen_at` may get before a request refreshes it: a read costs no write most
/// of the time, and idle-device expiry (days) needs no finer clock.
pub const LAST_SEEN_GRANULARITY_SECS: i64 = 15 * 60;

#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = devices)]
pub struct DeviceRow {
    pub device_id: String,
    pub user_id: String,
    pub created_at: NaiveDateTime,
    pub last_seen_at: NaiveDateTime,
    pub removed_at: Option<NaiveDateTime>,
    pub tokens_refused_until: Option<NaiveDateTime>,
}

/// Whether a token naming a device may be used, decided by [`check_device`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceStanding {
    /// Known and seen recently: nothing to write.
    Current,
    /// New, signed in again after a sign-out, or not seen for a while: [`touch_device`] records it.
    NeedsTouch,
    /// The device belongs to another user.
    OtherUser,
    /// The user signed the device out after this token was issued.
    SignedOut,
}

/// Decides a device token's standing from the device's row; `issued_at` is the token's `iat`.
pub fn check_device(
    conn: &mut AnyConnection,
    device: &DeviceId,
    user_id: &str,
    issued_at: i64,
) -> QueryResult<DeviceStanding> {
    let row = devices::table
        .find(device.as_str())
        .select(DeviceRow::as_select())
        .first(conn)
        .optional()?;
    Ok(standing(row.as_ref(), user_id, issued_at, now_utc()))
}

fn standing(
    row: Option<&DeviceRow>,
    user_id: &str,
    issued_at: i64,
    now: NaiveDateTime,
) -> DeviceStanding {
    let Some(row) = row else {
        return DeviceStanding::NeedsTouch;
    };
    if row.user_id != user_id {
        return DeviceStanding::OtherUser;
    }
    let refused = row
        .tokens_refused_until
        .is_some_and(|until| issued_at <= until.and_utc().timestamp());
    if refused {
        return DeviceStanding::SignedOut;
    }
    match row.removed_at {
        // Signed in again since the sign-out: the touch revives it.
        Some(_) => DeviceStanding::NeedsTouch,
        None if (now - row.last_seen_at).num_seconds() >= LAST_SEEN_GRANULARITY_SECS => {
            DeviceStanding::NeedsTouch
        }
        None => DeviceStanding::Current,
    }
}

#[derive(Insertable)]
#[diesel(table_name = devices)]
struct NewDevice<'a> {
    device_id: &'a str,
    user_id: &'a str,
    created_at: NaiveDateTime,
    last_seen_at: NaiveDateTime,
}

/// Records that the user's device was seen now, creating it on first use and reviving it after
/// a sign-out; then decides again (two users racing for one new id: one of them wins).
pub fn touch_device(
    conn: &mut AnyConnection,
    device: &DeviceId,
    user_id: &str,
    issued_at: i64,
) -> QueryResult<DeviceStanding> {
    let now = now_utc();
    let new = NewDevice {
        device_id: device.as_str(),
        user_id,
        created_at: now,
        last_seen_at: now,
    };
    on_engine!(conn, |c| diesel::insert_into(devices::table)
        .values(&new)
        .on_conflict_do_nothing()
        .execute(c))?;
    let row = devices::table
        .find(device.as_str())
        .select(DeviceRow::as_select())
        .first(conn)?;
    let standing = standing(Some(&row), user_id, issued_at, now);
    if standing == DeviceStanding::NeedsTouch {
        diesel::update(devices::table.find(device.as_str()))
            .set((
                devices::last_seen_at.eq(now),
                devices::removed_at.eq(None::<NaiveDateTime>),
            ))
            .execute(conn)?;
        return Ok(DeviceStanding::Current);
    }
    Ok(standing)
}

/// The user's devices that are signed in, oldest first.
pub fn list_devices(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Vec<DeviceRow>> {
    devices::table
        .filter(devices::user_id.eq(user_id))
        .filter(devices::removed_at.is_null())
        .order((devices::created_at.asc(), devices::device_id.asc()))
        .select(DeviceRow::as_select())
        .load(conn)
}

/// Signs a device out: its cursors and push target are forgotten and tokens issued until now
/// are refused. False when the user has no such signed-in device.
pub fn remove_device(
    conn: &mut AnyConnection,
    user_id: &str,
    device_id: &str,
) -> QueryResult<bool> {
    let now = now_utc();
    let removed = diesel::update(
        devices::table
            .filter(devices::device_id.eq(device_id))
            .filter(devices::user_id.eq(user_id))
            .filter(devices::removed_at.is_null()),
    )
    .set((
        devices::removed_at.eq(Some(now)),
        devices::tokens_refused_until.eq(Some(now)),
    ))
    .execute(conn)?;
    if removed == 0 {
        return Ok(false);
    }
    diesel::delete(device_cursors::table.filter(device_cursors::device_id.eq(device_id)))
        .execute(conn)?;
    delete_push_target(conn, device_id)?;
    Ok(true)
}

/// Forgets up to `batch` devices: signed-in ones unused since `idle_cutoff`, and signed-out
/// ones removed before it (their tokens are refused until then). Their cursors and what
/// pushes told them go with them, and their push targets (through the foreign key).
pub fn forget_devices_before(
    conn: &mut AnyConnection,
    idle_cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    let expired: Vec<String> = devices::table
        .filter(
            devices::removed_at
                .is_null()
                .and(devices::last_seen_at.lt(idle_cutoff))
                .or(devices::removed_at.lt(idle_cutoff)),
        )
        .select(devices::device_id)
        .limit(batch)
        .load(conn)?;
    if expired.is_empty() {
        return Ok(0);
    }
    diesel::delete(device_cursors::table.filter(device_cursors::device_id.eq_any(&expired)))
        .execute(conn)?;
    let expired_ids: Vec<&str> = expired.iter().map(String::as_str).collect();
    forget_what_devices_were_told(conn, &expired_ids)?;
    diesel::delete(devices::table.filter(devices::device_id.eq_any(&expired))).execute(conn)
}

/// A named device's delivered cursor in a group, if it ever acked there.
pub fn device_ack(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_id: &str,
    device: &DeviceId,
) -> QueryResult<Option<i64>> {
    device_cursors::table
        .find((group_id.0, user_id, device.as_str()))
        .select(device_cursors::last_ack_msg_id)
        .first(conn)
        .optional()
}

/// Named devices' delivered cursors, each (group, user, device), by triple; a triple whose
/// device never acked in the group is missing.
pub fn device_acks(
    conn: &mut AnyConnection,
    triples: &[(i64, &str, &DeviceId)],
) -> QueryResult<HashMap<(i64, String, String), i64>> {
    if triples.is_empty() {
        return Ok(HashMap::new());
    }
    if let [(group_id, user_id, device)] = *triples {
        // One by key: a fixed text both engines keep prepared.
        let acked = device_ack(conn, GroupId(group_id), user_id, device)?;
        let key = (group_id, user_id.to_owned(), device.as_str().to_owned());
        return Ok(acked.map(|a| (key, a)).into_iter().collect());
    }
    let group_ids: Vec<i64> = triples.iter().map(|t| t.0).collect();
    let user_ids: Vec<&str> = triples.iter().map(|t| t.1).collect();
    let device_ids: Vec<&str> = triples.iter().map(|t| t.2.as_str()).collect();
    let found: Vec<(i64, String, String, i64)> = device_cursors::table
        .filter(device_cursors::group_id.eq_any(&group_ids))
        .filter(device_cursors::user_id.eq_any(&user_ids))
        .filter(device_cursors::device_id.eq_any(&device_ids))
        .select((
            device_cursors::group_id,
            device_cursors::user_id,
            device_cursors::device_id,
            device_cursors::last_ack_msg_id,
        ))
        .load(conn)?;
    // The lists match every group with every user and device: only exact triples count.
    Ok(found
        .into_iter()
        .filter(|(g, u, d, _)| {
            triples
                .iter()
                .any(|t| t.0 == *g && t.1 == u && t.2.as_str() == d)
        })
        .map(|(g, u, d, acked)| ((g, u, d), acked))
        .collect())
}

#[derive(QueryableByName)]
struct AckedTo {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    user_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    device_id: String,
    #[diesel(sql_type = BigInt)]
    last_ack_msg_id: i64,
}

/// What an insert into `device_cursors` does with a row that exists: moves its cursor
/// forward, never backwards.
pub(super) const DEVICE_CURSOR_FORWARD: &str = " ON CONFLICT (group_id, user_id, device_id) \
     DO UPDATE SET last_ack_msg_id = \
       CASE WHEN device_cursors.last_ack_msg_id < excluded.last_ack_msg_id \
            THEN excluded.last_ack_msg_id ELSE device_cursors.last_ack_msg_id END";

/// Moves named devices' delivered cursors, each (group, user, device) to at least the given
/// id, creating the row on a device's first ack in the group; never backwards. One
/// statement; rows are written (and on PostgreSQL locked) in the order of `moves`. Returns
/// each cursor after the move, by triple.
pub fn advance_devices(
    conn: &mut AnyConnection,
    moves: &[(i64, &str, &DeviceId, MsgId)],
) -> QueryResult<HashMap<(i64, String, String), i64>> {
    if moves.is_empty() {
        return Ok(HashMap::new());
    }
    let mut query = RawSql::default()
        .sql("INSERT INTO device_cursors (group_id, user_id, device_id, last_ack_msg_id) VALUES ");
    for (i, (group_id, user_id, device, ack_to)) in moves.iter().enumerate() {
        query = query
            .sql(if i == 0 { "(" } else { ", (" })
            .int(*group_id)
            .sql(", ")
            .text(user_id)
            .sql(", ")
            .text(device.as_str())
            .sql(", ")
            .int(ack_to.0)
            .sql(")");
    }
    let acked: Vec<AckedTo> = query
        .sql(DEVICE_CURSOR_FORWARD)
        .sql(" RETURNING group_id, user_id, device_id, last_ack_msg_id")
        .load(conn)?;
    Ok(acked
        .into_iter()
        .map(|row| {
            (
                (row.group_id, row.user_id, row.device_id),
                row.last_ack_msg_id,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(user: &str, seen_secs_ago: i64, removed_secs_ago: Option<i64>) -> DeviceRow {
        let now = now_utc();
        DeviceRow {
            device_id: "d".into(),
            user_id: user.into(),
            created_at: now,
            last_seen_at: now - chrono::Duration::seconds(seen_secs_ago),
            removed_at: removed_secs_ago.map(|s| now - chrono::Duration::seconds(s)),
            tokens_refused_until: removed_secs_ago.map(|s| now - chrono::Duration::seconds(s)),
        }
    }

    #[test]
    fn standing_follows_owner_sign_out_and_staleness() {
        let now = now_utc();
        let issued_long_ago = now.and_utc().timestamp() - 3600;
        let issued_now = now.and_utc().timestamp() + 1;
        assert_eq!(standing(None, "a", 0, now), DeviceStanding::NeedsTouch);
        assert_eq!(
            standing(Some(&row("b", 0, None)), "a", 0, now),
            DeviceStanding::OtherUser
        );
        assert_eq!(
            standing(Some(&row("a", 10, None)), "a", 0, now),
            DeviceStanding::Current
        );
        assert_eq!(
            standing(
                Some(&row("a", LAST_SEEN_GRANULARITY_SECS + 1, None)),
                "a",
                0,
                now
            ),
            DeviceStanding::NeedsTouch
        );
        let signed_out = row("a", 600, Some(60));
        assert_eq!(
            standing(Some(&signed_out), "a", issued_long_ago, now),
            DeviceStanding::SignedOut
        );
        assert_eq!(
            standing(Some(&signed_out), "a", issued_now, now),
            DeviceStanding::NeedsTouch,
            "a token issued after the sign-out signs the device in again"
        );
    }
}
