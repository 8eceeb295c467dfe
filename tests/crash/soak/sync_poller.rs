//! A device that long-polls `GET /v1/sync` through the kills, like the client loop of
//! openapi.yaml: it keeps the chain of cursors it was given and when each arrived, and which
//! groups each answer reported, for the owed-changes check at the end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::Value;

use crate::support::client::ApiClient;
use crate::support::http::Reply;

use super::feed_poll::{PollTally, QUIET_FOR_S};

/// A group an answer named: in `groups` with its `last_msg_id`, or in `removed_group_ids`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mention {
    Changed { last_msg_id: i64 },
    Removed,
}

pub struct SyncPoller {
    /// `user#device`
    pub caller: String,
    cursor: String,
    /// When cursor j of the chain arrived (cursor 0: the poll without a cursor). Cursor j+1
    /// came with the answer to the poll with cursor j.
    pub cursor_at: Vec<Instant>,
    /// Per group, each (j, mention) of an answer to the poll with cursor j, in order.
    pub mentions: HashMap<i64, Vec<(usize, Mention)>>,
    pub polls_answered: u64,
    pub tally: PollTally,
}

impl SyncPoller {
    /// Takes the starting cursor (every instance is up then).
    pub async fn start(api: &ApiClient, caller: &str) -> SyncPoller {
        let mut poller = SyncPoller {
            caller: caller.to_owned(),
            cursor: String::new(),
            cursor_at: Vec::new(),
            mentions: HashMap::new(),
            polls_answered: 0,
            tally: PollTally::default(),
        };
        match api.call(Method::GET, "/v1/sync", caller, None).await {
            Reply::Answered(200, body) => {
                poller.cursor = body["cursor"].as_str().expect("cursor").to_owned();
                poller.cursor_at.push(Instant::now());
                poller
            }
            other => panic!("{caller}'s first /v1/sync failed: {other:?}"),
        }
    }

    pub fn user(&self) -> &str {
        self.caller.split('#').next().unwrap_or(&self.caller)
    }

    /// Polls with a random `timeout_s` of 1-4 s until `stop`; a lost or refused poll is
    /// retried with the same cursor, as a client must.
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
                assert!(attempts < 1000, "{} could not drain /v1/sync", self.caller);
            }
            let mentioned = self.mentioned();
            if self.poll_once(api, QUIET_FOR_S).await == Some(false)
                && self.mentioned() == mentioned
            {
                return;
            }
        }
    }

    /// How many group mentions every answer so far carried.
    fn mentioned(&self) -> usize {
        self.mentions.values().map(Vec::len).sum()
    }

    /// One poll with the current cursor: Some(has_more) when answered 200.
    async fn poll_once(&mut self, api: &ApiClient, timeout_s: u64) -> Option<bool> {
        let path = format!(
            "/v1/sync?cursor={}&timeout_s={timeout_s}&limit=50",
            self.cursor
        );
        let body = self.tally.poll(api, &self.caller, &path).await?;
        Some(self.take_answer(&body))
    }

    fn take_answer(&mut self, body: &Value) -> bool {
        let j = self.cursor_at.len() - 1;
        for group in body["groups"].as_array().expect("groups") {
            let group_id = group["group_id"].as_i64().expect("group_id");
            let last_msg_id = group["last_msg_id"].as_i64().expect("last_msg_id");
            let mention = Mention::Changed { last_msg_id };
            self.mentions
                .entry(group_id)
                .or_default()
                .push((j, mention));
        }
        for removed in body["removed_group_ids"].as_array().expect("removed") {
            let group_id = removed.as_i64().expect("removed group id");
            let mention = Mention::Removed;
            self.mentions
                .entry(group_id)
                .or_default()
                .push((j, mention));
        }
        self.cursor = body["cursor"].as_str().expect("cursor").to_owned();
        self.cursor_at.push(Instant::now());
        self.polls_answered += 1;
        body["has_more"].as_bool().expect("has_more")
    }
}
