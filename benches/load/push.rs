//! Waking phones. A 200-member group in which 160 members' phones are offline (push targets
//! that never ack): the pushes one message causes and their latency, from the send to the
//! push service receiving each. And 10,000 offline phones in 100 groups that get a burst of
//! 100 messages each: how many pushes go out (coalesced), and what one look for due devices
//! costs with nothing due, with everything due, and after everything was told. The push
//! service is a receiver on 127.0.0.1 that takes every notification at once. Then sends and
//! acks with the push service healthy and hanging, and the server's memory while it hangs
//! (push_outage.rs).
//!
//! `CHORUS_BENCH_PUSH_SCALE=N` divides every size, and the outage's phase lengths, by N (a
//! quick smoke run).

use std::time::{Duration, Instant};

use chorus::config::Settings;
use chorus::db::models::now_utc;
use chorus::db::push::push_due::{due_devices, CandidateScan, Cutoffs};
use chorus::db::AnyConnection;
use serde_json::json;

use crate::args::EngineSetup;
use crate::report::EngineReport;
use crate::requests::expect_json;
use crate::runner::Measured;
use crate::seed::{seed_group, seed_messages, seed_push_targets, users};
use crate::server::BenchServer;
use crate::support::push_receiver::{PushReceiver, Received};
use crate::support::scratch_db::analyze;
use crate::CONTENT;

const SECRET: &str = "bench-push-secret-bench-push-secret-0123";
const GRACE_MS: u64 = 500;
const INTERVAL_MS: u64 = 500;
const GROUP_MEMBERS: usize = 200;
const OFFLINE_PHONES: usize = 160;
/// Messages sent one at a time to the 200-member group, each after the last one's pushes.
const MESSAGES: usize = 10;
const BURST_GROUPS: usize = 100;
const PHONES_PER_GROUP: usize = 100;
const BURST: usize = 100;
/// What a look for due devices asks for: one tick's worth (the job's slots).
const LOOK_LIMIT: i64 = 64;
const PATIENCE: Duration = Duration::from_secs(300);

