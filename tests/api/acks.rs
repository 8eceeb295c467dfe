//! Acks: forward-only cursors, read implies delivered, bounds, batches all-or-nothing.

use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    ack_never_moves_cursor_backwards,
    ack_defaults_read_to_ack_and_read_implies_delivered,
    ack_beyond_last_message_is_rejected_and_changes_nothing,
    ack_many_acks_several_groups_in_one_request,
    ack_many_is_all_or_nothing,
    non_member_cannot_ack,
);

async fn ack_never_moves_cursor_backwards(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for _ in 0..5 {
        app.send_ok("alice", group, "x").await;
    }

    let forward = app.ack("bob", group, json!({"last_ack_msg_id": 4})).await;
    let backward = app.ack("bob", group, json!({"last_ack_msg_id": 2})).await;
    let read_back = app
        .ack(
            "bob",
            group,
            json!({"last_ack_msg_id": 4, "last_read_msg_id": 1}),
        )
        .await;

    assert_eq!(forward.body["last_ack_msg_id"], 4);
    assert_eq!(backward.status, 200, "a lower ack is a no-op, not an error");
    assert_eq!(backward.body["last_ack_msg_id"], 4);
    assert_eq!(backward.body["last_read_msg_id"], 4);
    assert_eq!(read_back.body["last_read_msg_id"], 4);
    assert_eq!(backward.body["unread_count"], 1);
}

async fn ack_defaults_read_to_ack_and_read_implies_delivered(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for _ in 0..6 {
        app.send_ok("alice", group, "x").await;
    }

    let delivered_only = app
        .ack(
            "bob",
            group,
            json!({"last_ack_msg_id": 3, "last_read_msg_id": 0}),
        )
        .await;
    let read_ahead = app
        .ack(
            "bob",
            group,
            json!({"last_ack_msg_id": 3, "last_read_msg_id": 5}),
        )
        .await;
    let plain = app.ack("bob", group, json!({"last_ack_msg_id": 6})).await;

    assert_eq!(delivered_only.body["last_ack_msg_id"], 3);
    assert_eq!(delivered_only.body["last_read_msg_id"], 0);
    assert_eq!(delivered_only.body["unread_count"], 6);
    assert_eq!(
        read_ahead.body["last_ack_msg_id"], 5,
        "reading implies delivery"
    );
    assert_eq!(read_ahead.body["last_read_msg_id"], 5);
    assert_eq!(plain.body["last_read_msg_id"], 6, "an ack alone means read");
    assert_eq!(plain.body["unread_count"], 0);
}

async fn ack_beyond_last_message_is_rejected_and_changes_nothing(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "x").await;
    app.ack(
        "bob",
        group,
        json!({"last_ack_msg_id": 1, "last_read_msg_id": 0}),
    )
    .await;

    let too_far = app.ack("bob", group, json!({"last_ack_msg_id": 2})).await;
    let read_too_far = app
        .ack(
            "bob",
            group,
            json!({"last_ack_msg_id": 1, "last_read_msg_id": 9}),
        )
        .await;
    let negative = app.ack("bob", group, json!({"last_ack_msg_id": -1})).await;

    assert_eq!(too_far.status, 422);
    assert_eq!(too_far.error_code(), "ack_beyond_last_message");
    assert_eq!(read_too_far.status, 422);
    assert_eq!(negative.status, 400);
    assert_eq!(negative.error_code(), "validation_failed");
    let mine = app.my_groups("bob", "").await;
    assert_eq!(mine.body["groups"][0]["last_ack_msg_id"], 1);
    assert_eq!(mine.body["groups"][0]["last_read_msg_id"], 0);
}

async fn ack_many_acks_several_groups_in_one_request(app: TestApp) {
    let g1 = app.group_with("alice", &["bob"]).await;
    let g2 = app.group_with("carol", &["bob"]).await;
    app.send_ok("alice", g1, "a").await;
    app.send_ok("alice", g1, "b").await;
    app.send_ok("carol", g2, "c").await;

    let r = app
        .ack_many(
            "bob",
            json!({"acks": [
                {"group_id": g1, "last_ack_msg_id": 2},
                {"group_id": g2, "last_ack_msg_id": 1, "last_read_msg_id": 0}
            ]}),
        )
        .await;

    assert_eq!(r.status, 200);
    assert_eq!(r.body["results"][0]["unread_count"], 0);
    assert_eq!(r.body["results"][1]["last_ack_msg_id"], 1);
    assert_eq!(r.body["results"][1]["unread_count"], 1);
}

async fn ack_many_is_all_or_nothing(app: TestApp) {
    let g1 = app.group_with("alice", &["bob"]).await;
    let stranger = app.group_with("carol", &[]).await;
    app.send_ok("alice", g1, "a").await;
    app.send_ok("carol", stranger, "c").await;

    let not_member = app
        .ack_many(
            "bob",
            json!({"acks": [
                {"group_id": g1, "last_ack_msg_id": 1},
                {"group_id": stranger, "last_ack_msg_id": 1}
            ]}),
        )
        .await;
    let missing = app
        .ack_many(
            "bob",
            json!({"acks": [
                {"group_id": g1, "last_ack_msg_id": 1},
                {"group_id": 999_999, "last_ack_msg_id": 1}
            ]}),
        )
        .await;
    let beyond = app
        .ack_many(
            "bob",
            json!({"acks": [
                {"group_id": g1, "last_ack_msg_id": 1},
                {"group_id": g1, "last_ack_msg_id": 50}
            ]}),
        )
        .await;
    let empty = app.ack_many("bob", json!({"acks": []})).await;

    assert_eq!(not_member.status, 403);
    assert!(not_member.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("acks[1]"));
    assert_eq!(missing.status, 404);
    assert_eq!(beyond.status, 422);
    assert_eq!(empty.status, 400);
    let mine = app.my_groups("bob", "").await;
    assert_eq!(
        mine.body["groups"][0]["last_ack_msg_id"], 0,
        "the first ack rolled back with the batch"
    );
}

async fn non_member_cannot_ack(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "x").await;

    let r = app
        .ack("mallory", group, json!({"last_ack_msg_id": 1}))
        .await;
    let missing = app
        .ack("mallory", 424_242, json!({"last_ack_msg_id": 1}))
        .await;

    assert_eq!(r.status, 403);
    assert_eq!(missing.status, 404);
}
