//! One wake-up loop: the sender long-polls its receipts on instance A while members ack, one
//! at a time, on A or on a second instance B; each ack is timed until the poll reports it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::{Changes, Topology, WakeResult};
use super::{X_GROUPS, X_IMMEDIATE_POLLS, X_MEMBERS, X_MESSAGES, X_SETTLE, X_TIME_LIMIT, X_WAIT};
use crate::api::{create_group, feed_cursor, send_message, CountingHttp};
use crate::measure::{ms, signed_ms, Errors};
use crate::server::{bench_database, Server};
use crate::support::engine::Engine;
use crate::support::tokens::TokenMint;
use crate::POLL_TIMEOUT_S;

/// The groups and tokens of the loop.
struct Fixture {
    sender: String,
    member_tokens: Vec<String>,
    groups: Vec<i64>,
    /// The sender's `/v1/receipts` cursor before any ack.
    first_cursor: String,
}

/// What the acks measured.
#[derive(Default)]
struct AckTimes {
    http: Vec<f64>,
    wake: Vec<f64>,
    missed: usize,
}

pub async fn run_wake_loop(engine: Engine, topology: Topology) -> Result<WakeResult, String> {
    let db = bench_database(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let a = Server::start(db.url(), &requests).await?;
    let b = match topology {
        // On Citus the second instance attaches to a worker: wake-ups cross nodes.
        Topology::TwoInstances => Some(Server::start(db.second_node_url(), &requests).await?),
        Topology::OneInstance => None,
    };
    let ack_http = b.as_ref().map_or(a.http.clone(), |b| b.http.clone());
    let fixture = prepare(&a.http).await?;
    ack_http.warm_up(2).await;

    let errors = Arc::new(Errors::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Changes)>();
    let poller = tokio::spawn(sender_poll(
        a.http.clone(),
        fixture.sender.clone(),
        fixture.first_cursor.clone(),
        tx,
        errors.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;

    eprintln!(
        "cross-instance: {} acks, {:?}, {}",
        X_GROUPS * X_MESSAGES as usize * X_MEMBERS,
        topology,
        engine.title()
    );
    let times = ack_one_by_one(&ack_http, &fixture, &mut rx, &errors).await;
    stop.store(true, Ordering::Relaxed);
    poller.abort();
    let immediate = immediate_polls(&a.http, &fixture.first_cursor, &errors).await;
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
    drop(db);
    Ok(WakeResult {
        engine,
        topology,
        ack_http: times.http,
        immediate,
        wake: times.wake,
        missed: times.missed,
        errors: errors.text(),
    })
}

/// [`X_GROUPS`] groups of the sender and [`X_MEMBERS`] members, [`X_MESSAGES`] messages in
/// each, all made on instance A.
async fn prepare(http: &CountingHttp) -> Result<Fixture, String> {
    let mint = TokenMint::new();
    let sender = mint.token("x-sender");
    let members: Vec<String> = (0..X_MEMBERS).map(|i| format!("x-m{i:02}")).collect();
    let member_tokens = mint.tokens(&members);
    let mut groups = Vec::new();
    for g in 0..X_GROUPS {
        let group = create_group(http, &sender, &format!("x {g}"), &members).await?;
        for m in 0..X_MESSAGES {
            send_message(http, &sender, group, &format!("x-{g}-{m}")).await?;
        }
        groups.push(group);
    }
    let first_cursor = feed_cursor(http, &sender, "/v1/receipts").await?;
    Ok(Fixture {
        sender,
        member_tokens,
        groups,
        first_cursor,
    })
}

/// The sender's `/v1/receipts` long-poll, each answer's changes sent to `tx`, until `stop`
/// or [`X_TIME_LIMIT`].
async fn sender_poll(
    http: CountingHttp,
    sender: String,
    mut cursor: String,
    tx: UnboundedSender<(Instant, Changes)>,
    errors: Arc<Errors>,
    stop: Arc<AtomicBool>,
) {
    let deadline = Instant::now() + X_TIME_LIMIT;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let path = format!("/v1/receipts?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
        let answer = match http.get(&path, &sender).await {
            Ok(answer) => answer,
            Err(label) => {
                errors.add(format!("receipts poll: {label}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let at = Instant::now();
        if let Some(next) = answer["cursor"].as_str() {
            cursor = next.to_owned();
        }
        let changes: Changes = answer["changes"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| {
                        let key = (c["group_id"].as_i64()?, c["msg_id"].as_i64()?);
                        Some((key, c["read_count"].as_i64()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if tx.send((at, changes)).is_err() {
            return;
        }
    }
}

/// Every member acks every message, one ack at a time; each waits until the sender's poll
/// reported it (or [`X_WAIT`]), then [`X_SETTLE`] more.
async fn ack_one_by_one(
    ack_http: &CountingHttp,
    fixture: &Fixture,
    rx: &mut UnboundedReceiver<(Instant, Changes)>,
    errors: &Errors,
) -> AckTimes {
    let deadline = Instant::now() + X_TIME_LIMIT;
    let mut times = AckTimes::default();
    for &group in &fixture.groups {
        for msg in 1..=X_MESSAGES {
            for (i, member) in fixture.member_tokens.iter().enumerate() {
                if Instant::now() >= deadline {
                    errors.add("time limit".into());
                    return times;
                }
                let t0 = Instant::now();
                let body = json!({ "last_ack_msg_id": msg });
                let acked = ack_http
                    .post(&format!("/v1/groups/{group}/ack"), member, &body, &[200])
                    .await;
                let acked_at = Instant::now();
                if let Err(label) = acked {
                    errors.add(format!("ack: {label}"));
                    continue;
                }
                times.http.push(ms(acked_at - t0));
                match heard_of(rx, (group, msg), i as i64 + 1).await {
                    Some(at) => times.wake.push(signed_ms(acked_at, at)),
                    None => times.missed += 1,
                }
                tokio::time::sleep(X_SETTLE).await;
            }
        }
    }
    times
}

/// When the sender's poll first answered with `read_count >= expected` for the message;
/// None after [`X_WAIT`].
async fn heard_of(
    rx: &mut UnboundedReceiver<(Instant, Changes)>,
    message: (i64, i64),
    expected: i64,
) -> Option<Instant> {
    let found = tokio::time::timeout(X_WAIT, async {
        while let Some((at, changes)) = rx.recv().await {
            let hit = changes
                .iter()
                .any(|(key, read)| *key == message && *read >= expected);
            if hit {
                return Some(at);
            }
        }
        None
    })
    .await;
    found.ok().flatten()
}

/// What a woken poll does, without the wait: answer at once from a cursor with changes
/// behind it (every message of both groups).
async fn immediate_polls(http: &CountingHttp, first_cursor: &str, errors: &Errors) -> Vec<f64> {
    let mut immediate = Vec::new();
    let path = format!("/v1/receipts?cursor={first_cursor}&timeout_s=0&limit=200");
    let sender = TokenMint::new().token("x-sender");
    for _ in 0..X_IMMEDIATE_POLLS {
        let t0 = Instant::now();
        match http.get(&path, &sender).await {
            Ok(_) => immediate.push(ms(t0.elapsed())),
            Err(label) => errors.add(format!("immediate poll: {label}")),
        }
    }
    immediate
}
