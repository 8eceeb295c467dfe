//! Waking phones: who is due a notification and what it says (decided from cursors,
//! coalesced, with content only when it is on), push targets registered, replaced and
//! removed, and every bad push-target input. Delivery (retries, leases, metrics) is in
//! push_delivery.rs; the rig both use is push_rig.rs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{spawn_app, TestApp};
use crate::push_rig::{
    group_with_bobs_phone, register, rig, rig_with, taken, Timing, PATIENCE, QUICK,
};
use crate::spec_check::check_against_schema;
use crate::support::engine::Engine;
use crate::support::push_receiver::{PushReceiver, Received};
use crate::{on_both_engines, on_postgres};

/// What a machine busy with other tests may add to a bound the push rule promises.
const SLACK: Duration = Duration::from_secs(10);

on_both_engines!(by engine:
    an_offline_device_gets_one_push_within_grace_and_interval,
    a_device_that_acks_within_grace_gets_none_nor_for_its_own_or_system_entries,
    a_phone_whose_user_reads_on_the_laptop_within_grace_gets_no_push_nor_badge_update,
    a_burst_of_100_messages_is_coalesced_into_a_few_pushes_with_the_right_badge,
    reading_on_the_laptop_sends_a_badge_update_to_the_phone,
    reading_on_the_phone_itself_sends_it_no_badge_update,
    a_replaced_push_target_gets_the_next_push_at_its_new_token_once,
    with_content_on_a_push_carries_the_sender_and_the_first_100_characters,
    removed_and_signed_out_targets_get_no_push,
);

on_both_engines!(bad_push_target_input_gets_json_errors_naming_the_field);

on_postgres!(
    on_postgres_a_read_waiting_for_the_phones_badge_counts_a_message_that_arrives_meanwhile,
);

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
    let waited = push_1.at - sent_at;
    assert!(
        waited >= QUICK.grace(),
        "not before the grace period: {waited:?}"
    );
    // The promise is "within grace + interval". The slack is for a loaded two-core machine
    // (a tick late, a slow commit), not a claim about speed: a push decided by anything but
    // the grace period and the interval (say, a next tick that never comes until some other
    // event) would miss this bound by far more.
    let bound = QUICK.grace() + QUICK.interval() + SLACK;
    assert!(
        waited <= bound,
        "within grace + interval (+ slack): {waited:?}"
    );
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
    assert!(
        !push_1.raw.contains("alice"),
        "nor the sender: {}",
        push_1.raw
    );
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

