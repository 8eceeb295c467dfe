//! Acks: moving members' cursors forward, one group or many in one transaction.

use diesel::sql_types::{BigInt, Bool};
use diesel::{QueryResult, QueryableByName};

use std::collections::{HashMap, HashSet};

use super::access::{member_of_groups, Checked, Membership, Refusal};
use super::devices::{advance_devices, device_acks};
use super::member_events::{record_user_events, Cause, MemberEventKind};
use super::members::{advance_members, lock_memberships, Advance, MemberCursorsAfter};
use super::models::MemberRow;
use super::push_due::{lock_badges, note_reads_on_device};
use super::receipts::record_changes;
use super::unread::{above_read_in_groups, AboveRead, UnreadInputs};
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

impl AckRequest {
    /// Where the ack moves the acking device's delivered cursor and the read cursor: reading
    /// implies delivery to this device, and an ack that does not say what was read means
    /// everything it delivers was read.
    pub fn targets(&self) -> (i64, i64) {
        let read_to = self.last_read_msg_id.unwrap_or(self.last_ack_msg_id);
        (self.last_ack_msg_id.max(read_to), read_to)
    }
}

/// A member's position after an ack, as the acking device sees it. Also a row of
/// PostgreSQL's one-statement ack (`super::ack_statement`), whose columns are these fields.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct CursorState {
    #[diesel(sql_type = BigInt)]
    pub group_id: i64,
    /// The acking device's delivered cursor.
    #[diesel(sql_type = BigInt)]
    pub last_ack_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    pub last_read_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    pub last_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    pub own_msgs_after_read: i64,
    #[diesel(sql_type = BigInt)]
    pub not_counted_above_read: i64,
    #[diesel(sql_type = BigInt)]
    pub unread_mention_count: i64,
    /// Whether the ack changed what receipts count (the read or delivered-anywhere cursor).
    #[diesel(sql_type = Bool)]
    pub receipts_changed: bool,
    /// Whether the read cursor moved (the user's other devices hear of it).
    #[diesel(sql_type = Bool)]
    pub read_moved: bool,
}

/// Applies every ack or none (run it through `Db::write_checked`): a refused entry refuses the
/// batch ([`Refusal::InBatch`] says which) and the write rolls back. An ack writes a few rows
/// however many messages it covers, and an ack that would not move a cursor writes nothing.
/// Set-based: however many groups, a batch takes the same few statements as one group (the
/// memberships, the device's cursors, the moves, their effects, the counts). A group named
/// more than once is acked once per round, in request order, as if the acks came one after
/// another: the answer to each says where that ack left the cursors.
pub fn ack(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    wakes: &mut Wakes,
) -> Checked<Vec<CursorState>> {
    let mut states: Vec<Option<CursorState>> = vec![None; acks.len()];
    for round in rounds(acks) {
        for (index, state) in refuse_unless!(ack_round(conn, user_id, device, acks, &round, wakes)?)
        {
            states[index] = Some(state);
        }
    }
    Ok(Ok(states.into_iter().flatten().collect()))
}

/// The acks' indexes in rounds that name each group at most once: the first ack of every
/// group, then the second, and so on.
fn rounds(acks: &[AckRequest]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (index, ack) in acks.iter().enumerate() {
        let round = seen.entry(ack.group_id).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(index);
        *round += 1;
    }
    rounds
}

