//! Membership churn through the kills: the owner of one group adds users and removes them, and
//! they leave by themselves, each operation retried until an instance answers it. Every change
//! is recorded with when its first attempt started and when it was answered, so the owed
//! checks know when a user surely was a member.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::json;

use crate::support::client::ApiClient;
use crate::support::http::Reply;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    Added,
    Removed,
    Left,
}

/// One membership change that took effect.
#[derive(Clone, Debug)]
pub struct MembershipChange {
    pub user: &'static str,
    pub change: Change,
    pub first_sent_at: Instant,
    pub answered_at: Instant,
}

pub struct Churn {
    pub group_id: i64,
    pub owner: &'static str,
    users: Vec<(&'static str, bool)>,
    pub changes: Vec<MembershipChange>,
    pub attempts_lost: u64,
    pub attempts_unavailable: u64,
    pub problems: Vec<String>,
}

impl Churn {
    /// `users` start outside the group.
    pub fn new(group_id: i64, owner: &'static str, users: &[&'static str]) -> Churn {
        Churn {
            group_id,
            owner,
            users: users.iter().map(|u| (*u, false)).collect(),
            changes: Vec::new(),
            attempts_lost: 0,
            attempts_unavailable: 0,
            problems: Vec::new(),
        }
    }

    /// One change every 0.2-1 s until `stop`; a change under way is finished first.
    pub async fn run(mut self, api: ApiClient, stop: Arc<AtomicBool>, mut rng: StdRng) -> Self {
        while !stop.load(Ordering::SeqCst) {
            let i = rng.random_range(0..self.users.len());
            let (user, member) = self.users[i];
            let change = match (member, rng.random_bool(0.5)) {
                (false, _) => Change::Added,
                (true, true) => Change::Removed,
                (true, false) => Change::Left,
            };
            if self.apply(&api, user, change, &mut rng).await {
                self.users[i].1 = change == Change::Added;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1000))).await;
        }
        self
    }

    /// Sends the change until answered; true when it took effect. A retry after a lost
    /// attempt may find it already done: `added: []`, or 404 for a removal.
    async fn apply(
        &mut self,
        api: &ApiClient,
        user: &'static str,
        change: Change,
        rng: &mut StdRng,
    ) -> bool {
        let first_sent_at = Instant::now();
        let mut retry = false;
        loop {
            let reply = self.attempt(api, user, change).await;
            let done = match reply {
                Reply::Answered(200, _) if change == Change::Added => true,
                Reply::Answered(204, _) => true,
                Reply::Answered(404, _) if retry && change != Change::Added => true,
                Reply::Answered(503, _) => {
                    self.attempts_unavailable += 1;
                    false
                }
                Reply::Lost(_) => {
                    self.attempts_lost += 1;
                    false
                }
                Reply::Answered(status, body) => {
                    self.problems.push(format!(
                        "{change:?} {user} in group {} answered {status}: {body}",
                        self.group_id
                    ));
                    return false;
                }
            };
            if done {
                self.changes.push(MembershipChange {
                    user,
                    change,
                    first_sent_at,
                    answered_at: Instant::now(),
                });
                return true;
            }
            retry = true;
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
        }
    }

    async fn attempt(&self, api: &ApiClient, user: &str, change: Change) -> Reply {
        let group_id = self.group_id;
        match change {
            Change::Added => {
                let path = format!("/v1/groups/{group_id}/members");
                let body = json!({ "user_ids": [user] });
                api.call(Method::POST, &path, self.owner, Some(&body)).await
            }
            Change::Removed => {
                let path = format!("/v1/groups/{group_id}/members/{user}");
                api.call(Method::DELETE, &path, self.owner, None).await
            }
            Change::Left => {
                let path = format!("/v1/groups/{group_id}/members/{user}");
                api.call(Method::DELETE, &path, user, None).await
            }
        }
    }

    /// The windows in which `user` surely was a member: from an add's answer to the start of
    /// the next removal or leave (open at the end when they stayed).
    pub fn member_windows(&self, user: &str) -> Vec<(Instant, Option<Instant>)> {
        let mut windows = Vec::new();
        let mut joined: Option<Instant> = None;
        for c in self.changes.iter().filter(|c| c.user == user) {
            match (c.change, joined) {
                (Change::Added, _) => joined = Some(c.answered_at),
                (_, Some(from)) => {
                    windows.push((from, Some(c.first_sent_at)));
                    joined = None;
                }
                (_, None) => {}
            }
        }
        windows.extend(joined.map(|from| (from, None)));
        windows
    }
}