async fn a_phone_whose_user_reads_on_the_laptop_within_grace_gets_no_push_nor_badge_update(
    engine: Engine,
) {
    // A grace period far longer than a send and an ack take on a loaded machine, so the
    // laptop's read always lands inside it (checked below, as the test's premise).
    let timing = Timing {
        grace_ms: 3000,
        ..QUICK
    };
    let (app, push) = rig(engine, timing).await;
    let group = group_with_bobs_phone(&app).await;

    let sent_at = Instant::now();
    let first = app.send_ok("alice", group, "lunch?").await;
    let read = app
        .ack("bob#laptop", group, json!({"last_ack_msg_id": first}))
        .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert!(sent_at.elapsed() < timing.grace(), "read within the grace");
    tokio::time::sleep(timing.grace() + timing.interval() * 2).await;

    // Never told of the message, the phone has no badge to clear either.
    assert!(push.received().is_empty(), "{:#?}", push.received());
    // The phone is not deaf: a message nobody read wakes it, and tells of that one only.
    let second = app.send_ok("alice", group, "anyone?").await;
    let received = push
        .wait_for(PATIENCE, "a push for the unread message", |r| !r.is_empty())
        .await;
    let woken = &received[0];
    assert_eq!(woken.body["kind"], "new_messages", "{}", woken.raw);
    assert_eq!(woken.body["badge"], 1);
    let groups = json!([{"group_id": group, "unread_count": 1, "last_msg_id": second,
        "new_messages": true}]);
    assert_eq!(woken.body["groups"], groups);
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

/// A group in which alice sent two messages that bob's phone was told of, with a badge of 2.
async fn bobs_phone_told_of_two_messages(
    engine: Engine,
    timing: Timing,
) -> (TestApp, PushReceiver, i64) {
    let (app, push) = rig(engine, timing).await;
    let group = group_with_bobs_phone(&app).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    push.wait_for(PATIENCE, "a badge of 2", |r| {
        taken(r).iter().any(|p| p.body["badge"] == 2)
    })
    .await;
    (app, push, group)
}

async fn reading_on_the_laptop_sends_a_badge_update_to_the_phone(engine: Engine) {
    let (app, push, group) = bobs_phone_told_of_two_messages(engine, QUICK).await;

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

async fn reading_on_the_phone_itself_sends_it_no_badge_update(engine: Engine) {
    let (app, push, group) = bobs_phone_told_of_two_messages(engine, QUICK).await;
    let told = push.received().len();

    // The phone's own read: it knows its badge is 0, a push would only repeat it.
    let read = app
        .ack("bob#phone", group, json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert_eq!(read.body["unread_count"], 0);
    tokio::time::sleep(QUICK.grace() + QUICK.interval() * 2).await;
    let after_the_read = push.received();
    assert_eq!(after_the_read.len(), told, "{:#?}", &after_the_read[told..]);

    // The next message is pushed with the badge counted from the read.
    app.send_ok("alice", group, "three").await;
    let received = push
        .wait_for(PATIENCE, "a push for the third message", |r| r.len() > told)
        .await;
    let woken = &received[told];
    assert_eq!(woken.body["kind"], "new_messages", "{}", woken.raw);
    assert_eq!(woken.body["badge"], 1);
}

async fn a_replaced_push_target_gets_the_next_push_at_its_new_token_once(engine: Engine) {
    let (app, push) = rig(engine, QUICK).await;
    let group = app.group_with("alice", &["bob"]).await;
    let target = |platform: &str, token: &str| json!({"platform": platform, "token": token});
    let first = app
        .put_push_target("bob#phone", "phone", target("apns", "first-token"))
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    app.send_ok("alice", group, "one").await;
    push.wait_for(PATIENCE, "a push to the first token", |r| {
        !taken(r).is_empty()
    })
    .await;

    let second = app
        .put_push_target("bob#phone", "phone", target("fcm", "second-token"))
        .await;
    assert_eq!(second.status, 200, "{:?}", second.body);
    assert_eq!(second.body["platform"], "fcm");
    tokio::time::sleep(QUICK.grace() + QUICK.interval() * 2).await;
    assert_eq!(push.received().len(), 1, "a new token repeats nothing told");
    app.send_ok("alice", group, "two").await;
    push.wait_for(PATIENCE, "a push to the new token", |r| r.len() >= 2)
        .await;
    tokio::time::sleep(QUICK.interval() * 2).await;

    let received = push.received();
    assert_eq!(
        received.len(),
        2,
        "one push after the replacement: {received:#?}"
    );
    let (before, after) = (&received[0], &received[1]);
    assert_eq!(before.body["token"], "first-token");
    assert_eq!(after.body["platform"], "fcm", "{}", after.raw);
    assert_eq!(after.body["token"], "second-token");
    assert!(!after.raw.contains("first-token"), "{}", after.raw);
    assert_eq!(after.body["badge"], 2);
    assert_ne!(after.key, before.key, "a notification of its own");
    check_against_schema("PushNotification", &after.body);
}

async fn with_content_on_a_push_carries_the_sender_and_the_first_100_characters(engine: Engine) {
    let (app, push) = rig_with(engine, QUICK, |s| s.push_content = true).await;
    let from_alice = app.group_with("alice", &["bob"]).await;
    let from_carol = app.group_with("carol", &["bob"]).await;
    register(&app, "bob#phone").await;
    // 150 characters of two, three and four bytes: a cut by bytes would split one of them.
    let long: String = "é日😀".chars().cycle().take(150).collect();

    app.send_ok("alice", from_alice, &long).await;
    app.send_ok("carol", from_carol, "short 👋").await;
    let received = push
        .wait_for(PATIENCE, "both groups' previews", |r| {
            let shown = previews(r);
            shown.contains_key(&from_alice) && shown.contains_key(&from_carol)
        })
        .await;

    let shown = previews(&received);
    let first_100: String = long.chars().take(100).collect();
    assert!(
        first_100.len() > 100,
        "multibyte: {} bytes",
        first_100.len()
    );
    let alices = json!({"sender_id": "alice", "text": first_100});
    assert_eq!(
        shown[&from_alice], alices,
        "the first 100 characters, whole"
    );
    let carols = json!({"sender_id": "carol", "text": "short 👋"});
    assert_eq!(shown[&from_carol], carols, "a short message whole");
    for push_n in &received {
        check_against_schema("PushNotification", &push_n.body);
    }
}

/// The `last_message` each group's latest push showed, by group id.
fn previews(received: &[Received]) -> BTreeMap<i64, Value> {
    let mut shown = BTreeMap::new();
    for push_n in taken(received) {
        for group in push_n.body["groups"].as_array().into_iter().flatten() {
            if let (Some(id), Some(preview)) =
                (group["group_id"].as_i64(), group.get("last_message"))
            {
                shown.insert(id, preview.clone());
            }
        }
    }
    shown
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
            "validation_failed",
            "the body: must be an object, got a string",
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

/// A notification being built holds the phone's badge row while it tells of a new message.
/// A read on the phone waits for that row before it counts what is unread: counted before,
/// it would miss a message that arrived while it waited, and lower the badge the
/// notification had just raised for that message to a count without it, which no later
/// notification corrects (the phone was told of everything).
async fn on_postgres_a_read_waiting_for_the_phones_badge_counts_a_message_that_arrives_meanwhile() {
    // Both messages are sent well inside the grace, so the first push tells of both; and
    // one push per minute at most: after it, no notification is built meanwhile.
    let slow = Timing {
        grace_ms: 2_000,
        interval_ms: 60_000,
        ..QUICK
    };
    let (app, _push, group) = bobs_phone_told_of_two_messages(Engine::Postgres, slow).await;

    let badge_row = app
        .transaction_held(&format!(
            "UPDATE push_group_state SET notified_unread = notified_unread \
             WHERE device_id = 'phone' AND group_id = {group}"
        ))
        .await;
    // Naming the group twice, the request acks it twice, one after the other.
    let read = app.ack_many(
        "bob#phone",
        json!({"acks": [
            {"group_id": group, "last_ack_msg_id": 2},
            {"group_id": group, "last_ack_msg_id": 2}
        ]}),
    );
    let meanwhile = async {
        app.until_waiting_for_locks(1).await;
        app.send_ok("alice", group, "three").await;
        badge_row.commit().await
    };
    let (read, _) = tokio::join!(read, meanwhile);

    assert_eq!(read.status, 200, "{:?}", read.body);
    for result in read.body["results"].as_array().expect("results") {
        assert_eq!(result["last_read_msg_id"], 2, "{result}");
        assert_eq!(result["last_msg_id"], 3, "{result}");
        assert_eq!(result["unread_count"], 1, "{result}");
    }
    let badge = format!(
        "SELECT notified_unread::text AS value FROM push_group_state \
         WHERE device_id = 'phone' AND group_id = {group}"
    );
    assert_eq!(
        app.postgres_values(&badge).await,
        vec!["1".to_owned()],
        "the badge the server holds for the phone is its unread count"
    );
}
