//! Mentions with their own unread count, replies that quote, and client data on messages.

use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    mentions_get_their_own_unread_count_on_every_list,
    mention_all_counts_once_per_member_without_a_row_per_member,
    recalling_a_mention_takes_it_off_the_count,
    an_edit_keeps_the_mentions_and_never_adds_a_mention_count,
    bad_mentions_are_refused_and_nothing_is_stored,
    a_reply_quotes_the_message_as_it_is_now,
    bad_replies_are_refused_naming_the_field,
    ext_is_stored_and_returned_exactly_as_written,
    bad_ext_is_refused,
);

fn mention_count(listed: &Value, group: i64) -> Value {
    listed["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == group)
        .map(|g| g["unread_mention_count"].clone())
        .unwrap_or(Value::Null)
}

async fn mentions_of(app: &TestApp, user: &str, group: i64) -> Value {
    mention_count(&app.my_groups(user, "").await.body, group)
}

async fn last_msg_id(app: &TestApp, group: i64) -> i64 {
    app.get_group("alice", group).await.body["last_msg_id"]
        .as_i64()
        .unwrap()
}

async fn mentions_get_their_own_unread_count_on_every_list(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol", "dave"]).await;
    let cursor = app.cursor("carol", "/v1/sync").await;
    let sent = app
        .send_entry(
            "bob",
            group,
            json!({"content": "@carol @bob see this", "mentions": ["carol", "bob", "carol"]}),
        )
        .await;
    assert_eq!(sent.status, 201, "{:?}", sent.body);
    assert_eq!(
        sent.body["mentions"],
        json!(["carol"]),
        "duplicates dropped; mentioning oneself is not stored"
    );
    app.send_ok("alice", group, "no mention").await;

    assert_eq!(mentions_of(&app, "carol", group).await, 1);
    assert_eq!(mentions_of(&app, "dave", group).await, 0);
    assert_eq!(mentions_of(&app, "bob", group).await, 0, "his own message");
    let sync = app
        .poll_sync("carol", &format!("?cursor={cursor}&timeout_s=5"))
        .await;
    assert_eq!(mention_count(&sync.body, group), 1);
    let pull = app.list_messages("carol", group, "").await;
    assert_eq!(pull.body["messages"][0]["mentions"], json!(["carol"]));
    assert!(pull.body["messages"][1].get("mentions").is_none());

    let partial = app
        .ack(
            "carol",
            group,
            json!({"last_ack_msg_id": 0, "last_read_msg_id": 0}),
        )
        .await;
    assert_eq!(partial.body["unread_mention_count"], 1);
    let read = app.ack("carol", group, json!({"last_ack_msg_id": 2})).await;
    assert_eq!(read.body["unread_mention_count"], 0);
    assert_eq!(read.body["unread_count"], 0);
    assert_eq!(mentions_of(&app, "carol", group).await, 0);
}

async fn mention_all_counts_once_per_member_without_a_row_per_member(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let by_owner = app
        .send_entry(
            "alice",
            group,
            json!({"content": "@all @carol standup", "mention_all": true, "mentions": ["carol"]}),
        )
        .await;
    assert_eq!(by_owner.status, 201, "{:?}", by_owner.body);
    assert_eq!(by_owner.body["mention_all"], true);
    let by_owner = by_owner.body["msg_id"].as_i64().expect("msg_id");
    assert_eq!(
        app.stored_mention_rows(group, by_owner).await,
        ["carol"],
        "only the member named has a row; @all is one flag on the message"
    );
    assert_eq!(mentions_of(&app, "bob", group).await, 1);
    assert_eq!(
        mentions_of(&app, "carol", group).await,
        1,
        "named and @all in one message: one mention"
    );
    assert_eq!(
        mentions_of(&app, "alice", group).await,
        0,
        "her own message"
    );

    app.add_members("alice", group, &["erin"]).await;
    assert_eq!(
        mentions_of(&app, "erin", group).await,
        0,
        "an @all from before erin joined is not hers"
    );
    let again = app
        .send_entry(
            "alice",
            group,
            json!({"content": "@all again", "mention_all": true}),
        )
        .await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(mentions_of(&app, "erin", group).await, 1);
    assert_eq!(mentions_of(&app, "bob", group).await, 2);
    let again = again.body["msg_id"].as_i64().expect("msg_id");
    assert_eq!(
        app.stored_mention_rows(group, again).await,
        Vec::<String>::new(),
        "@all alone writes no mention row"
    );
}

async fn recalling_a_mention_takes_it_off_the_count(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let named = app
        .send_entry(
            "bob",
            group,
            json!({"content": "@carol", "mentions": ["carol"]}),
        )
        .await;
    let everyone = app
        .send_entry(
            "alice",
            group,
            json!({"content": "@all", "mention_all": true}),
        )
        .await;
    assert_eq!(mentions_of(&app, "carol", group).await, 2);
    let named = named.body["msg_id"].as_i64().unwrap();
    let everyone = everyone.body["msg_id"].as_i64().unwrap();

    app.change("bob", group, "recall", named, None).await;
    assert_eq!(mentions_of(&app, "carol", group).await, 1);
    app.change("alice", group, "delete", everyone, None).await;
    assert_eq!(mentions_of(&app, "carol", group).await, 0);
    let pull = app.list_messages("carol", group, "").await;
    assert!(
        pull.body["messages"][0].get("mentions").is_none(),
        "gone with the text"
    );
    assert!(pull.body["messages"][1].get("mention_all").is_none());
}

/// The caller's row for `group` in a /v1/sync answer from `cursor`.
async fn synced_row(app: &TestApp, user: &str, cursor: &str, group: i64) -> Value {
    let sync = app
        .poll_sync(user, &format!("?cursor={cursor}&timeout_s=5"))
        .await;
    assert_eq!(sync.status, 200, "{:?}", sync.body);
    sync.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group_id"] == group)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{user}'s sync does not report group {group}: {:?}",
                sync.body
            )
        })
}

