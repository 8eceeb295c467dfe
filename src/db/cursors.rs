//! Acks: moving members' cursors forward, one group or many in one transaction.

use diesel::QueryResult;

use super::access::{member_of, Checked, Membership, Refusal};
use super::devices::{advance_device, device_ack};
use super::member_events::{record_member_events, Cause, MemberEventKind};
use super::members::{advance_member, Advance, MemberCursorsAfter};
use super::models::MemberRow;
use super::push_due::note_read_on_device;
use super::receipts::record_change;
use super::unread::{above_read, UnreadInputs};
use super::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::refuse_unless;
use crate::wake::{WakeEvent, Wakes};

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
    pub not_counted_above_read: i64,
    pub unread_mention_count: i64,
    /// Whether the ack changed what receipts count (the read or delivered-anywhere cursor).
    pub receipts_changed: bool,
    /// Whether the read cursor moved (the user's other devices hear of it).
    pub read_moved: bool,
}

/// Applies every ack or none (run it through `Db::write_checked`): a refused entry refuses the
/// batch ([`Refusal::InBatch`] says which) and the write rolls back. An ack writes a few rows however many messages it covers, and an ack that would not
/// move a cursor writes nothing.
pub fn ack(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    wakes: &mut Wakes,
) -> Checked<Vec<CursorState>> {
    // Rows are locked in group order whatever the request's order, as every other write that
    // touches several groups does, so two batches cannot deadlock each other.
    let mut order: Vec<usize> = (0..acks.len()).collect();
    order.sort_by_key(|&i| acks[i].group_id);
    let mut states: Vec<Option<CursorState>> = vec![None; acks.len()];
    for index in order {
        let state = ack_one(conn, user_id, device, &acks[index], wakes)?;
        states[index] = Some(refuse_unless!(state.map_err(|refusal| {
            Refusal::InBatch {
                index,
                refusal: Box::new(refusal),
            }
        })));
    }
    Ok(Ok(states.into_iter().flatten().collect()))
}

/// Where one ack moves the caller's cursors: reading implies delivery to this device, and an
/// ack that does not say what was read means everything it delivers was read.
fn targets(request: &AckRequest, membership: &Membership) -> Result<(i64, i64), Refusal> {
    let read_to = request.last_read_msg_id.unwrap_or(request.last_ack_msg_id);
    let ack_to = request.last_ack_msg_id.max(read_to);
    let last_msg_id = membership.group.last_msg_id;
    if ack_to > last_msg_id {
        return Err(Refusal::AckBeyondLastMessage {
            group_id: request.group_id,
            requested: ack_to,
            last_msg_id,
        });
    }
    Ok((ack_to, read_to))
}

fn ack_one(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    request: &AckRequest,
    wakes: &mut Wakes,
) -> Checked<CursorState> {
    let group_id = request.group_id;
    let membership = refuse_unless!(member_of(conn, group_id, user_id)?);
    let (ack_to, read_to) = refuse_unless!(targets(request, &membership));
    let Membership { group, member } = membership;
    let device_ack_before = match device {
        None => member.last_ack_msg_id,
        Some(d) => {
            device_ack(conn, GroupId(group_id), user_id, d)?.unwrap_or(member.joined_after_msg_id)
        }
    };
    let mut state = CursorState::before(&member, group.last_msg_id, device_ack_before);
    if ack_to <= device_ack_before && read_to <= member.last_read_msg_id {
        return Ok(Ok(state.with_counts(conn, user_id)?));
    }
    // A device catching up on what another device already had leaves the membership row
    // (receipts, the read position) as it is.
    let member_moves = read_to > member.last_read_msg_id
        || ack_to > member.delivered_msg_id
        || (device.is_none() && ack_to > member.last_ack_msg_id);
    // The membership row is locked before the device's row, the order a send takes them in,
    // so an ack and a send from one device cannot deadlock.
    let after = if member_moves {
        let advance = Advance {
            default_ack_to: if device.is_none() { ack_to } else { 0 },
            read_to,
            delivered_to: ack_to,
        };
        Some(advance_member(conn, group_id, user_id, advance)?)
    } else {
        None
    };
    if let Some(d) = device {
        state.last_ack_msg_id = advance_device(conn, GroupId(group_id), user_id, d, MsgId(ack_to))?;
    }
    let Some(after) = after else {
        return Ok(Ok(state.with_counts(conn, user_id)?));
    };
    if device.is_none() {
        state.last_ack_msg_id = after.last_ack_msg_id;
    }
    state.last_read_msg_id = after.last_read_msg_id;
    state.own_msgs_after_read = after.own_msgs_after_read;
    state.read_moved = after.last_read_msg_id > member.last_read_msg_id;
    state.receipts_changed = state.read_moved || after.delivered_msg_id > member.delivered_msg_id;
    record_effects(conn, &member, &after, &state, device, wakes)?;
    let state = state.with_counts(conn, user_id)?;
    if let (Some(d), true) = (device, state.read_moved) {
        let unread = state.unread().unread_count();
        note_read_on_device(conn, d.as_str(), GroupId(group_id), unread)?;
    }
    Ok(Ok(state))
}

impl CursorState {
    /// Where the member stands before the ack moves anything.
    fn before(member: &MemberRow, last_msg_id: i64, device_ack: i64) -> Self {
        CursorState {
            group_id: member.group_id,
            last_ack_msg_id: device_ack,
            last_read_msg_id: member.last_read_msg_id,
            last_msg_id,
            own_msgs_after_read: member.own_msgs_after_read,
            not_counted_above_read: 0,
            unread_mention_count: 0,
            receipts_changed: false,
            read_moved: false,
        }
    }

    pub fn unread(&self) -> UnreadInputs {
        UnreadInputs {
            last_msg_id: self.last_msg_id,
            last_read_msg_id: self.last_read_msg_id,
            own_msgs_after_read: self.own_msgs_after_read,
            not_counted_above_read: self.not_counted_above_read,
        }
    }

    /// The state with the figures read off the index ranges above the read cursor.
    fn with_counts(mut self, conn: &mut AnyConnection, user_id: &str) -> QueryResult<Self> {
        let above = above_read(conn, GroupId(self.group_id), user_id)?;
        self.not_counted_above_read = above.not_counted;
        self.unread_mention_count = above.mentions;
        Ok(self)
    }
}

/// What a cursor move causes beyond the row: a receipt change for the senders whose messages'
/// counts may have changed, and a member event for the user's other devices.
fn record_effects(
    conn: &mut AnyConnection,
    before: &MemberRow,
    after: &MemberCursorsAfter,
    state: &CursorState,
    device: Option<&DeviceId>,
    wakes: &mut Wakes,
) -> QueryResult<()> {
    let (group_id, user_id) = (before.group_id, before.user_id.as_str());
    if state.receipts_changed {
        // Receipts of messages after the old read cursor, up to the new delivered one, may
        // have changed: one row for the whole range, however many messages it covers.
        let (from, to) = (before.last_read_msg_id, after.delivered_msg_id);
        record_change(conn, GroupId(group_id), user_id, MsgId(from), MsgId(to))?;
        wakes.record(WakeEvent::CursorMoved(group_id));
    }
    if state.read_moved {
        record_member_events(
            conn,
            group_id,
            &[user_id],
            MemberEventKind::Read,
            Cause::Device(device),
        )?;
        wakes.record(WakeEvent::ReadMoved(user_id.to_owned()));
    }
    Ok(())
}
