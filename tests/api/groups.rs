//! Groups and membership: creation, paging, who may add and remove, the caller's group list.

use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    creator_becomes_owner_and_member,
    members_page_by_cursor,
    only_the_owner_adds_members_and_existing_ones_are_skipped,
    members_leave_owner_removes_and_owner_cannot_leave,
    my_groups_pages_and_filters_unread,
);

async fn creator_becomes_owner_and_member(app: TestApp) {
    let r = app
        .create_group("alice", "  team  ", &["bob", "carol", "bob", "alice"])
        .await;

    assert_eq!(r.status, 201);
    assert_eq!(r.body["name"], "team");
    assert_eq!(r.body["owner_id"], "alice");
    assert_eq!(
        r.body["member_count"], 3,
        "duplicates and the owner are counted once"
    );
    assert_eq!(r.body["last_msg_id"], 0);
    let group = r.body["group_id"].as_i64().unwrap();
    let members = app.list_members("bob", group, "").await;
    let roles: Vec<(String, String)> = members.body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["user_id"].as_str().unwrap().into(),
                m["role"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            ("alice".into(), "owner".into()),
            ("bob".into(), "member".into()),
            ("carol".into(), "member".into())
        ]
    );
}

async fn members_page_by_cursor(app: TestApp) {
    let others: Vec<String> = (0..25).map(|i| format!("user{i:02}")).collect();
    let refs: Vec<&str> = others.iter().map(String::as_str).collect();
    let group = app.group_with("owner", &refs).await;

    let mut seen = Vec::new();
    let mut query = "?limit=10".to_owned();
    loop {
        let page = app.list_members("owner", group, &query).await;
        for m in page.body["members"].as_array().unwrap() {
            seen.push(m["user_id"].as_str().unwrap().to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(cursor) => query = format!("?limit=10&cursor={cursor}"),
            None => break,
        }
    }

    assert_eq!(seen.len(), 26);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "ordered by user id, each once");
}

async fn only_the_owner_adds_members_and_existing_ones_are_skipped(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;

    let by_member = app.add_members("bob", group, &["carol"]).await;
    let by_owner = app
        .add_members("alice", group, &["bob", "carol", "dave", "carol"])
        .await;
    let empty = app.add_members("alice", group, &[]).await;

    assert_eq!(by_member.status, 403);
    assert_eq!(by_owner.status, 200);
    assert_eq!(by_owner.body["added"], json!(["carol", "dave"]));
    assert_eq!(empty.status, 400);
    assert_eq!(app.get_group("dave", group).await.body["member_count"], 4);
}

async fn members_leave_owner_removes_and_owner_cannot_leave(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol", "dave"]).await;

    let bob_removes_carol = app.remove_member("bob", group, "carol").await;
    let bob_leaves = app.remove_member("bob", group, "bob").await;
    let owner_removes_carol = app.remove_member("alice", group, "carol").await;
    let owner_leaves = app.remove_member("alice", group, "alice").await;
    let not_a_member = app.remove_member("alice", group, "zed").await;

    assert_eq!(bob_removes_carol.status, 403);
    assert_eq!(bob_leaves.status, 204);
    assert_eq!(owner_removes_carol.status, 204);
    assert_eq!(owner_leaves.status, 409);
    assert_eq!(not_a_member.status, 404);
    assert_eq!(
        app.list_messages("bob", group, "").await.status,
        403,
        "a former member is out"
    );
    assert_eq!(app.get_group("dave", group).await.body["member_count"], 2);
}

async fn my_groups_pages_and_filters_unread(app: TestApp) {
    let mut groups = Vec::new();
    for _ in 0..5 {
        groups.push(app.group_with("alice", &["bob"]).await);
    }
    app.send_ok("alice", groups[1], "x").await;
    app.send_ok("alice", groups[3], "y").await;
    app.send_ok("alice", groups[3], "z").await;

    let first = app.my_groups("bob", "?limit=2").await;
    let cursor = first.body["next_cursor"].as_str().unwrap().to_owned();
    let second = app
        .my_groups("bob", &format!("?limit=2&cursor={cursor}"))
        .await;
    let unread = app.my_groups("bob", "?unread_only=true").await;
    let bad_cursor = app.my_groups("bob", "?cursor=abc").await;

    assert_eq!(first.body["groups"].as_array().unwrap().len(), 2);
    assert_eq!(first.body["has_more"], true);
    assert_eq!(second.body["groups"][0]["group_id"], groups[2]);
    let unread: Vec<(i64, i64)> = unread.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group_id"].as_i64().unwrap(),
                g["unread_count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(unread, vec![(groups[1], 1), (groups[3], 2)]);
    assert_eq!(bad_cursor.status, 400);
}
