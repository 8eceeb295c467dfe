//! System lines: membership changes and renames written into the group's log, pulled by every
//! device, never unread, never with receipts.

use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    membership_changes_and_renames_are_lines_in_the_log,
    lines_never_count_as_unread_and_have_no_receipts,
    only_the_owner_renames_and_bad_names_are_refused,
);

fn entries(page: &Value) -> Vec<(String, Value)> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["kind"].as_str().unwrap().to_owned(), m["detail"].clone()))
        .collect()
}

async fn membership_changes_and_renames_are_lines_in_the_log(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    assert_eq!(
        app.get_group("alice", group).await.body["last_msg_id"],
        0,
        "creating a group writes no line"
    );
    app.add_members("alice", group, &["carol", "dave"]).await;
    app.add_members("alice", group, &["carol"]).await;
    app.remove_member("alice", group, "dave").await;
    app.remove_member("carol", group, "carol").await;
    let renamed = app.rename_group("alice", group, "launch team").await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(renamed.body["name"], "launch team");
    assert_eq!(
        app.rename_group("alice", group, "launch team").await.status,
        200
    );

    let pull = app.list_messages("bob#phone", group, "").await;
    assert_eq!(
        entries(&pull.body),
        [
            (
                "member_joined".into(),
                json!({"user_ids": ["carol", "dave"], "user_count": 2})
            ),
            (
                "member_removed".into(),
                json!({"user_ids": ["dave"], "user_count": 1})
            ),
            (
                "member_left".into(),
                json!({"user_ids": ["carol"], "user_count": 1})
            ),
            ("group_renamed".into(), json!({"name": "launch team"})),
        ],
        "adding a member already there and renaming to the same name write nothing"
    );
    let messages = pull.body["messages"].as_array().unwrap();
    assert_eq!(messages[1]["sender_id"], "alice", "who removed dave");
    assert_eq!(messages[2]["sender_id"], "carol", "who left");
    let listed = app.my_groups("bob", "").await;
    assert_eq!(listed.body["groups"][0]["name"], "launch team");
    assert_eq!(
        listed.body["groups"][0]["last_message"]["kind"],
        "group_renamed"
    );
}

async fn lines_never_count_as_unread_and_have_no_receipts(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let hello = app.send_ok("alice", group, "hello").await;
    app.add_members("alice", group, &["carol"]).await;
    app.rename_group("alice", group, "renamed").await;
    let line = hello + 1;

    let bob = app.my_groups("bob", "").await;
    assert_eq!(bob.body["groups"][0]["unread_count"], 1, "only the message");
    assert_eq!(bob.body["total_unread"], 1);
    let carol = app.my_groups("carol", "").await;
    assert_eq!(carol.body["groups"][0]["unread_count"], 0);
    let pull = app.list_messages("carol", group, "").await;
    assert_eq!(
        entries(&pull.body).len(),
        2,
        "carol's own join line first, then the rename"
    );
    let receipts = app.message_receipts("alice", group, line, "").await;
    assert_eq!(
        (receipts.status, receipts.error_code()),
        (409, "no_receipts")
    );
    let ack = app
        .ack("bob", group, json!({"last_ack_msg_id": hello}))
        .await;
    assert_eq!(
        ack.body["unread_count"], 0,
        "the lines above it do not count"
    );
    let page = app
        .list_messages("alice", group, "?after_msg_id=0&with_receipts=true")
        .await;
    let with_receipt: Vec<&Value> = page.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("receipt").is_some())
        .collect();
    assert_eq!(with_receipt.len(), 1, "alice's lines carry no receipts");
}

async fn only_the_owner_renames_and_bad_names_are_refused(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let by_member = app.rename_group("bob", group, "mine").await;
    assert_eq!(
        (by_member.status, by_member.error_code()),
        (403, "forbidden")
    );
    let by_outsider = app.rename_group("mallory", group, "mine").await;
    assert_eq!(by_outsider.status, 403);
    let nowhere = app.rename_group("alice", 999_999, "x").await;
    assert_eq!(nowhere.status, 404);
    for name in ["", "   ", "tab\there", &"x".repeat(201)] {
        let r = app.rename_group("alice", group, name).await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, "validation_failed"),
            "{name:?}"
        );
        assert!(r.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("name:"));
    }
    let group_now = app.get_group("alice", group).await;
    assert_eq!(group_now.body["name"], "test group");
    assert_eq!(group_now.body["last_msg_id"], 0, "nothing stored");
}
