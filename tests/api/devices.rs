//! A user's devices: listed, signed out, forgotten when idle; and every bad device input.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;
use crate::on_postgres;
use crate::spec_check::check_against_spec;
use crate::support::engine::Engine;
use crate::support::tokens::SECRET;

on_both_engines!(
    devices_are_listed_once_used_and_the_caller_is_marked,
    a_signed_out_device_is_refused_until_it_signs_in_again_and_then_catches_up,
    removing_unknown_removed_or_foreign_devices_is_404_and_changes_nothing,
    a_device_of_another_user_is_refused_everywhere,
    a_token_with_a_malformed_device_claim_is_401_naming_the_claim,
    idle_devices_are_forgotten_by_the_retention_job,
);
on_postgres!(a_read_through_one_instance_clears_the_badge_polled_on_another);

/// A token with hand-made claims, signed with the test secret.
fn token_with_claims(claims: Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).expect("key");
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("token")
}

async fn get_with_token(app: &TestApp, template: &str, path: &str, token: &str) -> (u16, Value) {
    let response = app
        .client
        .get(format!("{}{path}", app.address))
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON body");
    check_against_spec("GET", template, status, &body);
    (status, body)
}

fn device_ids(listing: &Value) -> Vec<&str> {
    listing["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["device_id"].as_str().expect("device_id"))
        .collect()
}

async fn devices_are_listed_once_used_and_the_caller_is_marked(app: TestApp) {
    assert_eq!(app.my_devices("bob").await.body["devices"], json!([]));
    app.my_groups("bob#phone", "").await;
    app.my_groups("bob#laptop", "").await;
    app.my_groups("alice#tablet", "").await;

    let from_laptop = app.my_devices("bob#laptop").await;

    assert_eq!(from_laptop.status, 200);
    assert_eq!(device_ids(&from_laptop.body), vec!["phone", "laptop"]);
    let current: Vec<bool> = from_laptop.body["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["current"].as_bool().unwrap())
        .collect();
    assert_eq!(current, vec![false, true]);
    assert_eq!(
        device_ids(&app.my_devices("alice").await.body),
        vec!["tablet"]
    );
}

async fn a_signed_out_device_is_refused_until_it_signs_in_again_and_then_catches_up(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    let old_phone_token = app.token("bob#phone");
    assert_eq!(app.pull_and_ack_all("bob#phone", group).await, vec![1, 2]);

    // bob signs the phone out from his laptop.
    let removed = app.remove_device("bob#laptop", "phone").await;
    assert_eq!(removed.status, 204);

    // Every route refuses the phone's old token, with a code the app acts on (sign in again).
    for (template, path) in [
        ("/v1/me/groups", "/v1/me/groups".to_owned()),
        ("/v1/sync", "/v1/sync".to_owned()),
        (
            "/v1/groups/{group_id}/messages",
            format!("/v1/groups/{group}/messages"),
        ),
    ] {
        let (status, body) = get_with_token(&app, template, &path, &old_phone_token).await;
        assert_eq!(status, 401, "{path}");
        assert_eq!(body["error"]["code"], "device_signed_out", "{path}");
    }
    assert_eq!(
        device_ids(&app.my_devices("bob").await.body),
        vec!["laptop"]
    );
    let receipts = app.message_receipts("alice", group, 2, "").await;
    assert_eq!(
        receipts.body["read_count"], 1,
        "signing out forgets delivery, never what was read"
    );

    // A token issued after the sign-out (token times are in seconds) signs it in again, and
    // the phone starts over: it receives the group's messages again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let page = app.list_messages("bob#phone", group, "").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        device_ids(&app.my_devices("bob").await.body),
        vec!["phone", "laptop"]
    );
    // Signing in again does not bring back the tokens the sign-out refused.
    let (status, body) =
        get_with_token(&app, "/v1/me/groups", "/v1/me/groups", &old_phone_token).await;
    assert_eq!(
        status, 401,
        "a token from before the sign-out stays refused"
    );
    assert_eq!(body["error"]["code"], "device_signed_out");
}

async fn removing_unknown_removed_or_foreign_devices_is_404_and_changes_nothing(app: TestApp) {
    app.my_groups("bob#phone", "").await;
    app.my_groups("carol#pad", "").await;

    let unknown = app.remove_device("bob", "never-seen").await;
    let foreign = app.remove_device("bob", "pad").await;
    let bad = app.remove_device("bob", "has%20space").await;
    let first = app.remove_device("bob", "phone").await;
    let again = app.remove_device("bob", "phone").await;

    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.error_code(), "not_found");
    assert_eq!(
        foreign.status, 404,
        "another user's device is not bob's to remove"
    );
    assert_eq!(bad.status, 400);
    assert_eq!(bad.error_code(), "validation_failed");
    assert!(
        bad.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("device_id: must be 1-64 characters"),
        "{:?}",
        bad.body
    );
    assert_eq!(first.status, 204);
    assert_eq!(again.status, 404, "already signed out");
    assert_eq!(device_ids(&app.my_devices("carol").await.body), vec!["pad"]);
}

