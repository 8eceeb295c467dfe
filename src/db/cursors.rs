//! Acks: moving members' cursors forward, one group or many in one transaction.

use diesel::prelude::*;

use super::announce::announce;
use super::devices::{advance_device, device_ack};
use super::member_events::{record_member_events, MemberEventKind};
use super::members::{access, advance_member, Access, Advance};
use super::receipts::record_change;
use super::AnyConnection;
use crate::domain::DeviceId;
use crate::wake::WakeEvent;

#[derive(Debug, Clone, Copy)]
pub struct AckRequest {
    pub group_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: Option<i64>,
}

/// A member's position after an ack, as the acking device sees it.
#[derive(Debug, Clone, Copy)]
pub struct CursorState {
    pub group_id: i64,
    /// The acking device's delivered cursor.
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub last_msg_id: i64,
    pub own_msgs_after_read: i64,
    /// Whether the ack changed what receipts count (the read or delivered-anywhere cursor).
    pub receipts_changed: bool,
    /// Whether the read cursor moved (the user's other devices hear of it).
    pub read_moved: bool,
}

/// Why an ack batch was refused; `index` is the position in the request.
#[derive(Debug, Clone, Copy)]
pub enum AckRejection {
    NoGroup {
        index: usize,
        group_id: i64,
    },
    NotMember {
        index: usize,
        group_id: i64,
    },
    BeyondLastMessage {
        index: usize,
        group_id: i64,
        requested: i64,
        last_msg_id: i64,
    },
}

enum TxError {
    Rejected(AckRejection),
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for TxError {
    fn from(e: diesel::result::Error) -> Self {
        TxError::Db(e)
    }
}

/// Applies every ack or none. Each ack writes at most one row however many messages it covers,
/// and an ack that would not move a cursor writes nothing.
pub fn ack(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    instance: &str,
) -> QueryResult<Result<Vec<CursorState>, AckRejection>> {
    let outcome = conn.transaction::<_, TxError, _>(|conn| {
        acks.iter()
            .enumerate()
            .map(|(index, request)| ack_one(conn, user_id, device, index, request, instance))
            .collect()
    });
    match outcome {
        Ok(states) => Ok(Ok(states)),
        Err(TxError::Rejected(rejection)) => Ok(Err(rejection)),
        Err(TxError::Db(e)) => Err(e),
    }
}

fn ack_one(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    index: usize,
    request: &AckRequest,
    instance: &str,
) -> Result<CursorState, TxError> {
    let group_id = request.group_id;
    let (group, member) = match access(conn, group_id, user_id)? {
        Access::NoGroup => {
            return Err(TxError::Rejected(AckRejection::NoGroup { index, group_id }))
        }
        Access::NotMember(_) => {
            return Err(TxError::Rejected(AckRejection::NotMember {
                index,
                group_id,
            }))
        }
        Access::Member(group, member) => (group, member),
    };
    // An ack means read unless told otherwise; reading implies delivery to this device.
    let read_to = request.last_read_msg_id.unwrap_or(request.last_ack_msg_id);
    let ack_to = request.last_ack_msg_id.max(read_to);
    if ack_to > group.last_msg_id {
        return Err(TxError::Rejected(AckRejection::BeyondLastMessage {
            index,
            group_id,
            requested: ack_to,
            last_msg_id: group.last_msg_id,
        }));
    }
    let device_ack_before = match device {
        None => member.last_ack_msg_id,
        Some(d) => device_ack(conn, group_id, user_id, d)?.unwrap_or(member.joined_after_msg_id),
    };
    let mut state = CursorState {
        group_id,
        last_ack_msg_id: device_ack_before,
        last_read_msg_id: member.last_read_msg_id,
        last_msg_id: group.last_msg_id,
        own_msgs_after_read: member.own_msgs_after_read,
        receipts_changed: false,
        read_moved: false,
    };
    if ack_to <= device_ack_before && read_to <= member.last_read_msg_id {
        return Ok(state);
    }
    if let Some(d) = device {
        state.last_ack_msg_id = advance_device(conn, group_id, user_id, d, ack_to)?;
        if read_to <= member.last_read_msg_id && ack_to <= member.delivered_msg_id {
            // A device catching up on what another device already had: receipts and the
            // user's read position stay as they are.
            return Ok(state);
        }
    }
    let after = advance_member(
        conn,
        group_id,
        user_id,
        Advance {
            default_ack_to: if device.is_none() { ack_to } else { 0 },
            read_to,
            delivered_to: ack_to,
        },
    )?;
    if device.is_none() {
        state.last_ack_msg_id = after.last_ack_msg_id;
    }
    state.last_read_msg_id = after.last_read_msg_id;
    state.own_msgs_after_read = after.own_msgs_after_read;
    state.read_moved = after.last_read_msg_id > member.last_read_msg_id;
    state.receipts_changed = state.read_moved || after.delivered_msg_id > member.delivered_msg_id;
    if state.receipts_changed {
        // Receipts of messages after the old read cursor, up to the new delivered one, may
        // have changed: one row for the whole range, however many messages it covers.
        record_change(
            conn,
            group_id,
            user_id,
            member.last_read_msg_id,
            after.delivered_msg_id,
        )?;
        announce(conn, instance, &WakeEvent::CursorMoved(group_id))?;
    }
    if state.read_moved {
        record_member_events(conn, group_id, &[user_id], MemberEventKind::Read, device)?;
        announce(conn, instance, &WakeEvent::ReadMoved(user_id.to_owned()))?;
    }
    Ok(state)
}
