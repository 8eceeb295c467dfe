//! Queries on `push_targets` from requests: a device registers, replaces or removes the token
//! the operator's push service wakes it with. (The outbox columns of the same rows belong to
//! the push job, see `push_outbox`.)

use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::db::models::now_utc;
use crate::db::AnyConnection;
use crate::domain::{DeviceId, PushPlatform, PushToken};
use crate::on_engine;
use crate::schema::{devices, push_group_state, push_targets};

/// A device's registered push target, as its owner may see it (never the token).
#[derive(Debug, Clone)]
pub struct PushTargetView {
    pub device_id: String,
    pub platform: String,
    pub registered_at: NaiveDateTime,
}

/// Why a push target could not be registered or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetRefusal {
    /// The user has no signed-in device of that id. `by_default_device`: the token names no
    /// device either, so the answer says how a device registers.
    NoDevice {
        device_id: String,
        by_default_device: bool,
    },
    /// A push target belongs to the device that registers it, and the caller's token names no
    /// device (the default device cannot be woken: it has no installation to wake).
    DeviceRequired { device_id: String },
    /// The caller's token names another of the user's devices.
    OtherDevice { device_id: String, calling: String },
}

/// Who asks: the user and the device their token names (None: the default device).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub user_id: &'a str,
    pub device: Option<&'a DeviceId>,
}

/// The user's device of that id, if signed in.
fn signed_in(conn: &mut AnyConnection, user_id: &str, device_id: &str) -> QueryResult<bool> {
    let found: i64 = devices::table
        .filter(devices::device_id.eq(device_id))
        .filter(devices::user_id.eq(user_id))
        .filter(devices::removed_at.is_null())
        .count()
        .get_result(conn)?;
    Ok(found > 0)
}

#[derive(Insertable)]
#[diesel(table_name = push_targets)]
struct NewTarget<'a> {
    device_id: &'a str,
    user_id: &'a str,
    platform: &'a str,
    token: &'a str,
    registered_at: NaiveDateTime,
}

/// Registers (or replaces) the calling device's push target. What the device was already told
/// is kept: a new token for the same installation does not repeat old notifications.
pub fn register_push_target(
    conn: &mut AnyConnection,
    caller: Caller<'_>,
    device_id: &str,
    platform: &PushPlatform,
    token: &PushToken,
) -> QueryResult<Result<PushTargetView, TargetRefusal>> {
    let device_id_owned = device_id.to_owned();
    if !signed_in(conn, caller.user_id, device_id)? {
        return Ok(Err(TargetRefusal::NoDevice {
            device_id: device_id_owned,
            by_default_device: caller.device.is_none(),
        }));
    }
    match caller.device {
        None => {
            return Ok(Err(TargetRefusal::DeviceRequired {
                device_id: device_id_owned,
            }))
        }
        Some(calling) if calling.as_str() != device_id => {
            return Ok(Err(TargetRefusal::OtherDevice {
                device_id: device_id_owned,
                calling: calling.as_str().to_owned(),
            }))
        }
        Some(_) => {}
    }
    let now = now_utc();
    let new = NewTarget {
        device_id,
        user_id: caller.user_id,
        platform: platform.as_str(),
        token: token.as_str(),
        registered_at: now,
    };
    on_engine!(conn, |c| diesel::insert_into(push_targets::table)
        .values(&new)
        .on_conflict(push_targets::device_id)
        .do_update()
        .set((
            push_targets::platform.eq(platform.as_str()),
            push_targets::token.eq(token.as_str()),
            push_targets::registered_at.eq(now),
        ))
        .execute(c))?;
    Ok(Ok(PushTargetView {
        device_id: device_id_owned,
        platform: platform.as_str().to_owned(),
        registered_at: now,
    }))
}

/// Removes a device's push target (any of the user's tokens may): the device is not woken
/// any more, and a notification still being delivered to it is dropped.
pub fn remove_push_target(
    conn: &mut AnyConnection,
    user_id: &str,
    device_id: &str,
) -> QueryResult<Result<(), TargetRefusal>> {
    if !signed_in(conn, user_id, device_id)? {
        return Ok(Err(TargetRefusal::NoDevice {
            device_id: device_id.to_owned(),
            by_default_device: false,
        }));
    }
    delete_push_target(conn, device_id)?;
    Ok(Ok(()))
}

/// Deletes the device's push target and what it was told (its `push_group_state` rows, which
/// live with their groups, not with the device); for sign-out too.
pub fn delete_push_target(conn: &mut AnyConnection, device_id: &str) -> QueryResult<usize> {
    forget_what_devices_were_told(conn, &[device_id])?;
    diesel::delete(push_targets::table.filter(push_targets::device_id.eq(device_id))).execute(conn)
}

/// Deletes what pushes told the devices about their groups.
pub fn forget_what_devices_were_told(
    conn: &mut AnyConnection,
    device_ids: &[&str],
) -> QueryResult<usize> {
    diesel::delete(push_group_state::table.filter(push_group_state::device_id.eq_any(device_ids)))
        .execute(conn)
}
