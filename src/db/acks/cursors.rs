//! Acks: moving members' cursors forward, one group or many in one transaction.

use crate::domain::refusal::Refusal;
use diesel::QueryResult;

use std::collections::{HashMap, HashSet};

use crate::db::device::devices::{advance_devices, device_acks};
use crate::db::engine::raw_sql::RawSql;
use crate::db::engine::row_locks::Busy;
use crate::db::group::access::{
    lock_memberships, memberships, Checked, LockedMemberships, Membership,
};
use crate::db::group::member_events::reads_statements;
use crate::db::group::members::{advance_members, Advance};
use crate::db::member_cursors::cursor_counts::{CursorMoves, MemberCursors};
use crate::db::member_cursors::receipts::changes_statements;
use crate::db::member_cursors::unread::{above_read_after, UnreadInputs};
use crate::db::models::MemberRow;
use crate::db::push::push_due::{lock_badges, note_reads_on_devices};
use crate::db::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::wake_ups::events::{WakeEvent, Wakes};

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

/// One request's acks: whose, from which device (None: the default device), and the acks.
#[derive(Debug, Clone)]
pub struct AcksOf {
    pub user_id: String,
    pub device: Option<DeviceId>,
    pub acks: Vec<AckRequest>,
}

/// What acking one request answers: a cursor state per ack, in its order, or why the request
/// was refused ([`Refusal::InBatch`] says which ack).
pub type Acked = Result<Vec<CursorState>, Refusal>;

/// One ack of one request, as the rounds see it.
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    /// The request's place in the caller's list, and the ack's in the request.
    request: usize,
    index: usize,
    user_id: &'a str,
    device: Option<&'a DeviceId>,
    ack: AckRequest,
}

impl Entry<'_> {
    fn membership(&self) -> (i64, &str) {
        (self.ack.group_id, self.user_id)
    }

    fn refused(&self, refusal: Refusal) -> Refusal {
        Refusal::InBatch {
            index: self.index,
            refusal: Box::new(refusal),
        }
    }
}

/// Applies requests of acks (of one user or many), each all or nothing, inside the caller's
/// transaction: per request in order, its cursor states or its refusal. Every refusal is decided
/// before anything is written, so a refused request leaves nothing written and the others stand. An
/// ack writes a few rows however many messages it covers, and one that would not move a cursor
/// writes nothing. Set-based: however many requests and groups, a round takes the same few
/// statements: the membership rows locked and read; with devices, their cursors read and moved and
/// their badge rows locked; the moves, their effects and the counts in one round trip where the
/// engine allows. A request that names a group more than once acks it once per round, in request
/// order, as if the acks came one after another: the answer to each says where that ack left the
/// cursors.
pub fn ack_requests(
    conn: &mut AnyConnection,
    requests: &[AcksOf],
    wakes: &mut Wakes,
) -> QueryResult<Vec<Acked>> {
    let acked = apply_requests(conn, requests, Busy::Wait, wakes)?;
    // Waiting for every row, no request is left out.
    acked
        .into_iter()
        .map(|a| a.ok_or(diesel::result::Error::NotFound))
        .collect()
}

/// [`ack_requests`] for requests that share a transaction only to share its commit: a request
/// naming a membership whose row another transaction holds (a send of that member's, a
/// removal) is left out (None) rather than hold up the others while it waits.
pub fn ack_requests_beside_busy(
    conn: &mut AnyConnection,
    requests: &[AcksOf],
    wakes: &mut Wakes,
) -> QueryResult<Vec<Option<Acked>>> {
    apply_requests(conn, requests, Busy::Skip, wakes)
}

/// Why a request is left out of the rounds.
enum Left {
    Refused(Refusal),
    /// A membership row it names is held by another transaction.
    Busy,
}

/// Every ack of every request, as the rounds see them.
fn entries_of(requests: &[AcksOf]) -> Vec<Entry<'_>> {
    requests
        .iter()
        .enumerate()
        .flat_map(|(request, r)| {
            r.acks.iter().enumerate().map(move |(index, ack)| Entry {
                request,
                index,
                user_id: &r.user_id,
                device: r.device.as_ref(),
                ack: *ack,
            })
        })
        .collect()
}

