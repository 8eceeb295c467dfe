//! The offline pull of the seeds: group by group, page by page, ack each page.

use futures::future::join_all;
use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    offline_member_pulls_30_groups_of_1000_messages_to_zero_unread,
    crash_before_ack_gets_the_same_page_again,
);

const GROUPS: usize = 30;
const PER_GROUP: i64 = 1000;

async fn offline_member_pulls_30_groups_of_1000_messages_to_zero_unread(app: TestApp) {
    let mut groups = Vec::new();
    for _ in 0..GROUPS {
        groups.push(app.group_with("sender", &["offline"]).await);
    }
    // Arrange: 30,000 messages while "offline" pulls nothing, 6 groups at a time.
    let app = &app;
    for chunk in groups.chunks(6) {
        join_all(chunk.iter().map(|&group| async move {
            for i in 0..PER_GROUP {
                let r = app
                    .send(
                        "sender",
                        group,
                        &format!("g{group}-{i}"),
                        &format!("message {i}"),
                    )
                    .await;
                assert_eq!(r.status, 201);
            }
        }))
        .await;
    }
    let before = app
        .my_groups("offline", "?unread_only=true&limit=200")
        .await;
    assert_eq!(before.body["groups"].as_array().unwrap().len(), GROUPS);
    assert!(before.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["unread_count"] == PER_GROUP));

    // Act: the login sync, group by group and page by page.
    let mut pages = 0;
    for &group in &groups {
        let mut expected_next = 1;
        loop {
            let page = app.list_messages("offline", group, "?limit=200").await;
            assert_eq!(page.status, 200);
            let msgs = page.body["messages"].as_array().unwrap();
            if msgs.is_empty() {
                assert_eq!(page.body["has_more"], false);
                break;
            }
            for m in msgs {
                assert_eq!(m["msg_id"], expected_next, "each message once, in order");
                expected_next += 1;
            }
            let last = msgs.last().unwrap()["msg_id"].as_i64().unwrap();
            let ack = app
                .ack("offline", group, json!({"last_ack_msg_id": last}))
                .await;
            assert_eq!(ack.status, 200);
            pages += 1;
        }
        assert_eq!(expected_next, PER_GROUP + 1);
    }

    // Assert: nothing left unread anywhere.
    assert_eq!(pages, GROUPS * 5);
    let after = app.my_groups("offline", "?unread_only=true").await;
    assert_eq!(after.body["groups"], json!([]));
    let all = app.my_groups("offline", "?limit=200").await;
    assert!(all.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["unread_count"] == 0));
}

async fn crash_before_ack_gets_the_same_page_again(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 0..5 {
        app.send_ok("alice", group, &format!("m{i}")).await;
    }

    let first = app.list_messages("bob", group, "?limit=3").await;
    // Bob "crashes" here: no ack. On restart he pulls again.
    let again = app.list_messages("bob", group, "?limit=3").await;

    assert_eq!(first.body["messages"], again.body["messages"]);
    assert_eq!(first.body["has_more"], true);
    app.ack("bob", group, json!({"last_ack_msg_id": 3})).await;
    let next = app.list_messages("bob", group, "?limit=3").await;
    let ids: Vec<i64> = next.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["msg_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![4, 5]);
    assert_eq!(next.body["has_more"], false);
}
