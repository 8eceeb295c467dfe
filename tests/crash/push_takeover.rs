//! Two live instances on one PostgreSQL database. The one holding the push work is SIGKILLed
//! while its delivery attempts are in flight (the push service hangs) and while other devices
//! are due but not yet built: the surviving instance delivers every notification, the
//! in-flight ones once their lease runs out, with the key and bytes of the killed attempt.
//! PostgreSQL only: SQLite is one file of one server, so it has no second live instance.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::server::start_server_with;
use crate::support::child_server::ChildServer;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::http::Reply;
use crate::support::push_receiver::{Behaviour, PushReceiver, Received};
use crate::support::scratch_db::ScratchDb;

const PUSH_SECRET: &str = "push-secret-push-secret-push-secret-0123";
/// Restarts, migrations and a lease running out, on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);
/// How long an attempt waits for the hanging push service: the holder is killed well within
/// it, so its attempts are in flight then. (Its lease is twice this plus 2 s.)
const TIMEOUT: Duration = Duration::from_secs(8);
/// Phones of the group whose notifications are in flight when the holder dies, and of the
/// group whose message is still in its grace period then.
const IN_FLIGHT: [&str; 3] = ["bob", "carol", "dave"];
const DUE: [&str; 2] = ["frank", "heidi"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(chorus_pg_tests),
    ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
)]
async fn a_live_instance_takes_over_the_push_work_of_one_killed_holding_it() {
    let _serial = crate::SERIAL.lock().await;
    let run = Run {
        dir: tempfile::tempdir().expect("temp dir"),
        database: ScratchDb::for_test(Engine::Postgres),
        client: crate::support::http::client(Duration::from_secs(20)),
        push: PushReceiver::start(PUSH_SECRET),
    };
    run.push.set(Behaviour::Hang);
    let mut holder = run.start("holder").await;
    let api = ApiClient::with_client(run.client.clone(), holder.base.clone());
    let in_flight = api.create_group("alice", "in flight", &IN_FLIGHT).await;
    let due = api.create_group("erin", "due", &DUE).await;
    for user in IN_FLIGHT.iter().chain(&DUE) {
        register_phone(&api, user).await;
    }

    send(&api, "alice", in_flight).await;
    let attempted = run
        .push
        .wait_for(PATIENCE, "an attempt per phone, by the holder", |r| {
            phones_in(r).len() == IN_FLIGHT.len()
        })
        .await;
    let survivor = run.start("survivor").await;
    let api = ApiClient::with_client(run.client.clone(), survivor.base.clone());
    send(&api, "erin", due).await;
    holder.kill();
    let killed_at = Instant::now();
    run.push.set(Behaviour::Take);

    let first_attempt = attempted.iter().map(|r| r.at).min().expect("attempts");
    assert!(
        killed_at + Duration::from_secs(1) < first_attempt + TIMEOUT,
        "the test's premise: the holder died with its attempts in flight"
    );
    let received = run
        .push
        .wait_for(PATIENCE, "a delivery to every phone", |r| {
            let delivered: Vec<Received> = r.iter().filter(|p| taken(p)).cloned().collect();
            phones_in(&delivered).len() == IN_FLIGHT.len() + DUE.len()
        })
        .await;
    assert_taken_over(&attempted, &received, killed_at);
    assert_every_key_delivered_with_the_same_bytes(&received);
    let due_pushes = received
        .iter()
        .filter(|r| r.body["groups"][0]["group_id"] == due);
    for push in due_pushes {
        assert!(
            push.at > killed_at && push.body["badge"] == 1,
            "{}",
            push.raw
        );
    }
    let log = survivor.log();
    assert!(!log.contains("panicked"), "{log}");
}

struct Run {
    dir: tempfile::TempDir,
    database: ScratchDb,
    client: reqwest::Client,
    push: PushReceiver,
}

impl Run {
    /// An instance on the shared database, its data directory `dir/<name>`.
    async fn start(&self, name: &str) -> ChildServer {
        let timeout_ms = TIMEOUT.as_millis().to_string();
        let env = [
            ("CHORUS_PUSH_URL", self.push.url.as_str()),
            ("CHORUS_PUSH_SECRET", PUSH_SECRET),
            ("CHORUS_PUSH_GRACE_MS", "1500"),
            ("CHORUS_PUSH_INTERVAL_MS", "300"),
            ("CHORUS_PUSH_TIMEOUT_MS", timeout_ms.as_str()),
            ("CHORUS_PUSH_BACKOFF_MAX_MS", "500"),
        ];
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).expect("data dir");
        let url = self.database.url();
        let log = format!("{name}.log");
        start_server_with(&dir, url, &log, &self.client, &env).await
    }
}

/// Each notification the holder was delivering when it died went out afterwards (so from the
/// survivor), with the key and the bytes of the killed attempt.
fn assert_taken_over(attempted: &[Received], received: &[Received], killed_at: Instant) {
    for killed in attempted {
        let delivered = received.iter().find(|r| taken(r) && r.key == killed.key);
        let delivered = delivered.unwrap_or_else(|| panic!("{} delivered", killed.key));
        assert_eq!(delivered.raw, killed.raw, "the killed attempt's bytes");
        assert!(delivered.at > killed_at, "by the survivor");
    }
}

fn taken(r: &Received) -> bool {
    r.answered == Behaviour::Take
}

/// The devices the requests were for, each once.
fn phones_in(received: &[Received]) -> Vec<String> {
    let mut devices: Vec<String> = received
        .iter()
        .filter_map(|r| r.body["device_id"].as_str().map(str::to_owned))
        .collect();
    devices.sort();
    devices.dedup();
    devices
}

async fn register_phone(api: &ApiClient, user: &str) {
    let target = json!({"platform": "fcm", "token": format!("{user}-token")});
    let caller = format!("{user}#{user}-phone");
    let path = format!("/v1/me/devices/{user}-phone/push-target");
    let reply = api.call(Method::PUT, &path, &caller, Some(&target)).await;
    assert!(matches!(reply, Reply::Answered(200, _)), "{reply:?}");
}

async fn send(api: &ApiClient, sender: &str, group: i64) {
    let reply = api.send(sender, group, "c-1", "wake up").await;
    assert!(matches!(reply, Reply::Answered(201, _)), "{reply:?}");
}

/// At least once: every notification attempted was delivered, and each of its attempts
/// carried the same bytes (so the receiver can drop the repeats by key).
fn assert_every_key_delivered_with_the_same_bytes(received: &[Received]) {
    let mut by_key: BTreeMap<&str, Vec<&Received>> = BTreeMap::new();
    for r in received {
        by_key.entry(r.key.as_str()).or_default().push(r);
    }
    for (key, attempts) in by_key {
        assert!(attempts.iter().any(|a| taken(a)), "{key} delivered");
        assert!(attempts
            .iter()
            .all(|a| a.raw == attempts[0].raw && a.signature_ok));
    }
}
