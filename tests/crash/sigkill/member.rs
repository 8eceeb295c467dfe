//! A member during the kills: pulls a page after its cursor, acks it (sometimes reading less
//! than it acks), and checks that every cursor the server reports is at least the highest it
//! reported before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::client::ApiClient;
use crate::support::http::Reply;

pub struct MemberClient {
    pub user: String,
    pub groups: Vec<i64>,
    /// Highest (last_ack_msg_id, last_read_msg_id) any 2xx response reported, per group.
    pub highest: HashMap<i64, (i64, i64)>,
    pub pulls: u64,
    pub pulls_lost: u64,
    pub acks: u64,
    pub acks_lost: u64,
    /// Pulls and acks answered `503 unavailable` (the database was down).
    pub unavailable: u64,
    pub backwards: Vec<String>,
    pub gaps: Vec<String>,
    pub problems: Vec<String>,
}

impl MemberClient {
    pub fn new(user: &str, groups: Vec<i64>) -> MemberClient {
        MemberClient {
            user: user.to_owned(),
            groups,
            highest: HashMap::new(),
            pulls: 0,
            pulls_lost: 0,
            acks: 0,
            acks_lost: 0,
            unavailable: 0,
            backwards: Vec::new(),
            gaps: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Checks reported cursors against the highest seen before (within a phase and across
    /// restarts), then raises the highest.
    fn observe(&mut self, group_id: i64, ack: i64, read: i64, what: &str) {
        let (was_ack, was_read) = self.highest.get(&group_id).copied().unwrap_or((0, 0));
        if ack < was_ack || read < was_read {
            self.backwards.push(format!(
                "{} in group {group_id}: {what} reported (ack {ack}, read {read}) after \
                 (ack {was_ack}, read {was_read}) had been reported",
                self.user
            ));
        }
        self.highest
            .insert(group_id, (was_ack.max(ack), was_read.max(read)));
    }

    /// Pulls and acks the member's groups in turn until `stop`.
    pub async fn run_phase(
        mut self,
        api: ApiClient,
        stop: Arc<AtomicBool>,
        mut rng: StdRng,
    ) -> MemberClient {
        let mut turn = rng.random_range(0..self.groups.len());
        while !stop.load(Ordering::SeqCst) {
            let group_id = self.groups[turn % self.groups.len()];
            turn += 1;
            let limit = rng.random_range(1..=40);
            let Some((read, ids)) = self.pull(&api, group_id, limit).await else {
                // A pause, as after a lost send: a dead server refuses at once.
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
                continue;
            };
            let Some(&last) = ids.last() else {
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..10))).await;
                continue;
            };
            // Another device of the member may have read past this page already.
            let read_to = rng
                .random_bool(0.4)
                .then(|| rng.random_range(read.min(last)..=last));
            self.ack(&api, group_id, last, read_to).await;
        }
        self
    }

    /// One page after the member's cursor: its last_read_msg_id and message ids, checked to
    /// follow the cursor without a gap. None when the pull failed.
    async fn pull(
        &mut self,
        api: &ApiClient,
        group_id: i64,
        limit: i32,
    ) -> Option<(i64, Vec<i64>)> {
        let path = format!("/v1/groups/{group_id}/messages?limit={limit}");
        let body = match api.call(Method::GET, &path, &self.user, None).await {
            Reply::Answered(200, body) => body,
            Reply::Answered(503, _) => {
                self.unavailable += 1;
                return None;
            }
            Reply::Answered(status, body) => {
                self.problems.push(format!(
                    "pull of group {group_id} answered {status}: {body}"
                ));
                return None;
            }
            Reply::Lost(_) => {
                self.pulls_lost += 1;
                return None;
            }
        };
        self.pulls += 1;
        let ack = body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id");
        let read = body["last_read_msg_id"].as_i64().expect("last_read_msg_id");
        self.observe(group_id, ack, read, "a pull");
        let ids: Vec<i64> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["msg_id"].as_i64().expect("msg_id"))
            .collect();
        let expected: Vec<i64> = (ack + 1..=ack + ids.len() as i64).collect();
        if ids != expected {
            self.gaps.push(format!(
                "{} pulled group {group_id} after {ack}: ids {ids:?}, expected {expected:?}",
                self.user
            ));
        }
        Some((read, ids))
    }

    /// Acks up to `last` (and reads up to `read_to`, or `last` too), checking the cursors the
    /// answer reports.
    async fn ack(&mut self, api: &ApiClient, group_id: i64, last: i64, read_to: Option<i64>) {
        let request = match read_to {
            Some(read_to) => json!({"last_ack_msg_id": last, "last_read_msg_id": read_to}),
            None => json!({"last_ack_msg_id": last}),
        };
        match api.ack(&self.user, group_id, &request).await {
            Reply::Answered(200, body) => {
                self.acks += 1;
                self.check_ack_answer(group_id, &request, &body, last, read_to);
            }
            Reply::Answered(503, _) => self.unavailable += 1,
            Reply::Answered(status, body) => self.problems.push(format!(
                "ack {request} in group {group_id}: {status} {body}"
            )),
            Reply::Lost(_) => self.acks_lost += 1,
        }
    }

    fn check_ack_answer(
        &mut self,
        group_id: i64,
        request: &Value,
        body: &Value,
        last: i64,
        read_to: Option<i64>,
    ) {
        let new_ack = body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id");
        let new_read = body["last_read_msg_id"].as_i64().expect("last_read_msg_id");
        if new_ack < last || new_read < read_to.unwrap_or(last) {
            self.backwards.push(format!(
                "{} in group {group_id}: ack {request} answered (ack {new_ack}, \
                 read {new_read})",
                self.user
            ));
        }
        self.observe(group_id, new_ack, new_read, "an ack");
    }
}
