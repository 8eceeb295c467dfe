//! A sender's connection during the kills: sends new messages, and first retries those whose
//! response a crash swallowed (or that a database outage answered 503), counting how each
//! attempt ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use serde_json::Value;

use crate::support::client::ApiClient;
use crate::support::http::Reply;

/// A send whose response never came: retried with the same client_msg_id and content.
#[derive(Debug, Clone)]
pub struct PendingSend {
    pub group_id: i64,
    pub client_msg_id: String,
    pub content: String,
    /// When its first attempt started: the message cannot have committed before.
    pub first_sent_at: Instant,
}

/// A send answered 2xx: the server promised this message is stored, once, with this id.
#[derive(Debug, Clone)]
pub struct AcknowledgedSend {
    pub group_id: i64,
    pub sender_id: String,
    pub client_msg_id: String,
    pub content: String,
    pub msg_id: i64,
    pub first_sent_at: Instant,
    /// When the 2xx arrived: the message had committed by then.
    pub acknowledged_at: Instant,
}

/// One sender's connection: sends new messages, and first retries those whose response a
/// crash swallowed. Each lane owns its client_msg_ids, so lanes never race each other.
pub struct SenderLane {
    pub index: usize,
    pub user: String,
    pub groups: Vec<i64>,
    next: u64,
    pub pending: Vec<PendingSend>,
    pub acknowledged: Vec<AcknowledgedSend>,
    /// New client_msg_ids sent.
    pub attempted: u64,
    /// Answered 2xx at their first attempt.
    pub first_try_2xx: u64,
    /// First attempt lost (connection failed); each is retried until answered.
    pub lost_response: u64,
    /// Retries answered 200 (the lost attempt had committed) or 201 (it had not).
    pub retried_200: u64,
    pub retried_201: u64,
    /// Retries whose response was lost too (the next kill came first).
    pub retry_lost_again: u64,
    /// First attempts answered `503 unavailable` (the database was down); retried like lost
    /// ones, since a 503 from a failed commit does not say whether it committed.
    pub first_try_unavailable: u64,
    /// Retries answered 503.
    pub retry_unavailable: u64,
    pub problems: Vec<String>,
}

impl SenderLane {
    pub fn new(index: usize, user: &str, groups: Vec<i64>) -> SenderLane {
        SenderLane {
            index,
            user: user.to_owned(),
            groups,
            next: 0,
            pending: Vec::new(),
            acknowledged: Vec::new(),
            attempted: 0,
            first_try_2xx: 0,
            lost_response: 0,
            retried_200: 0,
            retried_201: 0,
            retry_lost_again: 0,
            first_try_unavailable: 0,
            retry_unavailable: 0,
            problems: Vec::new(),
        }
    }

    /// Records a 2xx answer; false (and a problem) when the body does not fit the send.
    fn accept(&mut self, send: &PendingSend, status: u16, body: &Value) -> bool {
        let msg_id = body["msg_id"].as_i64();
        let matches = body["client_msg_id"].as_str() == Some(send.client_msg_id.as_str())
            && body["group_id"].as_i64() == Some(send.group_id)
            && body["content"].as_str() == Some(send.content.as_str());
        match msg_id {
            Some(msg_id) if matches => {
                self.acknowledged.push(AcknowledgedSend {
                    group_id: send.group_id,
                    sender_id: self.user.clone(),
                    client_msg_id: send.client_msg_id.clone(),
                    content: send.content.clone(),
                    msg_id,
                    first_sent_at: send.first_sent_at,
                    acknowledged_at: Instant::now(),
                });
                true
            }
            _ => {
                self.problems.push(format!(
                    "send {} answered {status} with a body that does not match: {body}",
                    send.client_msg_id
                ));
                false
            }
        }
    }

    /// Retries every pending send (until `stop`), then sends new messages until `stop` (only
    /// when `new_sends`).
    pub async fn run_phase(
        mut self,
        api: ApiClient,
        stop: Arc<AtomicBool>,
        mut rng: StdRng,
        phase: usize,
        new_sends: bool,
    ) -> SenderLane {
        self.retry_pending(&api, &stop).await;
        if new_sends {
            self.send_new(&api, &stop, &mut rng, phase).await;
        }
        self
    }

    /// Every pending send again, with the same client_msg_id and content, until `stop`.
    async fn retry_pending(&mut self, api: &ApiClient, stop: &AtomicBool) {
        let pending = std::mem::take(&mut self.pending);
        let mut queue = pending.into_iter();
        for send in queue.by_ref() {
            if stop.load(Ordering::SeqCst) {
                self.pending.push(send);
                break;
            }
            let reply = api
                .send(
                    &self.user,
                    send.group_id,
                    &send.client_msg_id,
                    &send.content,
                )
                .await;
            match reply {
                Reply::Answered(status @ (200 | 201), body) => {
                    if self.accept(&send, status, &body) {
                        if status == 200 {
                            self.retried_200 += 1;
                        } else {
                            self.retried_201 += 1;
                        }
                    }
                }
                Reply::Answered(503, _) => {
                    self.retry_unavailable += 1;
                    self.pending.push(send);
                }
                Reply::Answered(status, body) => {
                    self.problems.push(format!(
                        "retry of {} answered {status}: {body}",
                        send.client_msg_id
                    ));
                    self.pending.push(send);
                }
                Reply::Lost(_) => {
                    self.retry_lost_again += 1;
                    self.pending.push(send);
                }
            }
        }
        self.pending.extend(queue);
    }

    /// New messages to the lane's groups until `stop`.
    async fn send_new(
        &mut self,
        api: &ApiClient,
        stop: &AtomicBool,
        rng: &mut StdRng,
        phase: usize,
    ) {
        while !stop.load(Ordering::SeqCst) {
            let group_id = self.groups[rng.random_range(0..self.groups.len())];
            self.next += 1;
            let client_msg_id = format!("{}-l{}-p{}-n{}", self.user, self.index, phase, self.next);
            let content = format!("{} says {} in group {group_id}", self.user, self.next);
            let send = PendingSend {
                group_id,
                client_msg_id,
                content,
                first_sent_at: Instant::now(),
            };
            self.attempted += 1;
            let reply = api
                .send(&self.user, group_id, &send.client_msg_id, &send.content)
                .await;
            match reply {
                Reply::Answered(201, body) => {
                    if self.accept(&send, 201, &body) {
                        self.first_try_2xx += 1;
                    }
                }
                Reply::Answered(503, _) => {
                    self.first_try_unavailable += 1;
                    self.pending.push(send);
                    back_off(rng).await;
                }
                Reply::Answered(status, body) => {
                    // 200 would mean the server saw this fresh client_msg_id before.
                    self.problems.push(format!(
                        "new send {} answered {status}: {body}",
                        send.client_msg_id
                    ));
                    if status != 200 {
                        self.pending.push(send);
                    }
                }
                Reply::Lost(_) => {
                    self.lost_response += 1;
                    self.pending.push(send);
                    back_off(rng).await;
                }
            }
            if rng.random_bool(0.2) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
            }
        }
    }
}

/// A pause after a lost or refused send, as a real client makes: a dead server refuses
/// connections at once, and without it a lane would pile up thousands of pending sends.
async fn back_off(rng: &mut StdRng) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
}
