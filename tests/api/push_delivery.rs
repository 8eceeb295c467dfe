//! Waking phones, the delivery half: a push service that fails, hangs or refuses, what is
//! retried and what is given up, what /metrics counts of it, and instances sharing the work.
//! An instance dying with work leased is in tests/crash/push_takeover.rs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_engines;
use crate::push_rig::{
    group_with_bobs_phone, metric_once, push_settings, register, rig, rig_with, taken, Timing,
    PATIENCE, QUICK, RETRY_FOR_SECS,
};
use crate::support::engine::Engine;
use crate::support::push_receiver::{Behaviour, PushReceiver, Received};

on_both_engines!(by engine:
    a_push_service_failing_then_hanging_for_30_s_gets_every_notification_once_it_recovers,
    a_refused_notification_is_dropped_and_counted_as_failed_beside_due_sent_and_latency,
    a_notification_failing_past_the_retry_window_is_given_up_and_counted_as_failed,
    two_instances_send_each_notification_once,
);

/// How long the push service hangs in the outage test: the 30 s.
const HANG: Duration = Duration::from_secs(30);
// The outage must end before the notification is given up, or "delivered after it recovers"
// would test nothing.
const _: () = assert!(RETRY_FOR_SECS > HANG.as_secs() * 2);

async fn a_push_service_failing_then_hanging_for_30_s_gets_every_notification_once_it_recovers(
    engine: Engine,
) {
    // Each attempt during the hang times out after 1 s; the hang spans many of them.
    let timing = Timing {
        timeout_ms: 1000,
        ..QUICK
    };
    let (app, push) = rig(engine, timing).await;
    let group = group_with_bobs_phone(&app).await;
    push.set(Behaviour::Fail);

    let first = app.send_ok("alice", group, "are you awake?").await;
    push.wait_for(PATIENCE, "three 500s", |r| r.len() >= 3)
        .await;
    push.set(Behaviour::Hang);
    let hang_started = Instant::now();
    // Sends and acks go on while the push service hangs.
    let second = app.send_ok("alice", group, "still there?").await;
    let ack = app
        .ack("alice", group, json!({"last_ack_msg_id": second}))
        .await;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    tokio::time::sleep_until((hang_started + HANG).into()).await;
    let hung = push.received();
    let timed_out = hung
        .iter()
        .filter(|r| r.answered == Behaviour::Hang)
        .count();
    assert!(timed_out >= 2, "attempts went on timing out: {timed_out}");
    push.set(Behaviour::Take);
    let received = push
        .wait_for(PATIENCE, "the second message's notification", |r| {
            taken(r).iter().any(|p| p.body["badge"] == 2)
        })
        .await;

    let by_key = attempts_by_key(&received);
    for (key, attempts) in &by_key {
        let delivered = attempts.iter().any(|a| a.answered == Behaviour::Take);
        assert!(delivered, "{key} delivered after the recovery");
        for attempt in attempts {
            assert_eq!(
                attempt.raw, attempts[0].raw,
                "{key}: every attempt the same bytes"
            );
            assert!(attempt.signature_ok);
        }
    }
    let outlasted = &by_key[received[0].key.as_str()];
    let answers: Vec<Behaviour> = outlasted.iter().map(|a| a.answered).collect();
    for answer in [Behaviour::Fail, Behaviour::Hang, Behaviour::Take] {
        assert!(answers.contains(&answer), "{answer:?} among {answers:?}");
    }
    assert_eq!(outlasted[0].body["groups"][0]["last_msg_id"], first);
    let failed_attempts = received.len() - taken(&received).len();
    let retried = metric_once(&app, "chorus_push_retried_total", |v| {
        v >= failed_attempts as f64
    })
    .await;
    assert!(
        retried >= failed_attempts as f64,
        "each failure counted: {retried}"
    );
}

/// Every attempt the receiver saw, by idempotency key, in the order they came.
fn attempts_by_key(received: &[Received]) -> BTreeMap<&str, Vec<&Received>> {
    let mut by_key: BTreeMap<&str, Vec<&Received>> = BTreeMap::new();
    for r in received {
        by_key.entry(r.key.as_str()).or_default().push(r);
    }
    by_key
}

/// The push series on /metrics, read once each is at least what `expected` says (they are
/// counted a moment after the receiver answered); the names are what the README lists.
async fn push_series(app: &TestApp, expected: [f64; 4]) -> [f64; 4] {
    let names = [
        "chorus_push_due_total",
        "chorus_push_sent_total",
        "chorus_push_failed_total",
        "chorus_push_delivery_seconds_count",
    ];
    let mut values = [0.0; 4];
    for (i, name) in names.iter().enumerate() {
        values[i] = metric_once(app, name, |v| v >= expected[i]).await;
    }
    values
}

