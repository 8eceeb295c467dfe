//! A sender that long-polls `GET /v1/receipts` through the kills, keeping the counts each
//! message was last reported with, for the check at the end that the last report of every
//! message is its final state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::Value;

use crate::support::client::ApiClient;
use crate::support::http::Reply;

use super::feed_poll::{PollTally, QUIET_FOR_S};

/// (read_count, unread_count, delivered_count)
pub type Counts = (i64, i64, i64);

pub fn counts(value: &Value) -> Counts {
    let count = |field: &str| value[field].as_i64().expect(field);
    (
        count("read_count"),
        count("unread_count"),
        count("delivered_count"),
    )
}

pub struct ReceiptsPoller {
    /// `user#device`
    pub caller: String,
    cursor: String,
    /// The counts of the last report of each (group_id, msg_id).
    pub latest: HashMap<(i64, i64), Counts>,
    pub changes_reported: u64,
    pub polls_answered: u64,
    pub tally: PollTally,
}

impl ReceiptsPoller {
    pub async fn start(api: &ApiClient, caller: &str) -> ReceiptsPoller {
        let cursor = match api.call(Method::GET, "/v1/receipts", caller, None).await {
            Reply::Answered(200, body) => body["cursor"].as_str().expect("cursor").to_owned(),
            other => panic!("{caller}'s first /v1/receipts failed: {other:?}"),
        };
        ReceiptsPoller {
            caller: caller.to_owned(),
            cursor,
            latest: HashMap::new(),
            changes_reported: 0,
            polls_answered: 0,
            tally: PollTally::default(),
        }
    }

    pub fn user(&self) -> &str {
        self.caller.split('#').next().unwrap_or(&self.caller)
    }

    /// Polls with a random `timeout_s` of 1-4 s until `stop`, retrying a lost or refused poll
    /// with the same cursor.
    pub async fn run(mut self, api: ApiClient, stop: Arc<AtomicBool>, mut rng: StdRng) -> Self {
        while !stop.load(Ordering::SeqCst) {
            let timeout_s = rng.random_range(1..=4);
            if self.poll_once(&api, timeout_s).await.is_none() {
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
            }
        }
        self
    }

    /// After the traffic: polls with `timeout_s=0` until an answer has nothing more, then
    /// waits [`QUIET_FOR_S`] for more, and starts again if any came.
    pub async fn drain(&mut self, api: &ApiClient) {
        let mut attempts = 0;
        loop {
            while self.poll_once(api, 0).await != Some(false) {
                attempts += 1;
                assert!(
                    attempts < 10_000,
                    "{} could not drain /v1/receipts",
                    self.caller
                );
            }
            let reported = self.changes_reported;
            if self.poll_once(api, QUIET_FOR_S).await == Some(false)
                && self.changes_reported == reported
            {
                return;
            }
        }
    }

    async fn poll_once(&mut self, api: &ApiClient, timeout_s: u64) -> Option<bool> {
        let path = format!(
            "/v1/receipts?cursor={}&timeout_s={timeout_s}&limit=200",
            self.cursor
        );
        let body = self.tally.poll(api, &self.caller, &path).await?;
        Some(self.take_answer(&body))
    }

    fn take_answer(&mut self, body: &Value) -> bool {
        for change in body["changes"].as_array().expect("changes") {
            let group_id = change["group_id"].as_i64().expect("group_id");
            let msg_id = change["msg_id"].as_i64().expect("msg_id");
            self.latest.insert((group_id, msg_id), counts(change));
            self.changes_reported += 1;
        }
        self.cursor = body["cursor"].as_str().expect("cursor").to_owned();
        self.polls_answered += 1;
        body["has_more"].as_bool().expect("has_more")
    }
}

/// The current counts of every message `sender` sent to `groups`, read page by page with
/// `with_receipts=true` (every instance is up then).
pub async fn final_counts(
    api: &ApiClient,
    sender: &str,
    groups: &[i64],
) -> HashMap<(i64, i64), Counts> {
    let mut now = HashMap::new();
    for &group_id in groups {
        let mut after = 0;
        loop {
            let path = format!(
                "/v1/groups/{group_id}/messages?after_msg_id={after}&limit=200&with_receipts=true"
            );
            let body = match api.call(Method::GET, &path, sender, None).await {
                Reply::Answered(200, body) => body,
                other => panic!("reading {sender}'s receipts in {group_id} failed: {other:?}"),
            };
            for m in body["messages"].as_array().expect("messages") {
                after = m["msg_id"].as_i64().expect("msg_id");
                if m["kind"] == "message" && m["sender_id"] == sender {
                    now.insert((group_id, after), counts(&m["receipt"]));
                }
            }
            if !body["has_more"].as_bool().expect("has_more") {
                break;
            }
        }
    }
    now
}