/// Why the request would be refused as things stand, read without locking or writing
/// anything: the same decision [`ack_requests`] takes before it writes. For a request applied
/// group by group, so that one refused ack leaves every group as it was.
pub fn refusal_of(conn: &mut AnyConnection, request: &AcksOf) -> QueryResult<Option<Refusal>> {
    let requests = std::slice::from_ref(request);
    let entries = entries_of(requests);
    let mut pairs: Vec<(i64, &str)> = entries.iter().map(Entry::membership).collect();
    pairs.sort_unstable();
    pairs.dedup();
    let found = memberships(conn, &pairs)?;
    let mut left = vec![None];
    decide_refusals(&entries, &found, &mut left);
    Ok(match left.pop().flatten() {
        Some(Left::Refused(refusal)) => Some(refusal),
        _ => None,
    })
}

fn apply_requests(
    conn: &mut AnyConnection,
    requests: &[AcksOf],
    busy: Busy,
    wakes: &mut Wakes,
) -> QueryResult<Vec<Option<Acked>>> {
    let entries = entries_of(requests);
    let mut left: Vec<Option<Left>> = requests.iter().map(|_| None).collect();
    let mut states: Vec<Vec<Option<CursorState>>> =
        requests.iter().map(|r| vec![None; r.acks.len()]).collect();
    for (round, indexes) in rounds(&entries).into_iter().enumerate() {
        let live: Vec<Entry<'_>> = indexes
            .into_iter()
            .map(|i| entries[i])
            .filter(|e| left[e.request].is_none())
            .collect();
        // The first round names every membership of every request: its locks and reads
        // decide which requests go on. Later rounds find the same memberships, locked by
        // this transaction, and no lower last ids.
        let first = (round == 0).then_some(FirstRound {
            entries: &entries,
            left: &mut left,
            busy,
        });
        for (entry, state) in ack_round(conn, &live, first, wakes)? {
            states[entry.request][entry.index] = Some(state);
        }
    }
    Ok(left
        .into_iter()
        .zip(states)
        .map(|(left, states)| match left {
            Some(Left::Busy) => None,
            Some(Left::Refused(refusal)) => Some(Err(refusal)),
            None => Some(Ok(states.into_iter().flatten().collect())),
        })
        .collect())
}

/// Applies one user's acks or none (see [`ack_requests`]).
pub fn ack(
    conn: &mut AnyConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    wakes: &mut Wakes,
) -> Checked<Vec<CursorState>> {
    let request = AcksOf {
        user_id: user_id.to_owned(),
        device: device.cloned(),
        acks: acks.to_vec(),
    };
    let mut acked = ack_requests(conn, std::slice::from_ref(&request), wakes)?;
    Ok(acked.pop().unwrap_or(Ok(Vec::new())))
}

/// The entries' indexes in rounds that name each membership at most once: the first ack of
/// every membership, then the second, and so on.
fn rounds(entries: &[Entry<'_>]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<(i64, &str), usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let round = seen.entry(entry.membership()).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(index);
        *round += 1;
    }
    rounds
}

/// What the first round decides: which of every request's entries go on, and why the others
/// are left out.
struct FirstRound<'e, 'a> {
    entries: &'e [Entry<'a>],
    left: &'e mut Vec<Option<Left>>,
    busy: Busy,
}