/// Sends a message and waits for the receiver to answer the push it causes.
async fn push_for(app: &TestApp, push: &PushReceiver, group: i64, n: i64) -> Received {
    assert_eq!(
        app.send_ok("alice", group, &format!("message {n}")).await,
        n
    );
    let received = push
        .wait_for(PATIENCE, "the push of the new message", |r| {
            r.iter().any(|p| p.body["groups"][0]["last_msg_id"] == n)
        })
        .await;
    let of_n = received
        .iter()
        .find(|p| p.body["groups"][0]["last_msg_id"] == n);
    of_n.expect("found").clone()
}

async fn a_refused_notification_is_dropped_and_counted_as_failed_beside_due_sent_and_latency(
    engine: Engine,
) {
    let (app, push) = rig(engine, QUICK).await;
    let group = group_with_bobs_phone(&app).await;

    push_for(&app, &push, group, 1).await;
    // [due, sent, failed, deliveries timed]
    assert_eq!(
        push_series(&app, [1.0, 1.0, 0.0, 1.0]).await,
        [1.0, 1.0, 0.0, 1.0]
    );
    push.set(Behaviour::Refuse);
    let refused = push_for(&app, &push, group, 2).await;
    assert_eq!(
        push_series(&app, [2.0, 1.0, 1.0, 1.0]).await,
        [2.0, 1.0, 1.0, 1.0]
    );
    tokio::time::sleep(QUICK.interval() * 3).await;
    let again = push
        .received()
        .iter()
        .filter(|r| r.key == refused.key)
        .count();
    assert_eq!(again, 1, "a refusal is not retried");
    push.set(Behaviour::Take);
    push_for(&app, &push, group, 3).await;

    let series = push_series(&app, [3.0, 2.0, 1.0, 2.0]).await;
    assert_eq!(
        series,
        [3.0, 2.0, 1.0, 2.0],
        "[due, sent, failed, deliveries timed]"
    );
    let retried = app.metric("chorus_push_retried_total").await;
    assert_eq!(retried, Some(0.0), "nothing was retried");
    let waited = app.metric("chorus_push_delivery_seconds_sum").await;
    assert!(
        waited.is_some_and(|s| s > 0.0),
        "latency summed: {waited:?}"
    );
}

async fn a_notification_failing_past_the_retry_window_is_given_up_and_counted_as_failed(
    engine: Engine,
) {
    // The smallest retry window there is, so the give-up comes within a few attempts.
    let (app, push) = rig_with(engine, QUICK, |s| s.push_retry_for_secs = 1).await;
    let group = group_with_bobs_phone(&app).await;
    push.set(Behaviour::Fail);

    let given_up = push_for(&app, &push, group, 1).await;
    let failed = metric_once(&app, "chorus_push_failed_total", |v| v >= 1.0).await;
    assert_eq!(failed, 1.0, "given up once");
    let attempts = push.received().len();
    tokio::time::sleep(QUICK.interval() * 3).await;
    assert_eq!(
        push.received().len(),
        attempts,
        "no attempt after the give-up"
    );
    assert!(attempts >= 2, "retried within the window: {attempts}");
    push.set(Behaviour::Take);
    let next = push_for(&app, &push, group, 2).await;

    assert_eq!(next.answered, Behaviour::Take, "the device is not stuck");
    assert_ne!(next.key, given_up.key);
    let sent = metric_once(&app, "chorus_push_sent_total", |v| v >= 1.0).await;
    assert_eq!(sent, 1.0);
    let retried = app.metric("chorus_push_retried_total").await.unwrap_or(0.0);
    assert_eq!(
        retried,
        (attempts - 1) as f64,
        "each attempt but the last retried"
    );
}

async fn two_instances_send_each_notification_once(engine: Engine) {
    let (app, push) = rig(engine, QUICK).await;
    let url = push.url.clone();
    let second = app
        .second_instance_with(move |s| push_settings(s, &url, QUICK))
        .await;
    let other = app.via(&second);
    let users = ["u0", "u1", "u2", "u3", "u4", "u5"];
    let group = app.group_with("alice", &users).await;
    for (i, user) in users.iter().enumerate() {
        let via = if i % 2 == 0 { &app } else { &other };
        register(via, &format!("{user}#{user}-phone")).await;
    }

    for round in 1..=2 {
        app.send_ok("alice", group, &format!("round {round}")).await;
        let expected = users.len() * round;
        push.wait_for(PATIENCE, "a push per phone", |r| r.len() >= expected)
            .await;
        tokio::time::sleep(QUICK.interval() * 2).await;
        let received = push.received();
        assert_eq!(received.len(), expected, "each once: {received:#?}");
        let mut keys: Vec<&str> = received.iter().map(|r| r.key.as_str()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), expected, "every notification its own key");
    }
}
