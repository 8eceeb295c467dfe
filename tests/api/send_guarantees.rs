//! What every send keeps, whatever it carries. Plain messages (text, perhaps `ext`) and rich
//! ones (mentions, replies) go the same way but differ in what they write beside the message;
//! these scenarios mix the kinds in one group, race them, repeat them across kinds and refuse
//! them, and check that ids stay contiguous, each message is stored once, and the answers are
//! the same.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::endpoints::msg_ids;
use crate::helpers::{TestApp, TestResponse};
use crate::on_both_engines;
use crate::support::engine::Engine;

on_both_engines!(
    plain_and_rich_sends_racing_in_one_group_keep_ids_contiguous,
    a_repeat_answers_with_the_original_whichever_kind_came_first,
    refused_plain_sends_store_nothing_and_take_no_id,
    a_member_removed_while_sending_has_nothing_stored_after_the_removal,
    plain_sends_move_the_senders_cursors_and_the_chat_list,
);

/// The k-th distinct message of a racing sender, alternately plain and not.
fn body_of(sender: &str, k: usize) -> Value {
    let key = format!("{sender}-{k}");
    match k % 4 {
        0 => json!({"client_msg_id": key, "content": format!("plain {key}")}),
        1 => json!({"client_msg_id": key, "content": format!("ext {key}"), "ext": {"k": k}}),
        2 => {
            json!({"client_msg_id": key, "content": format!("@carol {key}"), "mentions": ["carol"]})
        }
        _ => json!({"client_msg_id": key, "content": format!("re {key}"), "reply_to_msg_id": 1}),
    }
}

fn stored_entries(page: &TestResponse) -> Vec<Value> {
    page.body["messages"].as_array().expect("messages").clone()
}

async fn plain_and_rich_sends_racing_in_one_group_keep_ids_contiguous(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    app.send_ok("alice", group, "the message replies quote")
        .await;
    // Behind a load balancer: on PostgreSQL half the requests go to another instance.
    let other = match app.engine {
        Engine::Postgres => Some(app.second_instance().await),
        Engine::Sqlite => None,
    };
    let far = other.as_ref().map(|o| app.via(o));
    let distinct = 24;
    let mut requests = Vec::new();
    for sender in ["alice", "bob"] {
        for k in 0..distinct {
            // Every message is sent twice at once, on different instances where there are two.
            requests.push((sender, k, &app));
            requests.push((sender, k, far.as_ref().unwrap_or(&app)));
        }
    }
    let answers = join_all(requests.iter().map(|(sender, k, via)| async move {
        (
            *sender,
            *k,
            via.send_entry(sender, group, body_of(sender, *k)).await,
        )
    }))
    .await;

    let mut ids: HashMap<(&str, usize), Vec<i64>> = HashMap::new();
    let mut created = 0;
    for (sender, k, answer) in &answers {
        assert!(
            [200, 201].contains(&answer.status),
            "{sender} {k}: {} {:?}",
            answer.status,
            answer.body
        );
        created += usize::from(answer.status == 201);
        let id = answer.body["msg_id"].as_i64().expect("msg_id");
        ids.entry((sender, *k)).or_default().push(id);
    }
    assert_eq!(
        created,
        2 * distinct,
        "one attempt of each message created it"
    );
    for ((sender, k), both) in &ids {
        assert_eq!(
            both[0], both[1],
            "both attempts of {sender} {k} name one message"
        );
    }

    let page = app
        .list_messages("carol", group, "?after_msg_id=0&limit=200")
        .await;
    let stored = stored_entries(&page);
    assert_eq!(
        msg_ids(&page.body),
        (1..=(2 * distinct) as i64 + 1).collect::<Vec<_>>(),
        "contiguous ids, each message once"
    );
    for ((sender, k), both) in &ids {
        let entry = &stored[(both[0] - 1) as usize];
        let sent = body_of(sender, *k);
        assert_eq!(entry["sender_id"], *sender);
        assert_eq!(entry["content"], sent["content"], "{entry}");
        assert_eq!(entry["client_msg_id"], sent["client_msg_id"]);
        if let Some(ext) = sent.get("ext") {
            assert_eq!(&entry["ext"], ext, "{entry}");
        }
    }
    let stamps: Vec<chrono::DateTime<chrono::Utc>> = stored
        .iter()
        .map(|m| {
            let at = m["created_at"].as_str().unwrap_or("");
            chrono::DateTime::parse_from_rfc3339(at)
                .unwrap_or_else(|e| panic!("created_at {at:?}: {e}"))
                .to_utc()
        })
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "a group's entries are stamped in id order: {stamps:?}"
    );
}

