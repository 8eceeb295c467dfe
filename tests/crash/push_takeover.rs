//! Two live instances on one PostgreSQL database. The one holding the push work is SIGKILLed
//! while its delivery attempts are in flight (the push service hangs) and while other devices
//! are due but not yet built: the surviving instance delivers every notification, the
//! in-flight ones once their lease runs out, with the key and bytes of the killed attempt.
//! PostgreSQL only: SQLite is one file of one server, so it has no second live instance.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::push_rig::{register_phone, send, PushRun, PATIENCE};
use crate::support::engine::Engine;
use crate::support::push_receiver::{Behaviour, Received};
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
    let run = PushRun::new(Engine::Postgres);
    run.push.set(Behaviour::Hang);
    let mut holder = run.start("holder", "holder.log", TIMEOUT).await;
    let api = run.api(&holder);
    let in_flight = api.create_group("alice", "in flight", &IN_FLIGHT).await;
    let due = api.create_group("erin", "due", &DUE).await;
    for user in IN_FLIGHT.iter().chain(&DUE) {
        register_phone(&api, user, &format!("{user}-phone")).await;
    }

    send(&api, "alice", in_flight, "c-1").await;
    let attempted = run
        .push
        .wait_for(PATIENCE, "an attempt per phone, by the holder", |r| {
            phones_in(r).len() == IN_FLIGHT.len()
        })
        .await;
    let survivor = run.start("survivor", "survivor.log", TIMEOUT).await;
    let api = run.api(&survivor);
    send(&api, "erin", due, "c-1").await;
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
