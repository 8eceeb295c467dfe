//! The 32 concurrent writers: each alternates sends and acks over the groups, so every request
//! writes, and records how each request ended and when.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::{Outcome, WRITER_REQUESTS};
use crate::support::client::ApiClient;
use crate::support::http::Reply;

/// Runs every writer to the end of its share of [`WRITER_REQUESTS`]; times count from `t0`.
pub async fn run(api: &ApiClient, users: &[String], groups: &[i64], t0: Instant) -> Vec<Outcome> {
    let groups = Arc::new(groups.to_vec());
    // The highest msg_id sent to each group so far: what an ack can move a cursor to.
    let known: Arc<Vec<AtomicI64>> = Arc::new(groups.iter().map(|_| AtomicI64::new(0)).collect());
    let writers = users.len();
    let tasks: Vec<_> = users
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let quota = WRITER_REQUESTS / writers + usize::from(i < WRITER_REQUESTS % writers);
            let writer = Writer {
                index: i,
                user: user.clone(),
                api: api.clone(),
                groups: groups.clone(),
                known: known.clone(),
            };
            tokio::spawn(writer.run(quota, t0))
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.expect("writer task"));
    }
    outcomes
}

struct Writer {
    index: usize,
    user: String,
    api: ApiClient,
    groups: Arc<Vec<i64>>,
    known: Arc<Vec<AtomicI64>>,
}

impl Writer {
    async fn run(self, quota: usize, t0: Instant) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(quota);
        for j in 0..quota {
            let slot = (self.index + j) % self.groups.len();
            let group_id = self.groups[slot];
            let last_known = self.known[slot].load(Ordering::SeqCst);
            let started = t0.elapsed();
            let (kind, reply) = if j % 2 == 0 || last_known == 0 {
                let cmid = format!("{}-{j}", self.user);
                let reply = self.api.send(&self.user, group_id, &cmid, "concurrent");
                ("send", reply.await)
            } else {
                let read = (last_known - (j as i64 % 3)).max(0);
                let body = json!({"last_ack_msg_id": last_known, "last_read_msg_id": read});
                ("ack", self.api.ack(&self.user, group_id, &body).await)
            };
            if let (&"send", Reply::Answered(201, body)) = (&kind, &reply) {
                let msg_id = body["msg_id"].as_i64().expect("msg_id");
                self.known[slot].fetch_max(msg_id, Ordering::SeqCst);
            }
            outcomes.push(Outcome::of(kind, reply, started, t0.elapsed()));
        }
        outcomes
    }
}
