//! Waking phones: notifications decided from cursors, coalesced, signed, retried until the
//! push service takes them, shared by instances; and every bad push-target input. A push
//! receiver runs in the test on 127.0.0.1 (tests/support/push_receiver.rs).
//!
//! Timing: grace periods and intervals are a few hundred milliseconds, and every wait is for
//! an outcome with a generous bound, never a race against a deadline.

use std::time::{Duration, Instant};

use chorus::config::Settings;
use serde_json::{json, Value};

use crate::helpers::{spawn_app, spawn_app_with, TestApp};
use crate::on_both_engines;
use crate::spec_check::check_against_schema;
use crate::support::engine::Engine;
use crate::support::push_receiver::{Behaviour, PushReceiver, Received};

on_both_engines!(by engine:
    an_offline_device_gets_one_push_within_grace_and_interval,
    a_device_that_acks_within_grace_gets_none_nor_for_its_own_or_system_entries,
    a_burst_of_100_messages_is_coalesced_into_a_few_pushes_with_the_right_badge,
    reading_on_the_laptop_sends_a_badge_update_to_the_phone,
    a_failing_then_hanging_push_service_gets_the_notification_once_it_recovers,
    two_instances_send_each_notification_once,
    removed_and_signed_out_targets_get_no_push,
);

on_both_engines!(bad_push_target_input_gets_json_errors_naming_the_field);

const PUSH_SECRET: &str = "push-secret-push-secret-push-secret-0123";
/// Longer than any outcome takes on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
struct Timing {
    grace_ms: u64,
    interval_ms: u64,
    /// Long enough that the receiver in this process answers in time on a loaded machine, so
    /// that no attempt is repeated, except where the test wants timeouts.
    timeout_ms: u64,
}

const QUICK: Timing = Timing {
    grace_ms: 400,
    interval_ms: 800,
    timeout_ms: 3000,
};

fn push_settings(settings: &mut Settings, url: &str, timing: Timing) {
    settings.push_url = Some(url.to_owned());
    settings.push_secret = Some(PUSH_SECRET.into());
    settings.push_grace_ms = timing.grace_ms;
    settings.push_interval_ms = timing.interval_ms;
    settings.push_timeout_ms = timing.timeout_ms;
    settings.push_backoff_max_ms = 400;
    settings.push_retry_for_secs = 120;
}

/// A server with push on, and the receiver it pushes to.
async fn rig(engine: Engine, timing: Timing) -> (TestApp, PushReceiver) {
    let push = PushReceiver::start(PUSH_SECRET);
    let url = push.url.clone();
    let app = spawn_app_with(engine, move |s| push_settings(s, &url, timing)).await;
    (app, push)
}

