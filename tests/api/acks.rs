//! Acks: forward-only cursors, read implies delivered, bounds, batches all-or-nothing.

use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    ack_never_moves_cursor_backwards,
    ack_defaults_read_to_ack_and_read_implies_delivered,
    ack_beyond_last_message_is_rejected_and_changes_nothing,
    ack_many_acks_several_groups_in_one_request,
    ack_many_is_all_or_nothing,
    non_member_cannot_ack,
    a_login_sync_leaves_every_group_as_acking_them_one_by_one_would,
    a_login_sync_of_the_most_groups_allowed_acks_them_all,
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

/// One history per group, built the same way for two members: what each group holds decides
/// which of an ack's paths it takes (nothing to move, another device had it, a move with
/// own messages and mentions above the read cursor, change entries in range).
async fn five_groups_for(app: &TestApp, member: &str) -> Vec<i64> {
    let phone = format!("{member}#{member}-phone");
    let laptop = format!("{member}#{member}-laptop");
    let mut groups = Vec::new();
    for _ in 0..5 {
        groups.push(app.group_with("alice", &[member]).await);
    }
    for &g in &groups {
        app.send_ok("alice", g, "one").await;
        app.send_ok("alice", g, "two").await;
    }
    // 0: the phone already has 1..2, so acking 2 again moves nothing.
    app.ack(&phone, groups[0], json!({"last_ack_msg_id": 2}))
        .await;
    // 1: the laptop read everything; the phone only catches up on delivery.
    app.send_ok("alice", groups[1], "three").await;
    app.ack(&laptop, groups[1], json!({"last_ack_msg_id": 3}))
        .await;
    // 2: the member's own message and a mention of them above the read cursor.
    app.send_ok(member, groups[2], "mine").await;
    let mention = json!({"content": "look", "mentions": [member]});
    assert_eq!(
        app.send_entry("alice", groups[2], mention).await.status,
        201
    );
    // 3: an edit entry, which never counts as unread.
    app.change("alice", groups[3], "edit", 1, Some("one, edited"))
        .await;
    // 4: more to read, acked twice in one batch.
    app.send_ok("alice", groups[4], "three").await;
    app.send_ok("alice", groups[4], "four").await;
    groups
}

/// The acks of a login sync, out of group order and with one group named twice.
fn login_sync(groups: &[i64]) -> Vec<Value> {
    vec![
        json!({"group_id": groups[3], "last_ack_msg_id": 3}),
        json!({"group_id": groups[4], "last_ack_msg_id": 2, "last_read_msg_id": 1}),
        json!({"group_id": groups[0], "last_ack_msg_id": 2}),
        json!({"group_id": groups[2], "last_ack_msg_id": 4, "last_read_msg_id": 2}),
        json!({"group_id": groups[1], "last_ack_msg_id": 3, "last_read_msg_id": 0}),
        json!({"group_id": groups[4], "last_ack_msg_id": 4}),
    ]
}

/// An ack's answer or a chat-list row without what differs between the two members' copies
/// of a group: its id and the times of its messages.
fn without_group_id(mut value: Value) -> Value {
    if let Some(fields) = value.as_object_mut() {
        fields.remove("group_id");
        fields.remove("last_activity_at");
        if let Some(last) = fields
            .get_mut("last_message")
            .and_then(Value::as_object_mut)
        {
            last.remove("created_at");
        }
    }
    value
}

async fn a_login_sync_leaves_every_group_as_acking_them_one_by_one_would(app: TestApp) {
    let bobs = five_groups_for(&app, "bob").await;
    let daves = five_groups_for(&app, "dave").await;

    // Bob's phone acks everything in one request; Dave's phone sends the same acks one by one.
    let batch = app
        .ack_many("bob#bob-phone", json!({ "acks": login_sync(&bobs) }))
        .await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    let mut one_by_one = Vec::new();
    for mut ack in login_sync(&daves) {
        let group_id = ack["group_id"].as_i64().expect("group_id");
        ack.as_object_mut().expect("an object").remove("group_id");
        let r = app.ack("dave#dave-phone", group_id, ack).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        one_by_one.push(r.body);
    }

    let results = batch.body["results"].as_array().expect("results").clone();
    assert_eq!(results.len(), 6, "one answer per ack, in request order");
    for (i, (b, d)) in results.iter().zip(&one_by_one).enumerate() {
        assert_eq!(
            b["group_id"],
            json!(login_sync(&bobs)[i]["group_id"]),
            "acks[{i}]"
        );
        assert_eq!(
            without_group_id(b.clone()),
            without_group_id(d.clone()),
            "acks[{i}]: the batch answers as the single ack did"
        );
    }
    // The figures that show each path was taken, not only that both agree.
    assert_eq!(
        results[0]["unread_count"], 0,
        "an edit entry is never unread"
    );
    assert_eq!(results[1]["last_read_msg_id"], 1);
    assert_eq!(
        results[5]["last_ack_msg_id"], 4,
        "the repeat moved on from the first"
    );
    assert_eq!(results[5]["unread_count"], 0);
    assert_eq!(results[2]["last_ack_msg_id"], 2, "nothing to move");
    assert_eq!(
        results[3]["unread_count"], 1,
        "own message not unread, mention is"
    );
    assert_eq!(results[3]["unread_mention_count"], 1);
    assert_eq!(results[4]["last_ack_msg_id"], 3, "the phone caught up");
    assert_eq!(results[4]["last_read_msg_id"], 3, "the laptop's read stays");

    // Every device of each member sees the same lists, and Alice the same receipts.
    for device in ["", "phone", "laptop"] {
        let caller = |user: &str| match device {
            "" => user.to_owned(),
            device => format!("{user}#{user}-{device}"),
        };
        let bob = app.my_groups(&caller("bob"), "").await;
        let dave = app.my_groups(&caller("dave"), "").await;
        let rows = |r: &crate::helpers::TestResponse| -> Vec<Value> {
            let groups = r.body["groups"].as_array().expect("groups").clone();
            groups.into_iter().map(without_group_id).collect()
        };
        assert_eq!(rows(&bob), rows(&dave), "bob{device} and dave{device}");
    }
    for (&b, &d) in bobs.iter().zip(&daves) {
        for msg_id in 1..=2 {
            let of_bob = app.message_receipts("alice", b, msg_id, "").await;
            let of_dave = app.message_receipts("alice", d, msg_id, "").await;
            assert_eq!(of_bob.body["read_count"], of_dave.body["read_count"]);
            assert_eq!(
                of_bob.body["delivered_count"],
                of_dave.body["delivered_count"]
            );
        }
    }
}

async fn a_login_sync_of_the_most_groups_allowed_acks_them_all(app: TestApp) {
    let most = 500;
    let mut acks = Vec::new();
    for i in 0..most {
        let g = app.group_with("alice", &["bob"]).await;
        if i % 2 == 0 {
            app.send_ok("alice", g, "hello").await;
        }
        acks.push(json!({"group_id": g, "last_ack_msg_id": 1 - (i % 2) as i64}));
    }
    let r = app.ack_many("bob", json!({ "acks": acks })).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let results = r.body["results"].as_array().expect("results");
    assert_eq!(results.len(), most);
    assert!(results.iter().all(|r| r["unread_count"] == 0));
    let unread = app.my_groups("bob", "?unread_only=true").await;
    assert_eq!(unread.body["groups"], json!([]), "nothing left unread");

    acks.push(acks[0].clone());
    let too_many = app.ack_many("bob", json!({ "acks": acks })).await;
    assert_eq!(too_many.status, 400, "501 acks are refused");
    assert!(too_many.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("acks:") && m.contains("500")));
}