/// (unread_count, unread_mention_count) of `user` in `group`, from /v1/me/groups.
async fn counts_of(app: &TestApp, user: &str, group: i64) -> (Value, Value) {
    let listed = app.my_groups(user, "").await;
    let row = listed.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group_id"] == group)
        .cloned()
        .unwrap_or(Value::Null);
    (
        row["unread_count"].clone(),
        row["unread_mention_count"].clone(),
    )
}

async fn an_edit_keeps_the_mentions_and_never_adds_a_mention_count(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let bob_cursor = app.cursor("bob", "/v1/sync").await;
    let carol_cursor = app.cursor("carol", "/v1/sync").await;
    let sent = app
        .send_entry(
            "alice",
            group,
            json!({"content": "@bob can you take this?", "mentions": ["bob"]}),
        )
        .await;
    assert_eq!(sent.status, 201, "{:?}", sent.body);
    let msg = sent.body["msg_id"].as_i64().expect("msg_id");
    assert_eq!(counts_of(&app, "bob", group).await, (json!(1), json!(1)));

    // The new text drops the "@bob"; the mention stays, as documented, and stays one.
    let edit = app
        .change("alice", group, "edit", msg, Some("can anyone take this?"))
        .await;
    assert_eq!(edit.status, 201, "{:?}", edit.body);
    assert_eq!(
        counts_of(&app, "bob", group).await,
        (json!(1), json!(1)),
        "the edit leaves bob's counts as they were"
    );
    assert_eq!(
        counts_of(&app, "carol", group).await,
        (json!(1), json!(0)),
        "an edit entry mentions nobody"
    );
    let bob_synced = synced_row(&app, "bob", &bob_cursor, group).await;
    assert_eq!(bob_synced["unread_count"], 1);
    assert_eq!(bob_synced["unread_mention_count"], 1);
    let carol_synced = synced_row(&app, "carol", &carol_cursor, group).await;
    assert_eq!(carol_synced["unread_mention_count"], 0);
    let pull = app.list_messages("bob", group, "?after_msg_id=0").await;
    assert_eq!(pull.body["messages"][0]["mentions"], json!(["bob"]));
    assert!(pull.body["messages"][1].get("mentions").is_none());

    // bob reads the message but not the edit entry above it: nothing counts, and a second
    // edit, itself above his read cursor, brings no mention back.
    let read = app.ack("bob", group, json!({"last_ack_msg_id": msg})).await;
    assert_eq!(read.body["unread_mention_count"], 0);
    let bob_cursor = app.cursor("bob", "/v1/sync").await;
    let again = app
        .change("alice", group, "edit", msg, Some("@bob can you, please?"))
        .await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(counts_of(&app, "bob", group).await, (json!(0), json!(0)));
    let bob_synced = synced_row(&app, "bob", &bob_cursor, group).await;
    assert_eq!(bob_synced["unread_count"], 0);
    assert_eq!(bob_synced["unread_mention_count"], 0);

    // An edit cannot carry mentions of its own: refused, nothing stored, counts unchanged.
    let last = msg + 2;
    for (field, value) in [("mentions", json!(["carol"])), ("mention_all", json!(true))] {
        let mut body = json!({"kind": "edit", "target_msg_id": msg, "content": "@carol"});
        body[field] = value;
        let r = app.send_entry("alice", group, body).await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, "validation_failed"),
            "{field}"
        );
        let text = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            text.contains(&format!("{field}: not accepted when kind is edit")),
            "{text}"
        );
    }
    assert_eq!(last_msg_id(&app, group).await, last, "nothing stored");
    assert_eq!(counts_of(&app, "carol", group).await, (json!(1), json!(0)));
}