async fn a_device_of_another_user_is_refused_everywhere(app: TestApp) {
    let group = app.group_with("alice", &["mallory"]).await;
    app.send_ok("alice", group, "secret").await;
    app.my_groups("alice#alices-phone", "").await;

    let listing = app.my_groups("mallory#alices-phone", "").await;
    let pull = app.list_messages("mallory#alices-phone", group, "").await;
    let ack = app
        .ack("mallory#alices-phone", group, json!({"last_ack_msg_id": 1}))
        .await;

    for refused in [&listing, &pull, &ack] {
        assert_eq!(refused.status, 403);
        assert_eq!(refused.error_code(), "forbidden");
        assert!(refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("belongs to another user"));
    }
    let mallory = app.my_groups("mallory", "").await;
    assert_eq!(
        mallory.body["groups"][0]["last_read_msg_id"], 0,
        "nothing moved"
    );
    assert_eq!(
        device_ids(&app.my_devices("alice").await.body),
        vec!["alices-phone"]
    );
}

async fn a_token_with_a_malformed_device_claim_is_401_naming_the_claim(app: TestApp) {
    let exp = chrono::Utc::now().timestamp() + 600;
    for bad in ["", "has space", "a@b", &"x".repeat(65)] {
        let token = token_with_claims(json!({"sub": "bob", "exp": exp, "device_id": bad}));

        let (status, body) = get_with_token(&app, "/v1/me/groups", "/v1/me/groups", &token).await;

        assert_eq!(status, 401, "device_id {bad:?}");
        assert_eq!(body["error"]["code"], "unauthorized");
        assert_eq!(
            body["error"]["message"],
            "token claim device_id: must be 1-64 characters from A-Z a-z 0-9 . _ : -"
        );
    }
    let not_text = token_with_claims(json!({"sub": "bob", "exp": exp, "device_id": 7}));
    let (status, _) = get_with_token(&app, "/v1/me/groups", "/v1/me/groups", &not_text).await;
    assert_eq!(status, 401);
    assert_eq!(app.my_devices("bob").await.body["devices"], json!([]));
}

async fn idle_devices_are_forgotten_by_the_retention_job(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.ack("bob#phone", group, json!({"last_ack_msg_id": 1}))
        .await;
    let db =
        chorus::db::Db::connect(&chorus::db::DbSettings::for_url(&app.database_url)).expect("db");
    let keep_all = chorus::retention::RetentionPolicy {
        receipt_changes_secs: 3600,
        devices_secs: 3600,
        messages_secs: None,
    };
    let forget_idle = chorus::retention::RetentionPolicy {
        devices_secs: 0,
        ..keep_all
    };

    let kept = chorus::retention::sweep(&db, keep_all)
        .await
        .expect("sweep");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let swept = chorus::retention::sweep(&db, forget_idle)
        .await
        .expect("sweep");

    assert_eq!(kept.devices, 0);
    assert_eq!(swept.devices, 1);
    assert_eq!(app.my_devices("bob").await.body["devices"], json!([]));
    // Back after being forgotten, the phone is new: it receives the group again.
    let page = app.list_messages("bob#phone", group, "").await;
    assert_eq!(page.body["messages"][0]["msg_id"], 1);
    assert_eq!(
        app.my_groups("bob", "").await.body["groups"][0]["unread_count"],
        0
    );
}

async fn a_read_through_one_instance_clears_the_badge_polled_on_another() {
    let a = crate::helpers::spawn_app(Engine::Postgres).await;
    let second = a.second_instance().await;
    let b = a.via(&second);
    let group = a.group_with("alice", &["bob"]).await;
    a.send_ok("alice", group, "hello").await;
    let phone_cursor = a.cursor("bob#phone", "/v1/sync").await;

    let query = format!("?cursor={phone_cursor}&timeout_s=30");
    let started = std::time::Instant::now();
    let (poll, _) = tokio::join!(a.poll_sync("bob#phone", &query), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        b.ack("bob#laptop", group, json!({"last_ack_msg_id": 1}))
            .await
    });

    assert_eq!(poll.body["groups"][0]["group_id"], group);
    assert_eq!(poll.body["groups"][0]["unread_count"], 0);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "woken by the other instance, not by the poll's timeout"
    );
}
