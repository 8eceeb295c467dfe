//! The storm's clients: online members that long-poll, pull and ack, and the sender that
//! sends and long-polls its receipts, all recording what they saw and when.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{SEED_MESSAGES, SEED_ONLINE, SEED_PACE};
use crate::api::{send_message, CountingHttp};
use crate::measure::{ms, Errors};
use crate::POLL_TIMEOUT_S;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    Paced,
    Unpaced,
}

impl Pacing {
    pub fn text(self) -> String {
        match self {
            Pacing::Paced => format!("one every {} ms", SEED_PACE.as_millis()),
            Pacing::Unpaced => "as fast as possible".into(),
        }
    }
}

/// One member's ack that moved its cursors over `(from, to]`, and when its response arrived.
pub struct AckRecord {
    pub from: i64,
    pub to: i64,
    pub at: Instant,
}

/// One answer of the sender's `/v1/receipts` poll: (msg_id, read_count) per change.
pub struct ReceiptAnswer {
    pub at: Instant,
    pub changes: Vec<(i64, i64)>,
}

#[derive(Default)]
pub struct RequestKinds {
    pub sends: AtomicU64,
    pub syncs: AtomicU64,
    pub pulls: AtomicU64,
    pub acks: AtomicU64,
    pub receipt_polls: AtomicU64,
}

#[derive(Default)]
pub struct SeedShared {
    pub acks: Mutex<Vec<AckRecord>>,
    pub answers: Mutex<Vec<ReceiptAnswer>>,
    pub errors: Errors,
    pub kinds: RequestKinds,
    pub members_done: AtomicUsize,
}

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An online member: long-poll `/v1/sync`; on news pull the page after its own delivered
/// cursor and ack its last message. Stops once it has acked every message.
pub async fn storm_member(
    http: CountingHttp,
    token: String,
    group: i64,
    mut cursor: String,
    shared: Arc<SeedShared>,
    deadline: Instant,
) {
    let mut acked = 0i64;
    while acked < SEED_MESSAGES && Instant::now() < deadline {
        bump(&shared.kinds.syncs);
        let path = format!("/v1/sync?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
        let answer = match http.get(&path, &token).await {
            Ok(answer) => answer,
            Err(label) => {
                shared.errors.add(format!("sync: {label}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Some(next) = answer["cursor"].as_str() {
            cursor = next.to_owned();
        }
        let news = answer["groups"]
            .as_array()
            .is_some_and(|gs| gs.iter().any(|g| g["group_id"].as_i64() == Some(group)));
        if !news {
            continue;
        }
        acked = pull_and_ack(&http, &token, group, &shared, acked).await;
    }
    if acked >= SEED_MESSAGES {
        shared.members_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Pulls the pages after the member's delivered cursor and acks the last message of each;
/// returns the member's new ack position.
async fn pull_and_ack(
    http: &CountingHttp,
    token: &str,
    group: i64,
    shared: &SeedShared,
    mut acked: i64,
) -> i64 {
    // Pages until has_more is false; bounded in case of a bug.
    for _ in 0..=(SEED_MESSAGES as usize / 200 + 1) {
        bump(&shared.kinds.pulls);
        let page = match http
            .get(&format!("/v1/groups/{group}/messages?limit=200"), token)
            .await
        {
            Ok(page) => page,
            Err(label) => {
                shared.errors.add(format!("pull: {label}"));
                break;
            }
        };
        let last = page["messages"]
            .as_array()
            .and_then(|ms| ms.last())
            .and_then(|m| m["msg_id"].as_i64());
        if let Some(last) = last.filter(|last| *last > acked) {
            bump(&shared.kinds.acks);
            let body = json!({ "last_ack_msg_id": last });
            match http
                .post(&format!("/v1/groups/{group}/ack"), token, &body, &[200])
                .await
            {
                Ok(_) => {
                    let at = Instant::now();
                    shared.acks.lock().unwrap().push(AckRecord {
                        from: acked,
                        to: last,
                        at,
                    });
                    acked = last;
                }
                Err(label) => shared.errors.add(format!("ack: {label}")),
            }
        }
        if page["has_more"] != Value::Bool(true) {
            break;
        }
    }
    acked
}

/// The sender's `/v1/receipts` long-poll; stops once every message shows all online readers.
pub async fn storm_sender_poll(
    http: CountingHttp,
    token: String,
    mut cursor: String,
    shared: Arc<SeedShared>,
    deadline: Instant,
) {
    let mut max_read = vec![0i64; SEED_MESSAGES as usize + 1];
    let all_read = |max_read: &[i64]| max_read[1..].iter().all(|r| *r >= SEED_ONLINE as i64);
    while !all_read(&max_read) && Instant::now() < deadline {
        bump(&shared.kinds.receipt_polls);
        let path = format!("/v1/receipts?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
        let answer = match http.get(&path, &token).await {
            Ok(answer) => answer,
            Err(label) => {
                shared.errors.add(format!("receipts poll: {label}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let at = Instant::now();
        if let Some(next) = answer["cursor"].as_str() {
            cursor = next.to_owned();
        }
        let changes: Vec<(i64, i64)> = answer["changes"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| Some((c["msg_id"].as_i64()?, c["read_count"].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        for (msg, read) in &changes {
            if let Some(slot) = max_read.get_mut(*msg as usize) {
                *slot = (*slot).max(*read);
            }
        }
        shared
            .answers
            .lock()
            .unwrap()
            .push(ReceiptAnswer { at, changes });
    }
}

pub struct SendRun {
    pub latencies: Vec<f64>,
    pub started: Instant,
    pub finished: Instant,
}

pub async fn storm_sender_send(
    http: CountingHttp,
    token: String,
    group: i64,
    pacing: Pacing,
    shared: Arc<SeedShared>,
    deadline: Instant,
) -> SendRun {
    let started = Instant::now();
    let mut latencies = Vec::new();
    for i in 0..SEED_MESSAGES {
        if Instant::now() >= deadline {
            break;
        }
        if pacing == Pacing::Paced {
            tokio::time::sleep_until((started + SEED_PACE * i as u32).into()).await;
        }
        bump(&shared.kinds.sends);
        let t0 = Instant::now();
        match send_message(&http, &token, group, &format!("storm-{i}")).await {
            Ok(_) => latencies.push(ms(t0.elapsed())),
            Err(label) => shared.errors.add(format!("send: {label}")),
        }
    }
    SendRun {
        latencies,
        started,
        finished: Instant::now(),
    }
}