async fn bad_mentions_are_refused_and_nothing_is_stored(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let many: Vec<String> = (0..51).map(|i| format!("u{i}")).collect();
    let cases = [
        (
            json!({"content": "x", "mentions": ["zed"]}),
            "bob",
            422,
            "mentions: zed is not a member",
        ),
        (
            json!({"content": "x", "mentions": many}),
            "bob",
            400,
            "mentions: at most 50",
        ),
        (
            json!({"content": "x", "mentions": ["not valid"]}),
            "bob",
            400,
            "mentions[0]",
        ),
        (
            json!({"content": "x", "mention_all": true}),
            "bob",
            403,
            "only the group owner",
        ),
        (
            json!({"content": "x", "mentions": "bob"}),
            "bob",
            400,
            r#"mentions: must be an array, got the string "bob""#,
        ),
    ];
    for (body, user, status, message) in cases {
        let r = app.send_entry(user, group, body.clone()).await;
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
        if status == 422 {
            assert_eq!(r.error_code(), "mention_of_non_member", "{body}");
        }
        let text = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{body}: {text}");
    }
    assert_eq!(last_msg_id(&app, group).await, 0, "nothing stored");
}

async fn a_reply_quotes_the_message_as_it_is_now(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let question = app
        .send_ok("alice", group, &"who takes this? ".repeat(10))
        .await;
    let reply = app
        .send_entry(
            "bob",
            group,
            json!({"content": "me", "reply_to_msg_id": question}),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.body["reply_to_msg_id"], question);
    assert_eq!(reply.body["reply_to"]["sender_id"], "alice");
    assert_eq!(reply.body["reply_to"]["truncated"], true);
    assert_eq!(
        reply.body["reply_to"]["preview"]
            .as_str()
            .unwrap()
            .chars()
            .count(),
        120
    );

    app.change("alice", group, "edit", question, Some("who?"))
        .await;
    let pull = app.list_messages("alice", group, "?after_msg_id=0").await;
    assert_eq!(pull.body["messages"][1]["reply_to"]["preview"], "who?");
    app.change("alice", group, "recall", question, None).await;
    let pull = app.list_messages("alice", group, "?after_msg_id=0").await;
    let quote = &pull.body["messages"][1]["reply_to"];
    assert_eq!(quote["kind"], "recalled");
    assert_eq!(quote["preview"], "", "a recalled message is not quoted");
}