/// One round of [`ack_requests`]: `live` names each membership once. In the `first` round,
/// its locks and reads first decide which requests are left out (refused, or busy), and their
/// entries are dropped. Returns each applied entry with its state.
fn ack_round<'a>(
    conn: &mut AnyConnection,
    live: &[Entry<'a>],
    first: Option<FirstRound<'_, 'a>>,
    wakes: &mut Wakes,
) -> QueryResult<Vec<(Entry<'a>, CursorState)>> {
    // Planned and written in (group, user) order whatever the requests' order, as every
    // other write that touches several memberships does, so two batches cannot deadlock.
    let mut order: Vec<Entry<'a>> = live.to_vec();
    order.sort_by(|a, b| a.membership().cmp(&b.membership()));
    let pairs: Vec<(i64, &str)> = order.iter().map(Entry::membership).collect();
    // Every membership row of the round is locked before anything else, even where only a
    // device's cursor moves: the write holds member rows while it writes their device
    // cursor and badge rows, so a device cursor taken before its member row could wait in a
    // cycle with it. Read as locked, the rows are as they are now, and stay so.
    let busy = first.as_ref().map_or(Busy::Wait, |f| f.busy);
    let LockedMemberships {
        mut found,
        busy: held,
    } = lock_memberships(conn, &pairs, busy)?;
    if let Some(FirstRound { entries, left, .. }) = first {
        leave_busy(entries, &held, left);
        decide_refusals(entries, &found, left);
        order.retain(|e| left[e.request].is_none());
    }
    let mut plans = plan_acks(conn, order, &mut found)?;
    move_devices(conn, &mut plans)?;
    // The devices' badge rows of the round, before counting.
    let badges: Vec<(i64, &str)> = plans
        .iter()
        .filter_map(|p| p.entry.device.map(|d| (p.state.group_id, d.as_str())))
        .collect();
    let lowerable: HashSet<(i64, String)> = lock_badges(conn, &badges)?.into_iter().collect();
    write_and_count(conn, &mut plans, wakes)?;
    note_reads(conn, &plans, &lowerable)?;
    Ok(plans.into_iter().map(|p| (p.entry, p.state)).collect())
}

/// Each entry's plan, from its membership as locked and its device's cursor; entries refused
/// above (with every request they belong to) have none.
fn plan_acks<'a>(
    conn: &mut AnyConnection,
    order: Vec<Entry<'a>>,
    found: &mut HashMap<(i64, String), Result<Membership, Refusal>>,
) -> QueryResult<Vec<AckPlan<'a>>> {
    let triples: Vec<(i64, &str, &DeviceId)> = order
        .iter()
        .filter_map(|e| e.device.map(|d| (e.ack.group_id, e.user_id, d)))
        .collect();
    let device_acks = device_acks(conn, &triples)?;
    let mut plans = Vec::with_capacity(order.len());
    for entry in order {
        let key = (entry.ack.group_id, entry.user_id.to_owned());
        let Some(Ok(membership)) = found.remove(&key) else {
            continue;
        };
        let device_ack = entry.device.and_then(|d| {
            let triple = (key.0, key.1.clone(), d.as_str().to_owned());
            device_acks.get(&triple).copied()
        });
        // Decided above: the ack's target is within the group's last message.
        if let Ok(plan) = AckPlan::new(entry, membership, device_ack) {
            plans.push(plan);
        }
    }
    Ok(plans)
}

