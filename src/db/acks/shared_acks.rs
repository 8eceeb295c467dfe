//! Acking: the one operation every ack takes, whatever the engine. Acks that arrive together
//! share one transaction (see [`crate::db::engine::shared_commits`]): one commit and one
//! flush for acks of many users, where each alone would pay its own. Acks of different users
//! touch different rows, so unlike sends they do not queue behind each other's locks; what
//! they share is the commit.
//!
//! The acks queue in a few lanes (a user's acks always in the same one), each with one task
//! that drains it. A lone ack goes at once. A batch never carries one membership twice (two
//! devices of one user acking one group at once): the later request waits for the next
//! transaction. [`super::cursors::ack_requests`] decides each request's answer; it is the same
//! code for a batch of one.

use crate::domain::refusal::Refusal;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use diesel::QueryResult;

use super::cursors::{ack_requests, ack_requests_beside_busy, refusal_of, AcksOf, CursorState};
use crate::db::engine::distribution::serving_citus;
use crate::db::engine::error::DbError;
use crate::db::engine::shared_commits::{Answered, SharedCommits, SharedWork};

use crate::db::AnyConnection;
use crate::wake_ups::events::Wakes;

/// How many transactions of acks one instance runs at once. Each lane's transactions run one
/// after another on one connection, so lanes let PostgreSQL use more than one core for acks
/// under load; fewer lanes make bigger batches. Two suits the two-core machines Chorus is
/// measured on; an instance on a bigger machine gains little from more, since its acks are
/// cheap beside the HTTP work around them.
pub const ACK_LANES: u64 = 2;

/// The ack queues of one instance, shared by all its workers.
pub type SharedAcks = SharedCommits<Acks>;

/// Requests of acks, queued by lane.
pub struct Acks;

impl SharedWork for Acks {
    type Key = u64;
    type Item = AcksOf;
    type Answer = Vec<CursorState>;
    type Refused = Refusal;
    const WHAT: &'static str = "ack";

    /// Oldest first, as many requests as fit: no membership twice, at most `limit` acks
    /// (group entries) in all, except that the oldest request goes however many it holds.
    fn choose(waiting: &[&AcksOf], limit: usize) -> Vec<usize> {
        let mut taken = MembershipsTaken::default();
        let mut acks = 0;
        let mut chosen = Vec::new();
        for (position, request) in waiting.iter().enumerate() {
            if acks >= limit {
                break;
            }
            let fits = acks + request.acks.len() <= limit && taken.take(request);
            if chosen.is_empty() || fits {
                acks += request.acks.len();
                chosen.push(position);
            }
        }
        chosen
    }

    fn store(
        conn: &mut AnyConnection,
        _lane: u64,
        requests: &[AcksOf],
        wakes: &mut Wakes,
    ) -> QueryResult<Vec<Answered<Acks>>> {
        ack_requests(conn, requests, wakes)
    }

    /// A request naming a membership another write holds (a send of that member's, a
    /// removal) goes alone after the batch, rather than hold up the acks beside it.
    fn store_several(
        conn: &mut AnyConnection,
        _lane: u64,
        requests: &[AcksOf],
        wakes: &mut Wakes,
    ) -> QueryResult<Vec<Option<Answered<Acks>>>> {
        ack_requests_beside_busy(conn, requests, wakes)
    }
}

/// The memberships of the requests chosen so far for one transaction.
#[derive(Default)]
struct MembershipsTaken<'a>(HashSet<(&'a str, i64)>);

impl<'a> MembershipsTaken<'a> {
    /// Whether the request can join the transaction: none of its memberships is taken. If
    /// so, its memberships are taken now.
    fn take(&mut self, request: &'a AcksOf) -> bool {
        let user = request.user_id.as_str();
        let free = request
            .acks
            .iter()
            .all(|a| !self.0.contains(&(user, a.group_id)));
        if free {
            self.0
                .extend(request.acks.iter().map(|a| (user, a.group_id)));
        }
        free
    }
}

impl SharedAcks {
    /// The request's cursor states once committed, one per ack in its order, or why it was
    /// refused (nothing of it written).
    ///
    /// On Citus every transaction stays on one group's shard: acks queue by group, and a
    /// request naming several groups is checked whole first (any refusal refuses it all,
    /// nothing written), then committed group by group. Should a group's transaction then
    /// fail, the answer is that error although other groups may have moved: acks only move
    /// cursors forward, so the client's retry of the same request lands the rest and moves
    /// nothing twice. (A refusal that arises between the check and a group's commit, such as
    /// a removal racing the ack, refuses the request in the same way.)
    pub async fn ack(&self, request: AcksOf) -> Result<Result<Vec<CursorState>, Refusal>, DbError> {
        if !serving_citus() {
            let mut hasher = DefaultHasher::new();
            request.user_id.hash(&mut hasher);
            return self.submit(hasher.finish() % ACK_LANES, request).await;
        }
        let by_group = split_by_group(&request);
        if let [(group_id, _)] = by_group[..] {
            return self.submit(group_id as u64, request).await;
        }
        let checked = request.clone();
        if let Some(refusal) = self
            .db()
            .read(move |conn| refusal_of(conn, &checked))
            .await?
        {
            return Ok(Err(refusal));
        }
        // The groups' transactions run side by side, each in its group's queue.
        let per_group: Vec<_> = by_group
            .iter()
            .map(|(group_id, indexes)| {
                let part = AcksOf {
                    user_id: request.user_id.clone(),
                    device: request.device.clone(),
                    acks: indexes.iter().map(|&i| request.acks[i]).collect(),
                };
                let queues = self.clone();
                let key = *group_id as u64;
                tokio::spawn(async move { queues.submit(key, part).await })
            })
            .collect();
        let mut states: Vec<Option<CursorState>> = vec![None; request.acks.len()];
        for ((_, indexes), answer) in by_group.iter().zip(per_group) {
            let answer = answer.await.map_err(|_| DbError::Task)?;
            match answer? {
                Ok(part) => {
                    for (&i, state) in indexes.iter().zip(part) {
                        states[i] = Some(state);
                    }
                }
                Err(Refusal::InBatch { index, refusal }) => {
                    let index = indexes.get(index).copied().unwrap_or(index);
                    return Ok(Err(Refusal::InBatch { index, refusal }));
                }
                Err(refusal) => return Ok(Err(refusal)),
            }
        }
        Ok(Ok(states.into_iter().flatten().collect()))
    }
}

/// The request's groups in the order they first appear, each with the positions of its acks.
fn split_by_group(request: &AcksOf) -> Vec<(i64, Vec<usize>)> {
    let mut by_group: Vec<(i64, Vec<usize>)> = Vec::new();
    for (i, ack) in request.acks.iter().enumerate() {
        match by_group.iter_mut().find(|(g, _)| *g == ack.group_id) {
            Some((_, indexes)) => indexes.push(i),
            None => by_group.push((ack.group_id, vec![i])),
        }
    }
    by_group
}
