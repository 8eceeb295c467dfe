//! Acks on PostgreSQL in one round trip: one statement, run as its own transaction, does
//! what [`super::cursors::ack`] does in a transaction of several, for one request or for
//! several requests that arrived together (each its user's, from its device; see
//! [`super::shared_acks`]). Its parts are data-modifying common table expressions made from
//! the rules the general path uses (how a member's cursors move, how a device's cursor
//! moves, what is above the read cursor, how a device's badge is lowered), so each rule is
//! spelled once.
//!
//! It answers only a request it can answer exactly as the general path would, and decides
//! that for each request on its own: the others of the statement are applied all the same.
//! Whenever the general path would refuse something in a request (a group that does not
//! exist, a caller who is not a member, an ack beyond the group's last message) it writes
//! nothing of that request and answers None for it, and the general path gives the refusal.
//! So does a request that names a group more than once, whose acks the general path applies
//! one after another, a request naming a membership an earlier request of the statement
//! names too, and a request whose member row another write changed while the statement ran
//! or, in a statement of several requests, holds locked (see the statement's comments).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use chrono::NaiveDateTime;
use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamp, Untyped};

use super::cursors::{AckRequest, CursorState};
use super::devices::DEVICE_CURSOR_FORWARD;
use super::member_events::{device_column, MemberEventKind};
use super::members::advance_member_sql;
use super::models::now_utc;
use super::push_due::{LOWER_BADGES, LOWER_BADGES_OF_DEVICE};
use super::unread::{MENTIONS_ABOVE_READ, NOT_COUNTED_ABOVE_READ, UNREAD_OF_INPUTS};
use crate::domain::DeviceId;
use crate::wake::{WakeEvent, Wakes};

/// One request's acks: whose, from which device (None: the default device), and the acks.
#[derive(Debug, Clone)]
pub struct AcksOf {
    pub user_id: String,
    pub device: Option<DeviceId>,
    pub acks: Vec<AckRequest>,
}

impl AcksOf {
    /// The memberships the request moves, each once, or None when it names a group twice
    /// (or none), which only the general path answers.
    pub fn memberships(&self) -> Option<Vec<(&str, i64)>> {
        let mut named = HashSet::with_capacity(self.acks.len());
        let distinct = !self.acks.is_empty() && self.acks.iter().all(|a| named.insert(a.group_id));
        distinct.then(|| {
            let user = self.user_id.as_str();
            self.acks.iter().map(|a| (user, a.group_id)).collect()
        })
    }
}

/// Applies each request of `requests` that the statement can answer, in one statement, and
/// answers, per request in order, its cursor states (one per ack, in its order) or None
/// (nothing of it written: the general path answers it). Also answers how many requests
/// wrote anything.
pub fn ack(
    conn: &mut PgConnection,
    requests: &[AcksOf],
    wakes: &mut Wakes,
) -> QueryResult<(usize, Vec<Option<Vec<CursorState>>>)> {
    let included = statement_requests(requests);
    let mut answers: Vec<Option<Vec<CursorState>>> = vec![None; requests.len()];
    if included.is_empty() {
        return Ok((0, answers));
    }
    let query = AckQuery::new(requests, &included);
    let rows: Vec<Acked> = query.load(conn)?;
    // The statement has committed by now: whatever follows must not fail.
    let mut by_request: Vec<Vec<Acked>> = vec![Vec::new(); requests.len()];
    for row in rows {
        if let Some(of_request) = usize::try_from(row.request)
            .ok()
            .and_then(|r| by_request.get_mut(r))
        {
            of_request.push(row);
        }
    }
    let mut writes = 0;
    for &r in &included {
        let (request, rows) = (&requests[r], &by_request[r]);
        if rows.len() != request.acks.len() {
            // Refused, or left to the general path: nothing of it was written.
            continue;
        }
        writes += usize::from(rows.iter().any(|row| row.wrote));
        for row in rows {
            if row.state.receipts_changed {
                wakes.record(WakeEvent::CursorMoved(row.state.group_id));
            }
        }
        if rows.iter().any(|row| row.state.read_moved) {
            wakes.record(WakeEvent::ReadMoved(request.user_id.clone()));
        }
        // One row per asked group (the count was checked, and the groups are distinct):
        // every ack finds its own.
        let by_group: HashMap<i64, CursorState> = rows
            .iter()
            .map(|row| (row.state.group_id, row.state))
            .collect();
        answers[r] = request
            .acks
            .iter()
            .map(|a| by_group.get(&a.group_id).copied())
            .collect();
    }
    Ok((writes, answers))
}