/// `CHORUS_BENCH_PUSH_SCALE`: what every size (and the outage's phase lengths) is divided by.
pub fn scale() -> usize {
    std::env::var("CHORUS_BENCH_PUSH_SCALE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

fn scaled(n: usize) -> usize {
    (n / scale()).max(1)
}

fn push_settings(settings: &mut Settings, url: &str) {
    settings.push_url = Some(url.to_owned());
    settings.push_secret = Some(SECRET.into());
    settings.push_grace_ms = GRACE_MS;
    settings.push_interval_ms = INTERVAL_MS;
}

pub async fn bench(setup: EngineSetup, report: &mut EngineReport) {
    let push = PushReceiver::start(SECRET);
    let url = push.url.clone();
    let server = match BenchServer::start_with(setup, move |s| push_settings(s, &url)).await {
        Ok(server) => server,
        Err(e) => {
            report.notes.push(format!("push: skipped: {e}"));
            return;
        }
    };
    let mut conn = server.direct_connection();
    one_group(&server, &mut conn, &push, report).await;
    burst_to_many_phones(&mut conn, &push, report).await;
    drop(conn);
    server.stop().await;
}

/// Waits until `done` holds for what the receiver got, or [`PATIENCE`] passes.
async fn wait(push: &PushReceiver, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let received = push.received();
        if done(&received) || Instant::now() >= deadline {
            return received;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn one_group(
    server: &BenchServer,
    conn: &mut AnyConnection,
    push: &PushReceiver,
    report: &mut EngineReport,
) {
    let (members, offline) = (scaled(GROUP_MEMBERS), scaled(OFFLINE_PHONES));
    eprintln!("push: a group of {members}, {offline} phones offline");
    let everyone = users("member", members);
    let group = seed_group(conn, "push", &everyone);
    seed_push_targets(conn, &everyone[1..=offline.min(members - 1)]);
    analyze(conn);
    let token = server.token(&everyone[0]);
    let mut m = Measured::default();
    let before = push.received().len();
    let started = Instant::now();
    for n in 1..=MESSAGES {
        let body = json!({"client_msg_id": format!("push-{n}"), "content": CONTENT});
        let path = format!("/v1/groups/{group}/messages");
        let sent_at = Instant::now();
        let sent = expect_json(server.http.post(&path, &token, &body), 201).await;
        let of_this = |r: &Received| r.body["groups"][0]["last_msg_id"] == n as i64;
        let received = wait(push, |all| {
            all.iter().filter(|r| of_this(r)).count() >= offline
        })
        .await;
        for r in received.iter().filter(|r| of_this(r)) {
            m.record(
                r.at - sent_at,
                sent.as_ref().map(|_| 1u64).map_err(Clone::clone),
            );
        }
        tokio::time::sleep(Duration::from_millis(INTERVAL_MS)).await;
    }
    m.elapsed = started.elapsed();
    // Every push that arrived, not only those of the message just sent: a repeat or an extra
    // one would show here (each message waits an interval for stragglers).
    let per_message = (push.received().len() - before) as f64 / MESSAGES as f64;
    let what = format!("push: send to {members} members, {offline} phones offline (to push received, incl. {GRACE_MS} ms grace)");
    report.row(
        &what,
        1,
        &m,
        MESSAGES * offline,
        format!("{per_message:.2} pushes/message"),
    );
    report.key_numbers.push((
        format!("pushes per message, {offline} offline"),
        format!("{per_message:.2}"),
    ));
    report.latency_key(
        format!("push p50/p99 ms, {offline} offline of {members}"),
        &m,
    );
}

/// One look for due devices, as a tick makes it, timed (the median of five).
fn time_look(conn: &mut AnyConnection) -> f64 {
    let mut took: Vec<f64> = (0..5)
        .map(|_| {
            let now = now_utc();
            let cutoffs = Cutoffs {
                grace: now,
                interval: now,
            };
            let started = Instant::now();
            due_devices(conn, cutoffs, LOOK_LIMIT, &mut CandidateScan::default())
                .expect("look for due devices");
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    took.sort_by(f64::total_cmp);
    took[2]
}

async fn burst_to_many_phones(
    conn: &mut AnyConnection,
    push: &PushReceiver,
    report: &mut EngineReport,
) {
    let (groups, per_group, burst) = (
        scaled(BURST_GROUPS),
        scaled(PHONES_PER_GROUP),
        scaled(BURST),
    );
    let phones = groups * per_group;
    eprintln!("push: {phones} offline phones in {groups} groups, {burst} messages each");
    let mut ids = Vec::new();
    for g in 0..groups {
        let mut members = vec![format!("burst-sender-{g}")];
        members.extend(users(&format!("phone-{g}"), per_group));
        ids.push((
            seed_group(conn, &format!("burst {g}"), &members),
            members[0].clone(),
        ));
        seed_push_targets(conn, &members[1..]);
    }
    analyze(conn);
    let idle = time_look(conn);
    let before = push.received().len();
    let started = Instant::now();
    for (group, sender) in &ids {
        seed_messages(conn, *group, sender, burst);
    }
    let all_due = time_look(conn);
    wait(push, |r| {
        let mut devices: Vec<&str> = r[before..]
            .iter()
            .filter_map(|x| x.body["device_id"].as_str())
            .collect();
        devices.sort_unstable();
        devices.dedup();
        devices.len() >= phones
    })
    .await;
    let delivered_in = started.elapsed();
    tokio::time::sleep(Duration::from_millis(2 * (GRACE_MS + INTERVAL_MS))).await;
    let pushes = push.received().len() - before;
    let told = time_look(conn);
    report.notes.push(format!(
        "push: {phones} offline phones x {burst} messages: {pushes} pushes ({:.2} per phone; the \
         last of the first round after {:.1} s); one look for due devices (limit {LOOK_LIMIT}): \
         {idle:.1} ms with nothing due, {all_due:.1} ms with all due, {told:.1} ms after all were told",
        pushes as f64 / phones as f64,
        delivered_in.as_secs_f64(),
    ));
    report.key(
        format!("pushes for {phones} phones x {burst} messages"),
        pushes as f64,
    );
    report.key(format!("look for due devices ms, {phones} told"), told);
}
