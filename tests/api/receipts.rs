//! Read receipts derived from cursors: counts, who read, who may ask, the audience.

use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    receipts_count_readers_and_list_who_read,
    one_batch_ack_marks_every_earlier_message_read,
    only_the_sender_and_the_owner_see_receipts,
    audience_excludes_late_joiners_and_removed_members,
    receipt_lists_page_through_a_large_group,
    a_sender_who_joins_while_polling_is_told_of_receipts_in_the_new_group,
);

fn ids(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

async fn receipts_count_readers_and_list_who_read(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol", "dave"]).await;
    for i in 1..=3 {
        app.send_ok("alice", group, &format!("m{i}")).await;
    }
    app.ack("bob", group, json!({"last_ack_msg_id": 3})).await;
    app.ack(
        "carol",
        group,
        json!({"last_ack_msg_id": 2, "last_read_msg_id": 1}),
    )
    .await;

    let m1 = app.message_receipts("alice", group, 1, "").await;
    let m2 = app.message_receipts("alice", group, 2, "").await;

    assert_eq!(m1.status, 200);
    assert_eq!(
        (
            m1.body["read_count"].as_i64(),
            m1.body["unread_count"].as_i64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(ids(&m1.body["read_user_ids"]), vec!["bob", "carol"]);
    assert_eq!(ids(&m1.body["unread_user_ids"]), vec!["dave"]);
    assert_eq!(m2.body["read_count"], 1);
    assert_eq!(m2.body["unread_count"], 2);
    assert_eq!(
        m2.body["delivered_count"], 2,
        "carol has it but has not read it"
    );
    assert_eq!(ids(&m2.body["unread_user_ids"]), vec!["carol", "dave"]);
}

async fn one_batch_ack_marks_every_earlier_message_read(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=10 {
        app.send_ok("alice", group, &format!("m{i}")).await;
    }

    app.ack("bob", group, json!({"last_ack_msg_id": 10})).await;

    let page = app
        .list_messages("alice", group, "?after_msg_id=0&with_receipts=true")
        .await;
    let msgs = page.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 10);
    for m in msgs {
        assert_eq!(
            m["receipt"],
            json!({"read_count": 1, "unread_count": 0, "delivered_count": 1})
        );
    }
    let bob_view = app
        .list_messages("bob", group, "?after_msg_id=0&with_receipts=true")
        .await;
    assert!(
        bob_view.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("receipt").is_none()),
        "receipts appear only on the caller's own messages"
    );
}

async fn only_the_sender_and_the_owner_see_receipts(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let msg = app.send_ok("bob", group, "from bob").await;

    let sender = app.message_receipts("bob", group, msg, "").await;
    let owner = app.message_receipts("alice", group, msg, "").await;
    let other_member = app.message_receipts("carol", group, msg, "").await;
    let outsider = app.message_receipts("mallory", group, msg, "").await;
    let missing = app.message_receipts("bob", group, 99, "").await;

    assert_eq!(sender.status, 200);
    assert_eq!(owner.status, 200);
    assert_eq!(
        sender.body["unread_count"], 2,
        "the sender is not in the audience"
    );
    assert_eq!(other_member.status, 403);
    assert_eq!(outsider.status, 403);
    assert_eq!(missing.status, 404);
}

async fn audience_excludes_late_joiners_and_removed_members(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let before = app.send_ok("alice", group, "before erin").await;
    app.add_members("alice", group, &["erin"]).await;
    let after = app.send_ok("alice", group, "after erin").await;

    let old = app.message_receipts("alice", group, before, "").await;
    let new = app.message_receipts("alice", group, after, "").await;
    app.remove_member("alice", group, "bob").await;
    let old_after_removal = app.message_receipts("alice", group, before, "").await;
    let erin_asks_old = app.message_receipts("erin", group, before, "").await;

    assert_eq!(ids(&old.body["unread_user_ids"]), vec!["bob", "carol"]);
    assert_eq!(
        ids(&new.body["unread_user_ids"]),
        vec!["bob", "carol", "erin"]
    );
    assert_eq!(
        ids(&old_after_removal.body["unread_user_ids"]),
        vec!["carol"]
    );
    assert_eq!(
        erin_asks_old.status, 404,
        "a message from before one joined does not exist for them"
    );
}

async fn receipt_lists_page_through_a_large_group(app: TestApp) {
    let members: Vec<String> = (0..250).map(|i| format!("m{i:03}")).collect();
    let refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let group = app.group_with("alice", &refs[..200]).await;
    app.add_members("alice", group, &refs[200..]).await;
    let msg = app.send_ok("alice", group, "to everyone").await;
    for reader in &refs[..100] {
        app.ack(reader, group, json!({"last_ack_msg_id": msg}))
            .await;
    }

    let mut read = Vec::new();
    let mut unread = Vec::new();
    let mut query = "?limit=100".to_owned();
    loop {
        let page = app.message_receipts("alice", group, msg, &query).await;
        assert_eq!(page.body["read_count"], 100);
        assert_eq!(page.body["unread_count"], 150);
        read.extend(ids(&page.body["read_user_ids"]));
        unread.extend(ids(&page.body["unread_user_ids"]));
        match page.body["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=100&cursor={c}"),
            None => break,
        }
    }

    assert_eq!(read, members[..100].to_vec());
    assert_eq!(unread, members[100..].to_vec());
}

async fn a_sender_who_joins_while_polling_is_told_of_receipts_in_the_new_group(app: TestApp) {
    // Bob's receipts poll waits before he belongs to any group.
    let cursor = app.cursor("bob", "/v1/receipts").await;
    let group = app.group_with("alice", &["carol"]).await;
    let query = format!("?cursor={cursor}&timeout_s=20");
    let started = std::time::Instant::now();
    let (poll, sent) = tokio::join!(app.poll_receipts("bob", &query), async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        // Added meanwhile, he writes, and carol reads it.
        assert_eq!(app.add_members("alice", group, &["bob"]).await.status, 200);
        let msg = app.send_ok("bob", group, "hello, I am new").await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let read = json!({"last_ack_msg_id": msg});
        assert_eq!(app.ack("carol", group, read).await.status, 200);
        msg
    });

    assert_eq!(poll.status, 200);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "woken by the read, not timed out"
    );
    let changes = poll.body["changes"].as_array().expect("changes");
    let change = changes
        .iter()
        .find(|c| c["group_id"] == group && c["msg_id"] == sent)
        .unwrap_or_else(|| panic!("carol's read of bob's message in {}", poll.body));
    assert_eq!(change["read_count"], 1);
    assert_eq!(change["unread_count"], 1, "alice has not read it");
}