async fn a_repeat_answers_with_the_original_whichever_kind_came_first(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let plain = json!({"client_msg_id": "k-plain", "content": "first", "ext": {"v": 1}});
    let first = app.send_entry("alice", group, plain.clone()).await;
    assert_eq!(first.status, 201, "{:?}", first.body);

    // The same key again: as sent, with other text, and as a message that mentions someone.
    let repeats = [
        plain,
        json!({"client_msg_id": "k-plain", "content": "second"}),
        json!({"client_msg_id": "k-plain", "content": "@bob", "mentions": ["bob"]}),
    ];
    for repeat in repeats {
        let again = app.send_entry("alice", group, repeat).await;
        assert_eq!(
            again.status, 200,
            "a repeat is answered 200: {:?}",
            again.body
        );
        assert_eq!(
            again.body, first.body,
            "the original entry, exactly as stored"
        );
    }

    // A message that mentions someone first, then a plain send under its key.
    let rich = json!({"client_msg_id": "k-rich", "content": "@bob hi", "mentions": ["bob"]});
    let first_rich = app.send_entry("alice", group, rich).await;
    assert_eq!(first_rich.status, 201, "{:?}", first_rich.body);
    let plain_repeat = json!({"client_msg_id": "k-rich", "content": "plain now"});
    let again = app.send_entry("alice", group, plain_repeat).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body, first_rich.body);

    // The same key from another member is another message.
    let bobs = json!({"client_msg_id": "k-plain", "content": "bob's own"});
    let bobs = app.send_entry("bob", group, bobs).await;
    assert_eq!(bobs.status, 201, "{:?}", bobs.body);
    assert_eq!(bobs.body["msg_id"], 3, "repeats took no id");
    let next = app.send_ok("alice", group, "after the repeats").await;
    assert_eq!(next, 4);
}

async fn refused_plain_sends_store_nothing_and_take_no_id(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;

    let outsider = app.send("mallory", group, "m-1", "let me in").await;
    assert_eq!(outsider.status, 403, "{:?}", outsider.body);
    assert_eq!(outsider.error_code(), "forbidden");
    let missing = app.send("alice", 999_999, "a-1", "nowhere").await;
    assert_eq!(missing.status, 404, "{:?}", missing.body);
    assert_eq!(missing.error_code(), "not_found");
    let too_long = "x".repeat(chorus::domain::MAX_CONTENT_BYTES + 1);
    let refused = app.send("alice", group, "a-2", &too_long).await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert_eq!(refused.error_code(), "validation_failed");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("content"),
        "names the field: {:?}",
        refused.body
    );

    assert!(!app.stored_text_contains("let me in").await);
    assert_eq!(app.send_ok("bob", group, "two").await, 2, "no id was taken");
    // Mallory's key is free for a real message once she is a member.
    app.add_members("alice", group, &["mallory"]).await;
    let joined = app.send("mallory", group, "m-1", "hello").await;
    assert_eq!(joined.status, 201, "{:?}", joined.body);
    assert_eq!(joined.body["content"], "hello");
}