/// One round of [`ack`]: the acks at `indexes`, each of another group. Returns each ack's index
/// with its state.
fn ack_round(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    indexes: &[usize],
    wakes: &mut Wakes,
) -> Checked<Vec<(usize, CursorState)>> {
    // Planned and written in group order whatever the request's order, as every other write
    // that touches several groups does, so two batches cannot deadlock each other.
    let mut order: Vec<usize> = indexes.to_vec();
    order.sort_by_key(|&i| acks[i].group_id);
    let group_ids: Vec<i64> = order.iter().map(|&i| acks[i].group_id).collect();
    // Every membership row of the round is locked before anything else, even where only the
    // device's cursor moves: the ack statement holds member rows while it writes their
    // device cursor and badge rows, so a device cursor taken before its member row could
    // wait in a cycle with it. Read after the lock, the rows are as they are now.
    lock_memberships(conn, user_id, &group_ids)?;
    let mut memberships = member_of_groups(conn, &group_ids, user_id)?;
    let device_acks: HashMap<i64, i64> = match device {
        Some(d) => device_acks(conn, &group_ids, user_id, d)?
            .into_iter()
            .collect(),
        None => HashMap::new(),
    };
    let mut plans = Vec::with_capacity(acks.len());
    for index in order {
        let request = &acks[index];
        let membership = memberships
            .remove(&request.group_id)
            .unwrap_or(Err(Refusal::NoGroup {
                group_id: request.group_id,
            }));
        let planned =
            membership.and_then(|m| AckPlan::new(index, request, m, device, &device_acks));
        plans.push(refuse_unless!(planned.map_err(|refusal| {
            Refusal::InBatch {
                index,
                refusal: Box::new(refusal),
            }
        })));
    }
    let moved: HashMap<i64, MemberCursorsAfter> =
        advance_members(conn, user_id, &member_moves(&plans))?
            .into_iter()
            .collect();
    for plan in &mut plans {
        if plan.advance.is_none() {
            continue;
        }
        let Some(after) = moved.get(&plan.state.group_id) else {
            // The membership row vanished between the read and the write: removed meanwhile.
            let refusal = Refusal::NotMember {
                group_id: plan.state.group_id,
            };
            return Ok(Err(Refusal::InBatch {
                index: plan.index,
                refusal: Box::new(refusal),
            }));
        };
        plan.apply(after, device.is_none());
    }
    // After the membership rows: a device's cursor row needs its membership row, which a
    // concurrent removal may have taken (refused above).
    if let Some(d) = device {
        let device_moves: Vec<(GroupId, MsgId)> = plans
            .iter()
            .filter_map(|p| p.device_to.map(|to| (GroupId(p.state.group_id), MsgId(to))))
            .collect();
        for (group_id, acked) in advance_devices(conn, user_id, d, &device_moves)? {
            if let Some(plan) = plans.iter_mut().find(|p| p.state.group_id == group_id) {
                plan.state.last_ack_msg_id = acked;
            }
        }
    }
    // The device's badge rows of every group of the round, before counting: the first
    // round names every group of the request, so the rows are taken in group order once.
    let lowerable_badges: HashSet<i64> = match device {
        Some(d) => lock_badges(conn, d.as_str(), &group_ids)?
            .into_iter()
            .collect(),
        None => HashSet::new(),
    };
    record_effects(conn, user_id, &plans, device, wakes)?;
    let above: HashMap<i64, AboveRead> = above_read_in_groups(conn, &group_ids, user_id)?
        .into_iter()
        .collect();
    for plan in &mut plans {
        if let Some(counts) = above.get(&plan.state.group_id) {
            plan.state.last_msg_id = counts.last_msg_id;
            plan.state.own_msgs_after_read = counts.own_msgs_after_read;
            plan.state.not_counted_above_read = counts.not_counted;
            plan.state.unread_mention_count = counts.mentions;
        }
    }
    if let Some(d) = device {
        let reads: Vec<(GroupId, i64)> = plans
            .iter()
            .filter(|p| p.state.read_moved && lowerable_badges.contains(&p.state.group_id))
            .map(|p| (GroupId(p.state.group_id), p.state.unread().unread_count()))
            .collect();
        note_reads_on_device(conn, d.as_str(), &reads)?;
    }
    Ok(Ok(plans.into_iter().map(|p| (p.index, p.state)).collect()))
}

/// What one ack of a batch will do, decided from the rows read before any write. PostgreSQL's
/// one-statement ack (`super::ack_statement`) decides the same in SQL: change both.
struct AckPlan {
    /// The ack's place in the request.
    index: usize,
    member: MemberRow,
    state: CursorState,
    /// The membership row's move; None when the ack leaves it as it is.
    advance: Option<Advance>,
    /// The named device's delivered cursor's move.
    device_to: Option<i64>,
    /// The delivered-anywhere cursor after the ack.
    delivered_after: i64,
}

