//! The chat list in one call: groups by latest activity, each with a preview of its last
//! message and an unread badge, and the total for the app icon.

use std::time::{Duration, Instant};

use chorus::config::Settings;
use serde_json::{json, Value};

use crate::endpoints::group_ids;
use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    the_chat_list_puts_the_latest_activity_first_and_pages_without_repeats,
    each_group_shows_its_last_message_cut_to_120_characters,
    total_unread_counts_every_group_not_only_the_page,
    a_member_added_later_sees_nothing_sent_before_they_joined,
    bad_order_and_cursor_values_are_400_naming_the_parameter,
);

on_both_engines!(with short_message_retention:
    expired_messages_stop_counting_as_unread,
);

fn short_message_retention(s: &mut Settings) {
    s.message_retention_secs = Some(1);
    s.retention_interval_secs = 1;
}

async fn the_chat_list_puts_the_latest_activity_first_and_pages_without_repeats(app: TestApp) {
    let mut groups = Vec::new();
    for _ in 0..5 {
        groups.push(app.group_with("owner", &["alice"]).await);
    }
    let [g1, g2, g3, g4, g5] = groups[..] else {
        unreachable!()
    };
    app.send_ok("owner", g2, "to g2").await;
    app.send_ok("owner", g4, "to g4").await;

    let all = app.my_groups("alice", "?order=recent").await;

    assert_eq!(all.status, 200);
    assert_eq!(
        group_ids(&all.body),
        vec![g4, g2, g5, g3, g1],
        "messaged groups first, newest first; then the others by creation, newest first"
    );
    assert_eq!(group_ids(&app.my_groups("alice", "").await.body), groups);

    // Paging: two at a time. A group that gets a message meanwhile moves to the top (where
    // /v1/sync reports it); the pages never repeat a group nor skip one that did not move.
    let first = app.my_groups("alice", "?order=recent&limit=2").await;
    assert_eq!(group_ids(&first.body), vec![g4, g2]);
    app.send_ok("owner", g1, "to g1").await;
    let mut seen = group_ids(&first.body);
    let mut cursor = first.body["next_cursor"].as_str().map(str::to_owned);
    while let Some(c) = cursor {
        let page = app
            .my_groups("alice", &format!("?order=recent&limit=2&cursor={c}"))
            .await;
        assert_eq!(page.status, 200);
        seen.extend(group_ids(&page.body));
        cursor = page.body["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, vec![g4, g2, g5, g3]);
    let now = app.my_groups("alice", "?order=recent").await;
    assert_eq!(group_ids(&now.body), vec![g1, g4, g2, g5, g3]);
}

async fn each_group_shows_its_last_message_cut_to_120_characters(app: TestApp) {
    let long_group = app.group_with("alice", &["bob"]).await;
    let short_group = app.group_with("alice", &["bob"]).await;
    let quiet_group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", long_group, "first").await;
    let long = "é".repeat(130);
    let long_id = app.send_ok("alice", long_group, &long).await;
    app.send_ok("bob", short_group, "short").await;

    let listed = app.my_groups("bob", "").await;

    let by_id = |id: i64| {
        listed.body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group_id"] == id)
            .unwrap()
            .clone()
    };
    let long_row = by_id(long_group);
    assert_eq!(long_row["last_message"]["msg_id"], long_id);
    assert_eq!(long_row["last_message"]["sender_id"], "alice");
    assert_eq!(long_row["last_message"]["preview"], "é".repeat(120));
    assert_eq!(long_row["last_message"]["truncated"], true);
    assert!(long_row["last_message"]["created_at"].is_string());
    assert_eq!(long_row["unread_count"], 2);
    let short_row = by_id(short_group);
    assert_eq!(short_row["last_message"]["preview"], "short");
    assert_eq!(short_row["last_message"]["truncated"], false);
    assert_eq!(short_row["last_message"]["sender_id"], "bob");
    assert_eq!(short_row["unread_count"], 0, "bob's own message");
    assert!(by_id(quiet_group).get("last_message").is_none());
    let full = app.list_messages("bob", long_group, "").await;
    assert_eq!(
        full.body["messages"][1]["content"],
        long.as_str(),
        "content is whole"
    );
}

async fn total_unread_counts_every_group_not_only_the_page(app: TestApp) {
    let two = app.group_with("alice", &["bob"]).await;
    let one = app.group_with("alice", &["bob"]).await;
    let none = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", two, "a").await;
    app.send_ok("alice", two, "b").await;
    app.send_ok("alice", one, "c").await;
    app.send_ok("bob", none, "mine").await;

    let page = app.my_groups("bob", "?limit=1").await;
    let unread_only = app.my_groups("bob", "?unread_only=true&order=recent").await;

    assert_eq!(page.body["total_unread"], 3);
    assert_eq!(group_ids(&page.body).len(), 1);
    assert_eq!(unread_only.body["total_unread"], 3);
    assert_eq!(group_ids(&unread_only.body), vec![one, two]);
    app.ack("bob", two, json!({"last_ack_msg_id": 2})).await;
    let after = app.my_groups("bob", "?limit=1").await;
    assert_eq!(after.body["total_unread"], 1);
    let cursor = app.cursor("bob", "/v1/sync").await;
    let sync = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;
    assert_eq!(
        sync.body["total_unread"], 1,
        "sync carries the badge total too"
    );
}

async fn a_member_added_later_sees_nothing_sent_before_they_joined(app: TestApp) {
    let group = app.group_with("alice", &["carol"]).await;
    app.send_ok("alice", group, "before bob joined").await;
    app.add_members("alice", group, &["bob"]).await;

    let listed = app.my_groups("bob", "?order=recent").await;
    let pull = app.list_messages("bob", group, "").await;
    let history = app.list_messages("bob", group, "?before_msg_id=2").await;
    let receipts = app.message_receipts("bob", group, 1, "").await;

    assert_eq!(listed.body["groups"][0]["group_id"], group);
    assert_eq!(
        listed.body["groups"][0]["last_message"]["kind"], "member_joined",
        "the preview is the line saying bob joined, not the message before it"
    );
    assert_eq!(
        listed.body["groups"][0]["unread_count"], 0,
        "joining is not unread"
    );
    assert_eq!(listed.body["total_unread"], 0);
    let kinds: Vec<&Value> = pull.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["kind"])
        .collect();
    assert_eq!(
        kinds,
        [&json!("member_joined")],
        "only the line of bob's own join"
    );
    assert_eq!(history.body["messages"], json!([]));
    assert_eq!(receipts.status, 404);

    app.send_ok("alice", group, "welcome").await;
    let listed = app.my_groups("bob", "").await;
    assert_eq!(
        listed.body["groups"][0]["last_message"]["preview"],
        "welcome"
    );
    assert_eq!(listed.body["groups"][0]["unread_count"], 1);
}

async fn bad_order_and_cursor_values_are_400_naming_the_parameter(app: TestApp) {
    app.group_with("alice", &[]).await;
    let cases = [
        (
            "?order=sideways",
            "order: must be id (the default) or recent",
        ),
        (
            "?order=recent&cursor=12",
            "cursor: not a cursor this server issued for order=recent",
        ),
        (
            "?order=recent&cursor=abc:1",
            "cursor: not a cursor this server issued for order=recent",
        ),
        (
            "?order=id&cursor=1700000000000000:3",
            "cursor: not a cursor this server issued for order=id",
        ),
    ];
    for (query, message) in cases {
        let r = app.my_groups("alice", query).await;
        assert_eq!(r.status, 400, "{query}");
        assert_eq!(r.error_code(), "validation_failed", "{query}");
        assert_eq!(r.body["error"]["message"], message, "{query}");
    }
}

async fn expired_messages_stop_counting_as_unread(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=3 {
        app.send_ok("alice", group, &format!("old {i}")).await;
    }
    app.send_ok("bob", group, "bob's own").await;
    assert_eq!(
        app.my_groups("bob", "").await.body["groups"][0]["unread_count"],
        3
    );

    // Wait for the retention job to delete all four.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let history = app.list_messages("alice", group, "?after_msg_id=0").await;
        if history.body["messages"] == json!([]) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let listed = app.my_groups("bob", "").await;
    assert_eq!(listed.body["groups"][0]["unread_count"], 0);
    assert_eq!(listed.body["total_unread"], 0);
    assert!(listed.body["groups"][0].get("last_message").is_none());
    assert_eq!(
        listed.body["groups"][0]["last_ack_msg_id"], 0,
        "delivered cursors stay; a pull continues after what expired"
    );
    app.send_ok("alice", group, "new").await;
    let listed = app.my_groups("bob", "").await;
    assert_eq!(listed.body["groups"][0]["unread_count"], 1);
    let pull = app.list_messages("bob", group, "").await;
    assert_eq!(pull.body["messages"][0]["msg_id"], 5);
}