async fn a_member_removed_while_sending_has_nothing_stored_after_the_removal(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let sends = 40;
    // The removal starts once some of bob's sends were stored, while the rest still arrive.
    let stored_so_far = std::sync::atomic::AtomicUsize::new(0);
    let (answers, removed) = tokio::join!(
        join_all((0..sends).map(|k| {
            let (app, stored_so_far) = (&app, &stored_so_far);
            async move {
                tokio::time::sleep(Duration::from_millis(5 * k)).await;
                let answer = app
                    .send("bob", group, &format!("b-{k}"), &format!("bob {k}"))
                    .await;
                if answer.status == 201 {
                    stored_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                answer
            }
        })),
        async {
            while stored_so_far.load(std::sync::atomic::Ordering::SeqCst) < 5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            app.remove_member("alice", group, "bob").await
        }
    );
    assert!(removed.status < 300, "{:?}", removed.body);
    for answer in &answers {
        assert!(
            [201, 403].contains(&answer.status),
            "{}: {:?}",
            answer.status,
            answer.body
        );
    }

    let page = app
        .list_messages("carol", group, "?after_msg_id=0&limit=200")
        .await;
    let stored = stored_entries(&page);
    let removal = stored
        .iter()
        .find(|m| m["kind"] == "member_removed")
        .and_then(|m| m["msg_id"].as_i64())
        .expect("the removal's line");
    let accepted: Vec<i64> = answers
        .iter()
        .filter(|a| a.status == 201)
        .filter_map(|a| a.body["msg_id"].as_i64())
        .collect();
    assert!(
        accepted.iter().all(|id| *id < removal),
        "every message stored for bob precedes his removal ({removal}): {accepted:?}"
    );
    let from_bob = stored.iter().filter(|m| m["sender_id"] == "bob").count();
    assert_eq!(
        from_bob,
        accepted.len(),
        "only what was answered 201 is stored"
    );
    let ids = msg_ids(&page.body);
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "contiguous"
    );
    let after = app.send("bob", group, "b-late", "still here?").await;
    assert_eq!(after.status, 403, "{:?}", after.body);
}

async fn plain_sends_move_the_senders_cursors_and_the_chat_list(app: TestApp) {
    let quiet = app.group_with("alice", &["bob"]).await;
    let busy = app.group_with("alice", &["bob"]).await;
    app.send_ok("bob", busy, "first").await;
    app.send_ok("bob", quiet, "later news, elsewhere").await;
    // Alice's phone has read nothing of `busy`; her own messages still never count as unread.
    let own = app.send("alice#phone", busy, "p-1", "from my phone").await;
    assert_eq!(own.status, 201, "{:?}", own.body);
    let listed = app.my_groups("alice#phone", "?order=recent").await;
    let groups = listed.body["groups"].as_array().expect("groups");
    assert_eq!(
        groups[0]["group_id"], busy,
        "the group just written to comes first"
    );
    assert_eq!(
        groups[0]["unread_count"], 1,
        "bob's message, not her own: {groups:?}"
    );

    // Once the phone has caught up (through her own message), her next message is read and
    // received on it as well: the phone pulls nothing new, bob gets both.
    let caught_up = json!({"last_ack_msg_id": 2, "last_read_msg_id": 2});
    let ack = app.ack("alice#phone", busy, caught_up).await;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    let again = app.send("alice#phone", busy, "p-2", "again").await;
    assert_eq!(again.body["msg_id"], 3, "{:?}", again.body);
    let listed = app.my_groups("alice#phone", "?order=recent").await;
    assert_eq!(
        listed.body["groups"][0]["unread_count"], 0,
        "{:?}",
        listed.body
    );
    assert_eq!(
        listed.body["groups"][0]["last_read_msg_id"], 3,
        "{:?}",
        listed.body
    );
    assert_eq!(
        listed.body["groups"][0]["last_ack_msg_id"], 3,
        "{:?}",
        listed.body
    );
    let pull = app.list_messages("alice#phone", busy, "").await;
    assert_eq!(stored_entries(&pull), Vec::<Value>::new());
    let bobs = app.list_messages("bob", busy, "?after_msg_id=1").await;
    assert_eq!(stored_entries(&bobs).len(), 2);
}
