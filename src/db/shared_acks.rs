//! Acks that arrive together share one statement (PostgreSQL): one round trip, one commit
//! and one flush for acks of many users, where each alone would pay its own. Acks of
//! different users touch different rows, so unlike sends they do not queue behind each
//! other's locks; what they share is the statement's cost and the commit's.
//!
//! The acks queue in a few lanes (a user's acks always in the same one), each with one task
//! that drains it (see [`super::shared_statement`]); the task stores each batch with
//! [`super::ack_statement::ack`]. A lone ack goes at once. A batch never carries one
//! membership twice (two devices of one user acking one group at once): the later request
//! waits for the next statement. A request the statement leaves out (a refusal, a group
//! named twice, a member row another write holds or changed) answers None, and its caller
//! takes the general path, which decides it alone.

use std::hash::{DefaultHasher, Hash, Hasher};

use diesel::{PgConnection, QueryResult};

use super::ack_statement::{self, AcksOf, MembershipsTaken};
use super::cursors::CursorState;
use super::error::DbError;
use super::shared_statement::{SharedStatements, SharedWork};
use crate::wake::Wakes;

/// How many statements of acks one instance runs at once. Each lane's statements run one
/// after another on one connection, so lanes let PostgreSQL use more than one core for acks
/// under load; fewer lanes make bigger batches. Two suits the two-core machines Chorus is
/// measured on; an instance on a bigger machine gains little from more, since its acks are
/// cheap beside the HTTP work around them.
pub const ACK_LANES: u64 = 2;

/// The ack queues of one instance, shared by all its workers.
pub type SharedAcks = SharedStatements<Acks>;

/// Requests of acks, queued by lane.
pub struct Acks;

impl SharedWork for Acks {
    type Key = u64;
    type Item = AcksOf;
    type Answer = Vec<CursorState>;
    const WHAT: &'static str = "ack";

    /// Oldest first, as many requests as fit: no membership twice, at most `limit` acks
    /// (group entries) in all, except that the oldest request goes however many it holds.
    /// (The statement joins its acks with each other a few times, in plans made for a
    /// handful of rows, so its cost grows faster than its size: many small statements in
    /// turn beat one large one.)
    fn choose(waiting: &[&AcksOf], limit: usize) -> Vec<usize> {
        let mut taken = MembershipsTaken::default();
        let mut acks = 0;
        let mut chosen = Vec::new();
        for (position, request) in waiting.iter().enumerate() {
            if acks >= limit {
                break;
            }
            // The oldest goes whatever it names (the statement leaves out a request that
            // names a group twice, and its caller takes the general path).
            let fits = acks + request.acks.len() <= limit && taken.take(request);
            if chosen.is_empty() || fits {
                acks += request.acks.len();
                chosen.push(position);
            }
        }
        chosen
    }

    fn store(
        conn: &mut PgConnection,
        _lane: u64,
        requests: &[AcksOf],
        wakes: &mut Wakes,
    ) -> QueryResult<(usize, Vec<Option<Vec<CursorState>>>)> {
        ack_statement::ack(conn, requests, wakes)
    }
}

impl SharedAcks {
    /// The request's cursor states once committed, one per ack in its order; None when the
    /// general path must take it: the engine has no such statement, or the statement left
    /// it out.
    pub async fn ack(&self, request: AcksOf) -> Result<Option<Vec<CursorState>>, DbError> {
        if request.memberships().is_none() {
            return Ok(None);
        }
        let mut hasher = DefaultHasher::new();
        request.user_id.hash(&mut hasher);
        self.submit(hasher.finish() % ACK_LANES, request).await
    }
}