async fn bad_replies_are_refused_naming_the_field(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let first = app.send_ok("alice", group, "first").await;
    let recalled = app.send_ok("alice", group, "recalled").await;
    app.change("alice", group, "recall", recalled, None).await;
    app.add_members("alice", group, &["carol"]).await;
    let line = recalled + 2;
    let cases = [
        (
            "bob",
            json!({"content": "x", "reply_to_msg_id": 100}),
            422,
            "reply_to_msg_id: 100",
        ),
        (
            "bob",
            json!({"content": "x", "reply_to_msg_id": line + 1}),
            422,
            "reply_to_msg_id",
        ),
        (
            "bob",
            json!({"content": "x", "reply_to_msg_id": -3}),
            400,
            "reply_to_msg_id",
        ),
        (
            "bob",
            json!({"content": "x", "reply_to_msg_id": recalled}),
            409,
            "was recalled",
        ),
        (
            "bob",
            json!({"content": "x", "reply_to_msg_id": line}),
            409,
            "not a message",
        ),
        (
            "carol",
            json!({"content": "x", "reply_to_msg_id": first}),
            422,
            "that you can see",
        ),
        (
            "bob",
            json!({"kind": "recall", "target_msg_id": first, "reply_to_msg_id": first}),
            400,
            "reply_to_msg_id: not accepted when kind is recall",
        ),
    ];
    for (user, body, status, message) in cases {
        let r = app.send_entry(user, group, body.clone()).await;
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
        let text = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{body}: {text}");
    }
    assert_eq!(last_msg_id(&app, group).await, line, "nothing stored");

    // msg_ids are per group, so "another group's message" is an id that group has and this
    // one does not: message 3 is real in `busy`, and a reply to it in `quiet` is refused with
    // the error any id `quiet` lacks gets. Ids are contiguous in each group, so such an id is
    // always beyond `quiet`'s last one; the case shows that being real elsewhere changes
    // nothing.
    let busy = app.group_with("alice", &["bob"]).await;
    for n in 1..=5 {
        app.send_ok("alice", busy, &format!("busy {n}")).await;
    }
    let quiet = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", quiet, "quiet").await;
    let foreign = app
        .send_entry("bob", quiet, json!({"content": "x", "reply_to_msg_id": 3}))
        .await;
    assert_eq!(
        (foreign.status, foreign.error_code()),
        (422, "no_such_entry"),
        "{:?}",
        foreign.body
    );
    assert_eq!(
        foreign.body["error"]["message"],
        format!("reply_to_msg_id: 3 is not an earlier entry of group {quiet} that you can see")
    );
    assert_eq!(last_msg_id(&app, quiet).await, 1, "nothing stored");
    assert_eq!(last_msg_id(&app, busy).await, 5);
}

async fn ext_is_stored_and_returned_exactly_as_written(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    // Key order and spacing as a client wrote them; a JSON object re-encoded by the server
    // would sort the keys or drop the spaces.
    let ext = r#"{"z_last": [1, 2.50, "é"], "a_first": {"nested": null}}"#;
    let body = format!(r#"{{"client_msg_id": "ext-1", "content": "photo", "ext": {ext}}}"#);
    let response = app
        .client
        .post(format!("{}/v1/groups/{group}/messages", app.address))
        .bearer_auth(app.token("alice"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let text = response.text().await.unwrap();
    assert!(text.contains(&format!(r#""ext":{ext}"#)), "{text}");

    let pull = app.list_messages("bob", group, "").await;
    assert!(
        pull.text.contains(&format!(r#""ext":{ext}"#)),
        "{}",
        pull.text
    );
    assert_eq!(
        pull.body["messages"][0]["ext"]["a_first"],
        json!({"nested": null})
    );
}

async fn bad_ext_is_refused(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let big = json!({"blob": "x".repeat(4100)});
    let cases = [
        (
            json!({"content": "x", "ext": [1, 2]}),
            "ext: must be a JSON object",
        ),
        (
            json!({"content": "x", "ext": "text"}),
            "ext: must be a JSON object",
        ),
        (
            json!({"content": "x", "ext": 5}),
            "ext: must be a JSON object",
        ),
        (
            json!({"content": "x", "ext": big}),
            "ext: must be at most 4096 bytes",
        ),
    ];
    for (body, message) in cases {
        let r = app.send_entry("alice", group, body.clone()).await;
        assert_eq!(r.status, 400, "{:?}", r.body);
        let text = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{text}");
    }
    let null = app
        .send_entry("alice", group, json!({"content": "x", "ext": null}))
        .await;
    assert_eq!(null.status, 201, "null is no ext");
    assert!(null.body.get("ext").is_none());
    assert_eq!(
        last_msg_id(&app, group).await,
        1,
        "only the last one stored"
    );
}