/// Moves the named devices' delivered cursors; each plan's state gets where its device's
/// cursor now stands.
fn move_devices(conn: &mut AnyConnection, plans: &mut [AckPlan<'_>]) -> QueryResult<()> {
    let device_moves: Vec<(i64, &str, &DeviceId, MsgId)> = plans
        .iter()
        .filter_map(|p| {
            let device = p.entry.device?;
            let to = p.device_to?;
            Some((p.state.group_id, p.entry.user_id, device, MsgId(to)))
        })
        .collect();
    let acked = advance_devices(conn, &device_moves)?;
    for plan in plans {
        if let Some(device) = plan.entry.device {
            let triple = (
                plan.state.group_id,
                plan.entry.user_id.to_owned(),
                device.as_str().to_owned(),
            );
            if let Some(&to) = acked.get(&triple) {
                plan.state.last_ack_msg_id = to;
            }
        }
    }
    Ok(())
}

/// Writes the membership rows' moves and their effects in the same round trip as the counts
/// above each read cursor are read (they come out the same whether they see the moves or
/// not), and puts the counts in each plan's state.
fn write_and_count(
    conn: &mut AnyConnection,
    plans: &mut [AckPlan<'_>],
    wakes: &mut Wakes,
) -> QueryResult<()> {
    let moves: Vec<((i64, &str), Advance)> = plans
        .iter()
        .filter_map(|p| p.advance.map(|a| (p.entry.membership(), a)))
        .collect();
    let mut writes: Vec<RawSql> = advance_members(&moves).into_iter().collect();
    writes.extend(effects_of(conn, plans, wakes));
    let counted: Vec<(i64, &str, i64)> = plans
        .iter()
        .map(|p| (p.state.group_id, p.entry.user_id, p.state.last_read_msg_id))
        .collect();
    let above = above_read_after(conn, &counted, writes)?;
    for plan in plans {
        let key = (plan.state.group_id, plan.entry.user_id.to_owned());
        if let Some(counts) = above.get(&key) {
            plan.state.last_msg_id = counts.last_msg_id;
            plan.state.own_msgs_after_read = counts.own_msgs_after_read;
            plan.state.not_counted_above_read = counts.not_counted;
            plan.state.unread_mention_count = counts.mentions;
        }
    }
    Ok(())
}

/// Records, for each device that moved its user's read cursor, the group's unread count it
/// now knows, so a push does not lower its badge again; only badge rows in `lowerable`
/// (locked before counting, see [`lock_badges`]).
fn note_reads(
    conn: &mut AnyConnection,
    plans: &[AckPlan<'_>],
    lowerable: &HashSet<(i64, String)>,
) -> QueryResult<()> {
    let reads: Vec<(i64, &str, i64)> = plans
        .iter()
        .filter(|p| p.state.read_moved)
        .filter_map(|p| {
            let device = p.entry.device?.as_str();
            let badge = (p.state.group_id, device.to_owned());
            lowerable
                .contains(&badge)
                .then(|| (p.state.group_id, device, p.state.unread().unread_count()))
        })
        .collect();
    note_reads_on_devices(conn, &reads)
}

/// Leaves out each request naming a membership whose row another transaction holds.
fn leave_busy(entries: &[Entry<'_>], held: &[(i64, String)], left: &mut [Option<Left>]) {
    let held: HashSet<(i64, &str)> = held.iter().map(|(g, u)| (*g, u.as_str())).collect();
    for entry in entries {
        if held.contains(&entry.membership()) {
            left[entry.request] = Some(Left::Busy);
        }
    }
}

/// Each request's refusal, from the first round's memberships: its first ack (in request
/// order) whose group is missing, whose caller is not a member, or that goes beyond the
/// group's last message.
fn decide_refusals(
    entries: &[Entry<'_>],
    found: &HashMap<(i64, String), Result<Membership, Refusal>>,
    left: &mut [Option<Left>],
) {
    for entry in entries {
        if left[entry.request].is_some() {
            continue;
        }
        let key = (entry.ack.group_id, entry.user_id.to_owned());
        let refusal = match found.get(&key) {
            // Every membership of every request is in the first round.
            None => Some(Refusal::NoGroup {
                group_id: GroupId(entry.ack.group_id),
            }),
            Some(Err(refusal)) => Some(refusal.clone()),
            Some(Ok(membership)) => targets(&entry.ack, membership).err(),
        };
        left[entry.request] = refusal.map(|r| Left::Refused(entry.refused(r)));
    }
}

/// What one ack will do, decided from the rows read before any write.
struct AckPlan<'a> {
    entry: Entry<'a>,
    member: MemberRow,
    state: CursorState,
    /// The membership row's move; None when the ack leaves it as it is.
    advance: Option<Advance>,
    /// The named device's delivered cursor's move.
    device_to: Option<i64>,
    /// The delivered-anywhere cursor after the ack.
    delivered_after: i64,
}

impl<'a> AckPlan<'a> {
    /// `device_ack`: the named device's delivered cursor, if it ever acked in the group.
    fn new(
        entry: Entry<'a>,
        membership: Membership,
        device_ack: Option<i64>,
    ) -> Result<AckPlan<'a>, Refusal> {
        let (ack_to, read_to) = targets(&entry.ack, &membership)?;
        let Membership { group, member } = membership;
        let device_ack_before = match entry.device {
            None => member.last_ack_msg_id,
            Some(_) => device_ack.unwrap_or(member.joined_after_msg_id),
        };
        let state = CursorState::before(&member, group.last_msg_id, device_ack_before);
        let mut plan = AckPlan {
            entry,
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
        let default_device = entry.device.is_none();
        plan.advance = Advance::of(&plan.member, default_device, read_to, ack_to);
        plan.device_to = entry.device.map(|_| ack_to);
        if let Some(after) = plan.advance {
            let state = &mut plan.state;
            if default_device {
                state.last_ack_msg_id = after.last_ack_msg_id;
            }
            state.last_read_msg_id = after.last_read_msg_id;
            state.read_moved = after.last_read_msg_id > plan.member.last_read_msg_id;
            state.receipts_changed =
                state.read_moved || after.delivered_msg_id > plan.member.delivered_msg_id;
            plan.delivered_after = after.delivered_msg_id;
        }
        Ok(plan)
    }
}

/// Where one ack moves the caller's cursors ([`AckRequest::targets`]), unless beyond the
/// group's last message.
fn targets(request: &AckRequest, membership: &Membership) -> Result<(i64, i64), Refusal> {
    let (ack_to, read_to) = request.targets();
    let last_msg_id = membership.group.last_msg_id;
    if ack_to > last_msg_id {
        return Err(Refusal::AckBeyondLastMessage {
            group_id: GroupId(request.group_id),
            requested: ack_to,
            last_msg_id,
        });
    }
    Ok((ack_to, read_to))
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
/// messages' counts may have changed, and a member event for each user's other devices. The
/// statements that write them, one each for the whole round; the wake-ups are recorded.
fn effects_of(conn: &AnyConnection, plans: &[AckPlan<'_>], wakes: &mut Wakes) -> Vec<RawSql> {
    // The histogram of cursors: each moved membership row, from where it was read (after its
    // lock) to where the move left it.
    let mut cursor_moves = CursorMoves::default();
    for plan in plans.iter().filter(|p| p.advance.is_some()) {
        let was = MemberCursors::of(&plan.member);
        let now = MemberCursors {
            read: plan.state.last_read_msg_id,
            delivered: plan.delivered_after,
            ..was
        };
        cursor_moves.moved(GroupId(plan.state.group_id), was, now);
    }
    // Receipts of messages after the old read cursor, up to the new delivered one, may have
    // changed: one row for the whole range, however many messages it covers.
    let changes: Vec<(&str, GroupId, MsgId, MsgId)> = plans
        .iter()
        .filter(|p| p.state.receipts_changed)
        .map(|p| {
            let group_id = GroupId(p.state.group_id);
            let from = MsgId(p.member.last_read_msg_id);
            (p.entry.user_id, group_id, from, MsgId(p.delivered_after))
        })
        .collect();
    let mut statements = cursor_moves.statements(conn);
    statements.extend(changes_statements(&changes));
    for &(_, group_id, _, _) in &changes {
        wakes.record(WakeEvent::CursorMoved(group_id));
    }
    let reads: Vec<(i64, &str, Option<&DeviceId>)> = plans
        .iter()
        .filter(|p| p.state.read_moved)
        .map(|p| (p.state.group_id, p.entry.user_id, p.entry.device))
        .collect();
    statements.extend(reads_statements(&reads));
    for &(group_id, _, _) in &reads {
        wakes.feed_rows_in(GroupId(group_id));
    }
    let mut readers: Vec<&str> = reads.iter().map(|r| r.1).collect();
    readers.sort_unstable();
    readers.dedup();
    for user_id in readers {
        wakes.record(WakeEvent::ReadMoved(user_id.to_owned()));
    }
    statements
}