/// The positions of the requests the statement takes: each naming its groups once, and no
/// membership an earlier one names (two moves of one row in one statement would apply one).
fn statement_requests(requests: &[AcksOf]) -> Vec<usize> {
    let mut taken = MembershipsTaken::default();
    (0..requests.len())
        .filter(|&r| taken.take(&requests[r]))
        .collect()
}

/// The memberships that earlier requests of one statement move.
#[derive(Default)]
pub struct MembershipsTaken<'a>(HashSet<(&'a str, i64)>);

impl<'a> MembershipsTaken<'a> {
    /// Whether the request can join the statement: it names each group once, and none of its
    /// memberships is taken. If so, its memberships are taken now.
    pub fn take(&mut self, request: &'a AcksOf) -> bool {
        let Some(memberships) = request.memberships() else {
            return false;
        };
        let free = memberships.iter().all(|m| !self.0.contains(m));
        if free {
            self.0.extend(memberships);
        }
        free
    }
}

/// The statement and its values: a query diesel keeps prepared on each connection, since
/// its text depends only on whether it carries one request or several. (`diesel::sql_query`
/// prepares its text anew on every call, and planning this statement takes about a
/// millisecond, as long as running it.) The values go first, once each, into a one-row
/// `params`, which the rest of the statement reads; every array has one element per ack.
struct AckQuery {
    /// Which request (its position in the caller's list) each ack belongs to.
    requests: Vec<i64>,
    user_ids: Vec<String>,
    /// None for the default device.
    devices: Vec<Option<String>>,
    /// The device as member events record it.
    device_columns: Vec<String>,
    group_ids: Vec<i64>,
    /// Where each group's delivered cursor goes (for its device).
    ack_to: Vec<i64>,
    /// Where each group's read cursor goes.
    read_to: Vec<i64>,
    now: NaiveDateTime,
    /// Several requests: a member row another transaction holds is not waited for.
    several: bool,
}

impl AckQuery {
    fn new(requests: &[AcksOf], included: &[usize]) -> AckQuery {
        let mut query = AckQuery {
            requests: Vec::new(),
            user_ids: Vec::new(),
            devices: Vec::new(),
            device_columns: Vec::new(),
            group_ids: Vec::new(),
            ack_to: Vec::new(),
            read_to: Vec::new(),
            now: now_utc(),
            several: included.len() > 1,
        };
        for &r in included {
            let request = &requests[r];
            for ack in &request.acks {
                let (ack_to, read_to) = ack.targets();
                query.requests.push(r as i64);
                query.user_ids.push(request.user_id.clone());
                query
                    .devices
                    .push(request.device.as_ref().map(|d| d.as_str().to_owned()));
                query
                    .device_columns
                    .push(device_column(request.device.as_ref()).to_owned());
                query.group_ids.push(ack.group_id);
                query.ack_to.push(ack_to);
                query.read_to.push(read_to);
            }
        }
        query
    }
}