/// Registers a push target for `caller` ("user#device"), as that device.
async fn register(app: &TestApp, caller: &str) {
    let device = caller.split_once('#').expect("user#device").1;
    let token = format!("token-of-{device}");
    let r = app
        .put_push_target(caller, device, json!({"platform": "apns", "token": token}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
}

/// A group of alice and bob whose phone has a push target.
async fn group_with_bobs_phone(app: &TestApp) -> i64 {
    let group = app.group_with("alice", &["bob"]).await;
    register(app, "bob#phone").await;
    group
}

fn taken(received: &[Received]) -> Vec<&Received> {
    received
        .iter()
        .filter(|r| r.answered == Behaviour::Take)
        .collect()
}

async fn an_offline_device_gets_one_push_within_grace_and_interval(engine: Engine) {
    let (app, push) = rig(engine, QUICK).await;
    let group = group_with_bobs_phone(&app).await;
    let sent_at = Instant::now();

    app.send_ok("alice", group, "hello bob").await;
    let first = push
        .wait_for(PATIENCE, "a push", |r| !taken(r).is_empty())
        .await;
    tokio::time::sleep(Duration::from_millis(QUICK.interval_ms * 2)).await;

    let all = push.received();
    assert_eq!(all.len(), 1, "one push, no repeat: {all:#?}");
    let push_1 = &first[0];
    assert!(push_1.at - sent_at >= Duration::from_millis(QUICK.grace_ms));
    assert!(push_1.signature_ok, "signed with the push secret");
    assert_eq!(push_1.body["notification_id"], json!(push_1.key));
    check_against_schema("PushNotification", &push_1.body);
    let expected = json!({
        "kind": "new_messages", "user_id": "bob", "device_id": "phone", "platform": "apns",
        "token": "token-of-phone", "badge": 1,
        "groups": [{"group_id": group, "unread_count": 1, "last_msg_id": 1, "new_messages": true}],
    });
    for (field, value) in expected.as_object().expect("object") {
        assert_eq!(&push_1.body[field], value, "{field} of {}", push_1.raw);
    }
    assert!(!push_1.raw.contains("hello bob"), "no content by default");
}

async fn a_device_that_acks_within_grace_gets_none_nor_for_its_own_or_system_entries(
    engine: Engine,
) {
    let timing = Timing {
        grace_ms: 3000,
        ..QUICK
    };
    let (app, push) = rig(engine, timing).await;
    let group = group_with_bobs_phone(&app).await;

    app.send_ok("alice", group, "are you there?").await;
    assert_eq!(app.pull_and_ack_all("bob#phone", group).await, vec![1]);
    // A system line, and bob's own message from his laptop: neither is for the phone.
    assert_eq!(
        app.add_members("alice", group, &["carol"]).await.status,
        200
    );
    app.send_ok("bob#laptop", group, "yes, on my laptop").await;
    tokio::time::sleep(Duration::from_millis(timing.grace_ms + 1500)).await;

    assert!(push.received().is_empty(), "{:#?}", push.received());
}

async fn a_burst_of_100_messages_is_coalesced_into_a_few_pushes_with_the_right_badge(
    engine: Engine,
) {
    let (app, push) = rig(engine, QUICK).await;
    let group = group_with_bobs_phone(&app).await;
    let started = Instant::now();

    for n in 0..100 {
        app.send_ok("alice", group, &format!("message {n}")).await;
    }
    let received = push
        .wait_for(PATIENCE, "a badge of 100", |r| {
            taken(r).last().is_some_and(|p| p.body["badge"] == 100)
        })
        .await;

    let elapsed = started.elapsed();
    let interval = Duration::from_millis(QUICK.interval_ms);
    let bound = (elapsed.as_millis() / interval.as_millis()) as usize + 2;
    assert!(
        received.len() <= bound,
        "at most one push per interval: {} in {elapsed:?}",
        received.len()
    );
    let last = &received[received.len() - 1];
    assert_eq!(last.body["groups"][0]["unread_count"], 100, "{}", last.raw);
    assert_eq!(last.body["groups"][0]["last_msg_id"], 100);
    let mut keys: Vec<&str> = received.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), received.len(), "each push its own key");
}

async fn reading_on_the_laptop_sends_a_badge_update_to_the_phone(engine: Engine) {
    let (app, push) = rig(engine, QUICK).await;
    let group = group_with_bobs_phone(&app).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    push.wait_for(PATIENCE, "a badge of 2", |r| {
        taken(r).iter().any(|p| p.body["badge"] == 2)
    })
    .await;

    let read = app
        .ack("bob#laptop", group, json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    let received = push
        .wait_for(PATIENCE, "a badge update", |r| {
            taken(r)
                .last()
                .is_some_and(|p| p.body["kind"] == "badge_update")
        })
        .await;

    let update = &received[received.len() - 1];
    assert_eq!(update.body["badge"], 0, "{}", update.raw);
    let groups =
        json!([{"group_id": group, "unread_count": 0, "last_msg_id": 2, "new_messages": false}]);
    assert_eq!(update.body["groups"], groups);
    check_against_schema("PushNotification", &update.body);
}

async fn a_failing_then_hanging_push_service_gets_the_notification_once_it_recovers(
    engine: Engine,
) {
    let timing = Timing {
        timeout_ms: 300,
        ..QUICK
    };
    let (app, push) = rig(engine, timing).await;
    let group = group_with_bobs_phone(&app).await;
    push.set(Behaviour::Fail);

    app.send_ok("alice", group, "are you awake?").await;
    push.wait_for(PATIENCE, "three 500s", |r| r.len() >= 3)
        .await;
    push.set(Behaviour::Hang);
    let failed = push.received().len();
    push.wait_for(PATIENCE, "three timeouts", |r| r.len() >= failed + 3)
        .await;
    // Sends and acks go on while the push service hangs.
    assert_eq!(app.send_ok("alice", group, "still there?").await, 2);
    push.set(Behaviour::Take);
    let received = push
        .wait_for(PATIENCE, "a delivery", |r| !taken(r).is_empty())
        .await;

    // Every attempt up to the first delivery is one notification's. What comes after it (the
    // second message's notification, once the interval has passed) is another.
    let delivered = received
        .iter()
        .position(|r| r.answered == Behaviour::Take)
        .expect("a delivery");
    let key = &received[0].key;
    let first_try = received[0].raw.clone();
    for attempt in &received[..=delivered] {
        assert_eq!(&attempt.key, key, "one notification, every attempt its key");
        assert_eq!(attempt.raw, first_try, "every attempt the same bytes");
        assert!(attempt.signature_ok);
    }
    let sent = metric_once(&app, "chorus_push_sent_total", |v| v >= 1.0).await;
    assert!(sent >= 1.0, "counted as sent: {sent}");
    let retried = metric_once(&app, "chorus_push_retried_total", |v| v >= 6.0).await;
    assert!(retried >= 6.0, "every failed attempt counted: {retried}");
}

/// The value of a counter on /metrics once `done` holds for it (it is counted just after the
/// push service answered, so a moment after the receiver saw the request).
async fn metric_once(app: &TestApp, name: &str, done: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let value = app.metric(name).await.unwrap_or(0.0);
        if done(value) || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        tokio::time::sleep(Duration::from_millis(QUICK.interval_ms * 2)).await;
        let received = push.received();
        assert_eq!(received.len(), expected, "each once: {received:#?}");
        let mut keys: Vec<&str> = received.iter().map(|r| r.key.as_str()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), expected, "every notification its own key");
    }
}

