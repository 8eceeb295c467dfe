//! One member's connection while the server is killed: sends messages and recalls, edits and
//! (as the owner) deletes its own earlier ones, first retrying every request whose response a
//! kill swallowed, with the same client_msg_id and body.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::client::ApiClient;
use crate::support::http::Reply;

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    Send { content: String },
    Recall { target: i64 },
    Edit { target: i64, content: String },
    Delete { target: i64 },
}

impl Ask {
    /// The entry's `kind` in the log.
    pub fn kind(&self) -> &'static str {
        match self {
            Ask::Send { .. } => "message",
            Ask::Recall { .. } => "recall",
            Ask::Edit { .. } => "edit",
            Ask::Delete { .. } => "delete",
        }
    }

    pub fn target(&self) -> Option<i64> {
        match self {
            Ask::Send { .. } => None,
            Ask::Recall { target } | Ask::Edit { target, .. } | Ask::Delete { target } => {
                Some(*target)
            }
        }
    }
}

/// One request under its idempotency key.
#[derive(Debug, Clone)]
pub struct Request {
    pub client_msg_id: String,
    pub ask: Ask,
}

impl Request {
    fn body(&self) -> Value {
        let mut body = json!({"client_msg_id": self.client_msg_id, "kind": self.ask.kind()});
        if let Some(target) = self.ask.target() {
            body["target_msg_id"] = json!(target);
        }
        if let Ask::Send { content } | Ask::Edit { content, .. } = &self.ask {
            body["content"] = json!(content);
        }
        body
    }

    /// Whether a 2xx body is this request's entry.
    fn is_answered_by(&self, body: &Value) -> bool {
        let content_fits = match &self.ask {
            Ask::Send { content } => body["content"].as_str() == Some(content),
            _ => true,
        };
        body["client_msg_id"].as_str() == Some(self.client_msg_id.as_str())
            && body["kind"].as_str() == Some(self.ask.kind())
            && body["target_msg_id"].as_i64() == self.ask.target()
            && content_fits
    }
}

/// A request answered 2xx: the server promised its entry is in the log, once, as `msg_id`.
#[derive(Debug, Clone)]
pub struct Acknowledged {
    pub request: Request,
    pub msg_id: i64,
}

pub struct ChangeLane {
    pub user: &'static str,
    pub group_id: i64,
    /// The group's owner, who may delete.
    owner: bool,
    next: u64,
    pub pending: Vec<Request>,
    pub acknowledged: Vec<Acknowledged>,
    /// Acknowledged messages of this lane, not recalled or deleted, with no change pending:
    /// what it may change next. A target never has two changes in flight, so every change
    /// the lane makes is one the server should accept.
    live: Vec<i64>,
    /// First attempts whose response a kill swallowed, of sends and of changes.
    pub lost_sends: u64,
    pub lost_changes: u64,
    /// Retries answered 200 (the lost attempt had committed) or 201 (it had not).
    pub retried_200: u64,
    pub retried_201: u64,
    pub problems: Vec<String>,
}

impl ChangeLane {
    pub fn new(user: &'static str, group_id: i64, owner: bool) -> ChangeLane {
        ChangeLane {
            user,
            group_id,
            owner,
            next: 0,
            pending: Vec::new(),
            acknowledged: Vec::new(),
            live: Vec::new(),
            lost_sends: 0,
            lost_changes: 0,
            retried_200: 0,
            retried_201: 0,
            problems: Vec::new(),
        }
    }

    /// Retries every pending request (until `stop`), then makes new ones until `stop` (only
    /// when `new_requests`).
    pub async fn run_phase(
        mut self,
        api: ApiClient,
        stop: Arc<AtomicBool>,
        mut rng: StdRng,
        new_requests: bool,
    ) -> ChangeLane {
        let pending = std::mem::take(&mut self.pending);
        let mut queue = pending.into_iter();
        for request in queue.by_ref() {
            if stop.load(Ordering::SeqCst) {
                self.pending.push(request);
                break;
            }
            self.attempt(&api, request, true).await;
        }
        self.pending.extend(queue);
        while new_requests && !stop.load(Ordering::SeqCst) {
            let request = self.next_request(&mut rng);
            self.attempt(&api, request, false).await;
            if rng.random_bool(0.2) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
            }
        }
        self
    }

    /// A change of a live message (60%, when there is one) or a new message.
    fn next_request(&mut self, rng: &mut StdRng) -> Request {
        self.next += 1;
        let client_msg_id = format!("{}-{}", self.user, self.next);
        let ask = if !self.live.is_empty() && rng.random_bool(0.6) {
            let target = self.live.swap_remove(rng.random_range(0..self.live.len()));
            match rng.random_range(0..if self.owner { 3 } else { 2 }) {
                0 => Ask::Recall { target },
                1 => Ask::Edit {
                    target,
                    content: format!("{} edits {target} ({})", self.user, self.next),
                },
                _ => Ask::Delete { target },
            }
        } else {
            Ask::Send {
                content: format!("{} says {}", self.user, self.next),
            }
        };
        Request { client_msg_id, ask }
    }

    async fn attempt(&mut self, api: &ApiClient, request: Request, retry: bool) {
        let path = format!("/v1/groups/{}/messages", self.group_id);
        let reply = api
            .call(Method::POST, &path, self.user, Some(&request.body()))
            .await;
        match reply {
            Reply::Answered(status @ (200 | 201), body)
                if request.is_answered_by(&body) && (retry || status == 201) =>
            {
                if retry {
                    match status {
                        200 => self.retried_200 += 1,
                        _ => self.retried_201 += 1,
                    }
                }
                let msg_id = body["msg_id"].as_i64().unwrap_or_default();
                self.acknowledge(request, msg_id);
            }
            Reply::Lost(_) => {
                if !retry {
                    match request.ask {
                        Ask::Send { .. } => self.lost_sends += 1,
                        _ => self.lost_changes += 1,
                    }
                }
                self.pending.push(request);
            }
            Reply::Answered(status, body) => {
                // A refusal is final: the request is answered, and its entry must be nowhere.
                self.problems.push(format!(
                    "{} {:?} answered {status}: {body}",
                    request.client_msg_id, request.ask
                ));
            }
        }
    }

    fn acknowledge(&mut self, request: Request, msg_id: i64) {
        match &request.ask {
            Ask::Send { .. } => self.live.push(msg_id),
            Ask::Edit { target, .. } => self.live.push(*target),
            Ask::Recall { .. } | Ask::Delete { .. } => {}
        }
        self.acknowledged.push(Acknowledged { request, msg_id });
    }
}