impl QueryFragment<Pg> for AckQuery {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH params AS (SELECT ");
        out.push_bind_param::<Array<BigInt>, _>(&self.requests)?;
        out.push_sql("::bigint[] AS requests, ");
        out.push_bind_param::<Array<Text>, _>(&self.user_ids)?;
        out.push_sql("::text[] AS user_ids, ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.devices)?;
        out.push_sql("::text[] AS device_ids, ");
        out.push_bind_param::<Array<Text>, _>(&self.device_columns)?;
        out.push_sql("::text[] AS device_columns, ");
        out.push_bind_param::<Array<BigInt>, _>(&self.group_ids)?;
        out.push_sql("::bigint[] AS group_ids, ");
        out.push_bind_param::<Array<BigInt>, _>(&self.ack_to)?;
        out.push_sql("::bigint[] AS ack_tos, ");
        out.push_bind_param::<Array<BigInt>, _>(&self.read_to)?;
        out.push_sql("::bigint[] AS read_tos, ");
        out.push_bind_param::<Timestamp, _>(&self.now)?;
        out.push_sql("::timestamp AS now)");
        out.push_sql(statement_after_params(self.several));
        Ok(())
    }
}

impl QueryId for AckQuery {
    type QueryId = ();
    // Not a type-keyed statement: diesel keys its cache by the text instead.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for AckQuery {
    type SqlType = Untyped;
}

impl RunQueryDsl<PgConnection> for AckQuery {}

/// The statement after `params`, built once for one request and once for several.
fn statement_after_params(several: bool) -> &'static str {
    static ONE: OnceLock<String> = OnceLock::new();
    static SEVERAL: OnceLock<String> = OnceLock::new();
    if several {
        SEVERAL.get_or_init(|| statement_text(" SKIP LOCKED"))
    } else {
        ONE.get_or_init(|| statement_text(""))
    }
}