async fn removed_and_signed_out_targets_get_no_push(engine: Engine) {
    let (app, push) = rig(engine, QUICK).await;
    let group = app.group_with("alice", &["bob"]).await;
    for device in ["bob#phone", "bob#tablet", "bob#watch"] {
        register(&app, device).await;
    }
    assert_eq!(
        app.delete_push_target("bob#laptop", "phone").await.status,
        204
    );
    assert_eq!(app.remove_device("bob#laptop", "tablet").await.status, 204);

    app.send_ok("alice", group, "who hears this?").await;
    push.wait_for(PATIENCE, "the watch's push", |r| !r.is_empty())
        .await;
    tokio::time::sleep(Duration::from_millis(QUICK.interval_ms * 2)).await;

    let devices: Vec<Value> = push
        .received()
        .iter()
        .map(|r| r.body["device_id"].clone())
        .collect();
    assert_eq!(devices, vec![json!("watch")]);
}

async fn bad_push_target_input_gets_json_errors_naming_the_field(app: TestApp) {
    app.my_groups("bob#laptop", "").await;
    let body = |platform: Value, token: Value| json!({"platform": platform, "token": token});
    let apns = || body(json!("apns"), json!("t0k3n"));
    let cases = vec![
        (
            "bob#phone",
            "phone",
            body(json!("APNs"), json!("t")),
            400,
            "validation_failed",
            "platform: ",
        ),
        (
            "bob#phone",
            "phone",
            body(json!("apns"), json!("  ")),
            400,
            "validation_failed",
            "token: ",
        ),
        (
            "bob#phone",
            "phone",
            json!({"platform": "apns"}),
            400,
            "validation_failed",
            "token: required",
        ),
        (
            "bob#phone",
            "phone",
            body(json!(7), json!("t")),
            400,
            "validation_failed",
            "platform: ",
        ),
        (
            "bob#phone",
            "phone",
            json!("apns"),
            400,
            "invalid_json",
            "invalid JSON body",
        ),
        (
            "bob#phone",
            "bad id",
            apns(),
            400,
            "validation_failed",
            "device_id: ",
        ),
        (
            "bob",
            "phone",
            apns(),
            409,
            "device_required",
            "device_id is phone",
        ),
        (
            "bob#laptop",
            "phone",
            apns(),
            403,
            "forbidden",
            "this token names laptop",
        ),
        ("bob#phone", "tablet", apns(), 404, "not_found", "tablet"),
        ("alice#x", "phone", apns(), 404, "not_found", "phone"),
        (
            "bob",
            "new-phone",
            apns(),
            404,
            "not_found",
            "token whose device_id is new-phone",
        ),
    ];
    for (caller, device, body, status, code, names) in cases {
        let path_device = device.replace(' ', "%20");
        let r = app
            .put_push_target(caller, &path_device, body.clone())
            .await;
        let message = r.body["error"]["message"].as_str().unwrap_or("");
        assert_eq!(
            (r.status, r.error_code()),
            (status, code),
            "{caller} {device} {body}: {:?}",
            r.body
        );
        assert!(message.contains(names), "{message:?} names {names:?}");
    }
    assert_eq!(
        app.put_push_target("bob#phone", "phone", apns())
            .await
            .status,
        200
    );
    assert_eq!(app.delete_push_target("bob", "phone").await.status, 204);
    assert_eq!(app.delete_push_target("bob", "nope").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_targets_can_be_registered_while_push_is_off() {
    let app = spawn_app(Engine::Sqlite).await;

    let r = app
        .put_push_target(
            "bob#phone",
            "phone",
            json!({"platform": "fcm", "token": "x"}),
        )
        .await;

    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["device_id"], "phone");
    assert_eq!(r.body["platform"], "fcm");
    assert!(r.body.get("token").is_none(), "the token is not repeated");
}