impl AckPlan {
    fn new(
        index: usize,
        request: &AckRequest,
        membership: Membership,
        device: Option<&DeviceId>,
        device_acks: &HashMap<i64, i64>,
    ) -> Result<AckPlan, Refusal> {
        let (ack_to, read_to) = targets(request, &membership)?;
        let Membership { group, member } = membership;
        let device_ack_before = match device {
            None => member.last_ack_msg_id,
            Some(_) => device_acks
                .get(&group.group_id)
                .copied()
                .unwrap_or(member.joined_after_msg_id),
        };
        let state = CursorState::before(&member, group.last_msg_id, device_ack_before);
        let mut plan = AckPlan {
            index,
            delivered_after: member.delivered_msg_id,
            member,
            state,
            advance: None,
            device_to: None,
        };
        if ack_to <= device_ack_before && read_to <= plan.member.last_read_msg_id {
            return Ok(plan);
        }
        // A device catching up on what another device already had leaves the membership row
        // (receipts, the read position) as it is.
        let member = &plan.member;
        let member_moves = read_to > member.last_read_msg_id
            || ack_to > member.delivered_msg_id
            || (device.is_none() && ack_to > member.last_ack_msg_id);
        plan.advance = member_moves.then_some(Advance {
            default_ack_to: if device.is_none() { ack_to } else { 0 },
            read_to,
            delivered_to: ack_to,
        });
        plan.device_to = device.map(|_| ack_to);
        Ok(plan)
    }

    /// The membership row as the move left it.
    fn apply(&mut self, after: &MemberCursorsAfter, default_device: bool) {
        let state = &mut self.state;
        if default_device {
            state.last_ack_msg_id = after.last_ack_msg_id;
        }
        state.last_read_msg_id = after.last_read_msg_id;
        state.own_msgs_after_read = after.own_msgs_after_read;
        state.read_moved = after.last_read_msg_id > self.member.last_read_msg_id;
        state.receipts_changed =
            state.read_moved || after.delivered_msg_id > self.member.delivered_msg_id;
        self.delivered_after = after.delivered_msg_id;
    }
}

/// Where one ack moves the caller's cursors ([`AckRequest::targets`]), unless beyond the
/// group's last message.
fn targets(request: &AckRequest, membership: &Membership) -> Result<(i64, i64), Refusal> {
    let (ack_to, read_to) = request.targets();
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

fn member_moves(plans: &[AckPlan]) -> Vec<(i64, Advance)> {
    plans
        .iter()
        .filter_map(|p| p.advance.map(|a| (p.state.group_id, a)))
        .collect()
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
}

/// What the cursor moves cause beyond the rows: a receipt change for the senders whose
/// messages' counts may have changed, and a member event for the user's other devices. One
/// statement each for the whole batch.
fn record_effects(
    conn: &mut AnyConnection,
    user_id: &str,
    plans: &[AckPlan],
    device: Option<&DeviceId>,
    wakes: &mut Wakes,
) -> QueryResult<()> {
    // Receipts of messages after the old read cursor, up to the new delivered one, may have
    // changed: one row for the whole range, however many messages it covers.
    let changes: Vec<(GroupId, MsgId, MsgId)> = plans
        .iter()
        .filter(|p| p.state.receipts_changed)
        .map(|p| {
            let group_id = GroupId(p.state.group_id);
            let from = MsgId(p.member.last_read_msg_id);
            (group_id, from, MsgId(p.delivered_after))
        })
        .collect();
    record_changes(conn, user_id, &changes)?;
    for (group_id, _, _) in &changes {
        wakes.record(WakeEvent::CursorMoved(group_id.0));
    }
    let reads: Vec<i64> = plans
        .iter()
        .filter(|p| p.state.read_moved)
        .map(|p| p.state.group_id)
        .collect();
    if !reads.is_empty() {
        let cause = Cause::Device(device);
        record_user_events(conn, user_id, &reads, MemberEventKind::Read, cause)?;
        wakes.record(WakeEvent::ReadMoved(user_id.to_owned()));
    }
    Ok(())
}