/// The statement after `params`; `member_lock_wait` follows the member rows' lock clause.
fn statement_text(member_lock_wait: &str) -> String {
    let param = |name: &str| format!("(SELECT {name} FROM params)");
    let (requests, users, devices) = (param("requests"), param("user_ids"), param("device_ids"));
    let (device_columns, group_ids) = (param("device_columns"), param("group_ids"));
    let (ack_tos, read_tos, now) = (param("ack_tos"), param("read_tos"), param("now"));
    let member_move = advance_member_sql("t.default_ack_to", "t.read_to", "t.ack_to");
    let read = MemberEventKind::Read.as_str();
    // What `cursors::ack` decides in Rust (`AckPlan`: whether an ack moves anything, a
    // device's cursor before its first ack, which moves change receipts or the read
    // position, the refusal beyond the last message) is decided here again in SQL; a change
    // to one is a change to the other, and the API tests run every ack of their PostgreSQL
    // runs through this statement and compare with the general path.
    // Each ack is one membership (a user in a group), none named twice. Rows are locked in
    // (group, user) order, the order of every write that locks several users' rows of a
    // group or several groups' rows of a user. A statement of several requests does not
    // wait for a member row another transaction holds (SKIP LOCKED): the request whose row
    // it is goes to the general path, which waits in a transaction of its own, so a busy
    // member row never holds up the other users' acks. The statement still waits for the
    // device cursor and badge rows it writes, while holding their member rows. The general
    // path takes all of a round's member rows before those (so it cannot hold a device
    // cursor the statement waits for while waiting for a member row the statement holds),
    // and the push builder holds nothing the statement waits for; a device's sign-out or
    // expiry deletes its cursor and badge rows holding no member row, so a rare cycle with
    // one of those remains, which PostgreSQL breaks after its deadlock timeout (the
    // statement's requests then go one by one through the general path).
    // The badge rows are locked in (group, device) order, as `lock_badges` locks one
    // device's, before the update (which reads the lock's rows). A badge row the push
    // builder changed after the statement began (it may have told of a newer message) is
    // left as it is: lowering it to this statement's count could leave it below the unread
    // count, and the builder would never correct the phone. The `= ANY(...)` conditions let
    // PostgreSQL probe each row by key instead of scanning every row of a user or device in
    // thousands of groups.
    format!(
        // The member rows. A group that is missing, a caller who is not a member and an ack
        // beyond the last message leave a row out, and then nothing of that request is
        // written (`complete`). So does a member row that another write changed after the
        // statement began (`seen`, the statement's snapshot, holds another version than
        // `locked`, the row as it is now): the messages the cursor rule counts would be
        // read as they were before that write (a recall of the member's own message, say,
        // which lowers their count), so the general path, whose update begins after its
        // lock, answers instead.
        ", asked AS ( \
           SELECT * FROM unnest({requests}, {users}, {devices}, {device_columns}, {group_ids}, \
               {ack_tos}, {read_tos}) \
             AS a(request, user_id, device_id, device_column, group_id, ack_to, read_to)), \
         seen AS ( \
           SELECT gm.group_id, gm.user_id, gm.xmin AS row_version \
           FROM asked a JOIN group_members gm \
             ON gm.group_id = a.group_id AND gm.user_id = a.user_id \
           WHERE gm.group_id = ANY({group_ids}::bigint[]) \
             AND gm.user_id = ANY({users}::text[])), \
         locked AS MATERIALIZED ( \
           SELECT a.request, a.group_id, a.user_id, a.device_id, a.device_column, \
             a.ack_to, a.read_to, g.last_msg_id, gm.xmin AS row_version, \
             gm.last_ack_msg_id AS ack_was, gm.last_read_msg_id AS read_was, \
             gm.delivered_msg_id AS delivered_was, gm.own_msgs_after_read AS own_was, \
             CASE WHEN a.device_id IS NULL THEN gm.last_ack_msg_id \
               ELSE COALESCE(dc.last_ack_msg_id, gm.joined_after_msg_id) END \
               AS device_ack_was \
           FROM asked a \
           JOIN groups g ON g.group_id = a.group_id \
           JOIN group_members gm ON gm.group_id = a.group_id AND gm.user_id = a.user_id \
           LEFT JOIN device_cursors dc ON dc.group_id = a.group_id \
             AND dc.user_id = a.user_id AND dc.device_id = a.device_id \
           WHERE a.ack_to <= g.last_msg_id AND gm.group_id = ANY({group_ids}::bigint[]) \
             AND gm.user_id = ANY({users}::text[]) \
           ORDER BY a.group_id, a.user_id FOR NO KEY UPDATE OF gm{member_lock_wait}), \
         complete AS ( \
           SELECT a.request FROM asked a \
           LEFT JOIN locked l ON l.request = a.request AND l.group_id = a.group_id \
           LEFT JOIN seen s ON s.group_id = l.group_id AND s.user_id = l.user_id \
             AND s.row_version = l.row_version \
           GROUP BY a.request HAVING count(s.group_id) = count(*)), \
         accepted AS ( \
           SELECT b.*, \
             NOT (b.ack_to <= b.device_ack_was AND b.read_to <= b.read_was) AS moves, \
             CASE WHEN b.device_id IS NULL THEN b.ack_to ELSE 0 END AS default_ack_to \
           FROM locked b WHERE b.request IN (SELECT request FROM complete)), \
         member_moved AS ( \
           {member_move} \
           FROM accepted t \
           WHERE group_members.group_id = t.group_id AND group_members.user_id = t.user_id \
             AND group_members.group_id = ANY({group_ids}::bigint[]) \
             AND group_members.user_id = ANY({users}::text[]) \
             AND t.moves AND (t.read_to > t.read_was OR t.ack_to > t.delivered_was \
               OR t.default_ack_to > t.ack_was) \
           RETURNING group_members.group_id, group_members.user_id, \
             group_members.last_ack_msg_id, group_members.last_read_msg_id, \
             group_members.delivered_msg_id, group_members.own_msgs_after_read), \
         device_moved AS ( \
           INSERT INTO device_cursors (group_id, user_id, device_id, last_ack_msg_id) \
           SELECT t.group_id, t.user_id, t.device_id, t.ack_to FROM accepted t \
           WHERE t.device_id IS NOT NULL AND t.moves ORDER BY t.group_id, t.user_id \
           {DEVICE_CURSOR_FORWARD} \
           RETURNING group_id, user_id, last_ack_msg_id), \
         settled AS ( \
           SELECT t.request, t.group_id, t.user_id, t.device_id, t.device_column, \
             t.last_msg_id, t.read_was, t.delivered_was, \
             COALESCE(m.last_read_msg_id, t.read_was) AS last_read_msg_id, \
             COALESCE(m.delivered_msg_id, t.delivered_was) AS delivered_msg_id, \
             COALESCE(m.own_msgs_after_read, t.own_was) AS own_msgs_after_read, \
             CASE WHEN t.device_id IS NULL THEN COALESCE(m.last_ack_msg_id, t.ack_was) \
               ELSE COALESCE(d.last_ack_msg_id, t.device_ack_was) END AS last_ack_msg_id, \
             (m.group_id IS NOT NULL OR d.group_id IS NOT NULL) AS wrote \
           FROM accepted t \
           LEFT JOIN member_moved m ON m.group_id = t.group_id AND m.user_id = t.user_id \
           LEFT JOIN device_moved d ON d.group_id = t.group_id AND d.user_id = t.user_id), \
         counted AS ( \
           SELECT group_members.*, \
             group_members.last_read_msg_id > group_members.read_was AS read_moved, \
             (group_members.last_read_msg_id > group_members.read_was \
               OR group_members.delivered_msg_id > group_members.delivered_was) \
               AS receipts_changed, \
             CAST({NOT_COUNTED_ABOVE_READ} AS BIGINT) AS not_counted_above_read, \
             CAST({MENTIONS_ABOVE_READ} AS BIGINT) AS unread_mention_count \
           FROM settled AS group_members), \
         receipt_change AS ( \
           INSERT INTO receipt_events \
             (group_id, reader_id, from_msg_id, to_msg_id, created_at) \
           SELECT group_id, user_id, read_was, delivered_msg_id, {now} FROM counted \
           WHERE receipts_changed), \
         read_event AS ( \
           INSERT INTO member_events (user_id, group_id, kind, device_id, created_at) \
           SELECT user_id, group_id, '{read}', device_column, {now} FROM counted \
           WHERE read_moved), \
         badge_seen AS ( \
           SELECT ps.group_id, ps.device_id, ps.xmin AS row_version \
           FROM counted c JOIN push_group_state ps \
             ON ps.device_id = c.device_id AND ps.group_id = c.group_id \
           WHERE c.read_moved AND ps.group_id = ANY({group_ids}::bigint[]) \
             AND ps.device_id = ANY({devices}::text[])), \
         badge_rows AS MATERIALIZED ( \
           SELECT ps.group_id, ps.device_id, ps.xmin AS row_version \
           FROM counted c JOIN push_group_state ps \
             ON ps.device_id = c.device_id AND ps.group_id = c.group_id \
           WHERE c.read_moved AND ps.group_id = ANY({group_ids}::bigint[]) \
             AND ps.device_id = ANY({devices}::text[]) \
           ORDER BY ps.group_id, ps.device_id FOR NO KEY UPDATE OF ps), \
         badge AS ( \
           {LOWER_BADGES} (SELECT c.group_id AS g, c.device_id AS d, \
               {UNREAD_OF_INPUTS} AS unread \
             FROM counted c \
             JOIN badge_rows b ON b.group_id = c.group_id AND b.device_id = c.device_id \
             JOIN badge_seen s ON s.group_id = b.group_id AND s.device_id = b.device_id \
               AND s.row_version = b.row_version) AS t \
           {LOWER_BADGES_OF_DEVICE} t.d \
             AND push_group_state.group_id = ANY({group_ids}::bigint[])) \
         SELECT request, group_id, last_ack_msg_id, last_read_msg_id, last_msg_id, \
           own_msgs_after_read, not_counted_above_read, unread_mention_count, \
           receipts_changed, read_moved, wrote \
         FROM counted"
    )
}

/// One ack's row of the statement's answer: its request, the cursor state the general path
/// answers too, and whether the statement wrote anything for it.
#[derive(QueryableByName, Clone)]
struct Acked {
    #[diesel(sql_type = BigInt)]
    request: i64,
    #[diesel(embed)]
    state: CursorState,
    #[diesel(sql_type = Bool)]
    wrote: bool,
}
