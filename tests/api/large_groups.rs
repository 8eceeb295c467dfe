//! Groups of many members: the member cap, growing a group by batches, and receipt counts
//! that come from range counts on the cursor indexes, checked against a model of every
//! member's cursors.

use std::collections::BTreeMap;

use chorus::config::Settings;
use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;
use crate::support::engine::Engine;

on_both_engines!(
    receipt_counts_agree_with_a_model_of_every_members_cursors,
    receipt_counts_stay_exact_when_members_read_join_and_leave_at_once,
    a_group_grows_by_batches_of_a_thousand,
);
on_both_engines!(with cap_of_five:
    the_cap_refuses_a_change_that_would_pass_it,
    racing_additions_never_pass_the_cap,
);

fn cap_of_five(settings: &mut Settings) {
    settings.max_group_members = 5;
}

/// One member's cursors as the server should have them.
#[derive(Debug, Clone, Copy)]
struct Cursors {
    joined_after: i64,
    delivered: i64,
    read: i64,
}

/// What the test did, replayed by the receipt rule: the audience of a message is every
/// member who joined before it except its sender; they have read it when their read cursor
/// reached it, and have it delivered when their delivered cursor did.
#[derive(Default)]
struct Model {
    members: BTreeMap<String, Cursors>,
    /// (msg_id, sender) of every message sent.
    messages: Vec<(i64, String)>,
    last_msg_id: i64,
}

impl Model {
    fn join(&mut self, user: &str) {
        let at = self.last_msg_id;
        let cursors = Cursors {
            joined_after: at,
            delivered: at,
            read: at,
        };
        self.members.insert(user.to_owned(), cursors);
    }

    /// A system line (joined, removed) takes an id too.
    fn line(&mut self) {
        self.last_msg_id += 1;
    }

    /// A sender who had read everything before their own message has read it too.
    fn sent(&mut self, msg_id: i64, sender: &str) {
        assert_eq!(msg_id, self.last_msg_id + 1, "ids are contiguous");
        self.last_msg_id = msg_id;
        self.messages.push((msg_id, sender.to_owned()));
        let c = self
            .members
            .get_mut(sender)
            .expect("the sender is a member");
        if c.read == msg_id - 1 {
            c.read = msg_id;
        }
        if c.delivered == msg_id - 1 {
            c.delivered = msg_id;
        }
    }

    fn acked(&mut self, user: &str, delivered: i64, read: i64) {
        let c = self.members.get_mut(user).expect("a member");
        c.delivered = c.delivered.max(delivered);
        c.read = c.read.max(read);
    }

    /// (read, unread, delivered) user ids of one message, each in user id order.
    fn receipts(&self, msg_id: i64, sender: &str) -> (Vec<String>, Vec<String>, usize) {
        let audience = (self.members.iter())
            .filter(|(user, c)| c.joined_after < msg_id && user.as_str() != sender);
        let (mut read, mut unread, mut delivered) = (Vec::new(), Vec::new(), 0);
        for (user, c) in audience {
            if c.read >= msg_id {
                read.push(user.clone());
            } else {
                unread.push(user.clone());
            }
            delivered += usize::from(c.delivered >= msg_id);
        }
        (read, unread, delivered)
    }
}

fn ids(value: &Value) -> Vec<String> {
    (value.as_array().expect("an array of ids").iter())
        .map(|v| v.as_str().expect("an id").to_owned())
        .collect()
}

fn counts(body: &Value) -> (i64, i64, i64) {
    let n = |field: &str| body[field].as_i64().unwrap_or(-1);
    (n("read_count"), n("unread_count"), n("delivered_count"))
}

async fn send(app: &TestApp, model: &mut Model, group: i64, sender: &str) {
    let msg = app.send_ok(sender, group, "hello").await;
    model.sent(msg, sender);
}

async fn ack(app: &TestApp, model: &mut Model, group: i64, user: &str, delivered: i64, read: i64) {
    let body = json!({"last_ack_msg_id": delivered, "last_read_msg_id": read});
    let r = app.ack(user, group, body).await;
    assert_eq!(
        r.status, 200,
        "{user} acks {delivered}/{read}: {:?}",
        r.body
    );
    model.acked(user, delivered, read);
}

/// For every message of the model, its counts and its paged lists of who has and has not
/// read it, as its sender would page through them, are what the members' cursors say.
async fn assert_receipts_match(app: &TestApp, model: &Model, group: i64) {
    for (msg_id, sender) in &model.messages {
        let msg_id = *msg_id;
        let (read, unread, delivered) = model.receipts(msg_id, sender);
        let asked_by = "alice";
        let mut seen_read = Vec::new();
        let mut seen_unread = Vec::new();
        let mut query = "?limit=3".to_owned();
        loop {
            let page = app.message_receipts(asked_by, group, msg_id, &query).await;
            assert_eq!(page.status, 200, "message {msg_id}: {:?}", page.body);
            assert_eq!(
                counts(&page.body),
                (read.len() as i64, unread.len() as i64, delivered as i64),
                "counts of message {msg_id} by {sender}"
            );
            seen_read.extend(ids(&page.body["read_user_ids"]));
            seen_unread.extend(ids(&page.body["unread_user_ids"]));
            match page.body["next_cursor"].as_str() {
                Some(c) => query = format!("?limit=3&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(seen_read, read, "who read message {msg_id}");
        assert_eq!(seen_unread, unread, "who has not read message {msg_id}");
    }
}

/// `with_receipts` on a page of all messages gives each of `sender`'s own messages the
/// counts the members' cursors say, and no other message any.
async fn assert_with_receipts_match(app: &TestApp, model: &Model, group: i64, sender: &str) {
    let page = app
        .list_messages(
            sender,
            group,
            "?after_msg_id=0&with_receipts=true&limit=200",
        )
        .await;
    assert_eq!(page.status, 200);
    let messages = page.body["messages"].as_array().expect("messages");
    let mut own = 0;
    for m in messages {
        let msg_id = m["msg_id"].as_i64().expect("msg_id");
        if m["sender_id"] == sender && m["kind"] == "message" {
            own += 1;
            let (read, unread, delivered) = model.receipts(msg_id, sender);
            let expected = json!({
                "read_count": read.len(),
                "unread_count": unread.len(),
                "delivered_count": delivered,
            });
            assert_eq!(m["receipt"], expected, "with_receipts, message {msg_id}");
        } else {
            assert!(m.get("receipt").is_none(), "no receipt on {msg_id}");
        }
    }
    assert!(own > 0, "{sender} sees their own messages");
}

/// Members join at different times, read and receive different amounts, one sender has not
/// read what came before their own message, one member leaves: for every message, the counts
/// and the paged lists are what the members' cursors say, and `with_receipts` on a page of
/// messages agrees with them. Some messages are read by most of the group and some by few,
/// and for some most members joined after them.
async fn receipt_counts_agree_with_a_model_of_every_members_cursors(app: TestApp) {
    let first: Vec<String> = (0..11).map(|i| format!("m{i:02}")).collect();
    let first_refs: Vec<&str> = first.iter().map(String::as_str).collect();
    let group = app.group_with("alice", &first_refs).await;
    let mut model = Model::default();
    model.join("alice");
    for m in &first {
        model.join(m);
    }
    for _ in 0..4 {
        send(&app, &mut model, group, "alice").await;
    }
    // Most of the group reads the first messages; m00 has them delivered only.
    for (i, m) in first.iter().enumerate().skip(1).take(8) {
        ack(&app, &mut model, group, m, 4, 1 + (i as i64 % 4)).await;
    }
    ack(&app, &mut model, group, "m00", 3, 0).await;
    // m09 sends without having read anything: his own message stays above his read cursor.
    send(&app, &mut model, group, "m09").await;
    // m01 had read everything before hers, so her own message counts as read by her.
    ack(&app, &mut model, group, "m01", 5, 5).await;
    send(&app, &mut model, group, "m01").await;
    // More than half the group joins late, so for the earlier messages most members joined
    // after them.
    let late: Vec<String> = (0..15).map(|i| format!("n{i:02}")).collect();
    let late_refs: Vec<&str> = late.iter().map(String::as_str).collect();
    assert_eq!(
        app.add_members("alice", group, &late_refs).await.status,
        200
    );
    model.line();
    for m in &late {
        model.join(m);
    }
    for _ in 0..4 {
        send(&app, &mut model, group, "alice").await;
    }
    let last = model.last_msg_id;
    ack(&app, &mut model, group, "n00", last, last).await;
    ack(&app, &mut model, group, "m02", last, last - 2).await;
    ack(&app, &mut model, group, "m03", last - 1, 6).await;
    assert_eq!(app.remove_member("alice", group, "m04").await.status, 204);
    model.members.remove("m04");
    model.line();
    send(&app, &mut model, group, "alice").await;

    assert_receipts_match(&app, &model, group).await;

    for sender in ["alice", "m09", "m01"] {
        assert_with_receipts_match(&app, &model, group, sender).await;
    }
    assert_eq!(app.histogram_disagreements().await, 0);
}

/// Thirty members read and receive at once, each racing two acks of their own (one through
/// `POST /v1/acks`), while members join and others are removed, some of them acking as they
/// go: many cursors pass through the same message ids at the same moment. Afterwards every
/// message's counts and lists are what the members' cursors say, whatever order the writes
/// committed in.
async fn receipt_counts_stay_exact_when_members_read_join_and_leave_at_once(app: TestApp) {
    let members: Vec<String> = (0..30).map(|i| format!("m{i:02}")).collect();
    let member_refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let group = app.group_with("alice", &member_refs).await;
    let mut model = Model::default();
    model.join("alice");
    for m in &members {
        model.join(m);
    }
    for _ in 0..6 {
        send(&app, &mut model, group, "alice").await;
    }
    // Each staying member's two acks, (delivered, read): most pass through 3 and end at 6.
    let acks_of = |i: usize| {
        let i = i as i64;
        [
            (3.max(i % 7), 3.min(i % 5)),
            (6 - i % 3, (6 - i % 4).min(6 - i % 3)),
        ]
    };
    let leaving = &members[25..];
    let joining: Vec<String> = (0..5).map(|i| format!("n{i:02}")).collect();

    let acks = members[..25].iter().enumerate().flat_map(|(i, m)| {
        let app = &app;
        acks_of(i)
            .into_iter()
            .enumerate()
            .map(move |(k, (delivered, read))| async move {
                let r = if k == 0 {
                    let body = json!({"last_ack_msg_id": delivered, "last_read_msg_id": read});
                    app.ack(m, group, body).await
                } else {
                    let entry = json!({"group_id": group, "last_ack_msg_id": delivered,
                    "last_read_msg_id": read});
                    app.ack_many(m, json!({ "acks": [entry] })).await
                };
                assert_eq!(r.status, 200, "{m} acks {delivered}/{read}: {:?}", r.body);
            })
    });
    let removals = leaving.iter().map(|m| {
        let app = &app;
        async move {
            let body = json!({"last_ack_msg_id": 6, "last_read_msg_id": 6});
            let acked = app.ack(m, group, body).await.status;
            assert!(acked == 200 || acked == 403, "{m}'s ack: {acked}");
            assert_eq!(app.remove_member("alice", group, m).await.status, 204);
        }
    });
    let joins = joining.iter().map(|n| {
        let app = &app;
        async move {
            assert_eq!(app.add_members("alice", group, &[n]).await.status, 200);
        }
    });
    let racing: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> = acks
        .map(|f| Box::pin(f) as _)
        .chain(removals.map(|f| Box::pin(f) as _))
        .chain(joins.map(|f| Box::pin(f) as _))
        .collect();
    futures::future::join_all(racing).await;

    for (i, m) in members[..25].iter().enumerate() {
        for (delivered, read) in acks_of(i) {
            model.acked(m, delivered, read);
        }
    }
    for m in leaving {
        model.members.remove(m);
    }
    for n in &joining {
        // They joined after every message: none is theirs to read.
        model.join(n);
    }
    assert_receipts_match(&app, &model, group).await;
    assert_with_receipts_match(&app, &model, group, "alice").await;
    assert_eq!(
        app.histogram_disagreements().await,
        0,
        "the histogram is the members' cursors, below the messages asked of too"
    );
    if app.engine == Engine::Postgres {
        // The moves are folded into the histogram in the background: the counts are the same
        // before (above, most likely) and after.
        app.until_cursor_moves_folded().await;
        assert_receipts_match(&app, &model, group).await;
        assert_with_receipts_match(&app, &model, group, "alice").await;
        assert_eq!(app.histogram_disagreements().await, 0, "after the fold");
    }
}

/// A group of 5,001 members, built the way a client must: 1,000 ids at creation, then four
/// more requests of 1,000. Its size, its member list and a message's receipts all count every
/// member; a request of 1,001 ids is refused and adds no one.
async fn a_group_grows_by_batches_of_a_thousand(app: TestApp) {
    let user = |i: usize| format!("u{i:05}");
    let batch = |from: usize| (from..from + 1000).map(user).collect::<Vec<_>>();
    let first = batch(0);
    let refs: Vec<&str> = first.iter().map(String::as_str).collect();
    let group = app.group_with("alice", &refs).await;
    for b in 1..5 {
        let ids = batch(b * 1000);
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let added = app.add_members("alice", group, &refs).await;
        assert_eq!(added.status, 200, "{:?}", added.body);
        assert_eq!(added.body["added"].as_array().map(Vec::len), Some(1000));
    }
    let too_many = batch(5000);
    let mut refs: Vec<&str> = too_many.iter().map(String::as_str).collect();
    refs.push("one-more");
    let refused = app.add_members("alice", group, &refs).await;

    assert_eq!(refused.status, 400);
    assert!(refused.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("user_ids") && m.contains("1000")));
    assert_eq!(
        app.get_group("alice", group).await.body["member_count"],
        5001
    );
    let msg = app.send_ok("alice", group, "to all 5,000").await;
    app.ack(&user(42), group, json!({"last_ack_msg_id": msg}))
        .await;
    let receipts = app
        .message_receipts("alice", group, msg, "?limit=200")
        .await;
    assert_eq!(counts(&receipts.body), (1, 4999, 1));
    let mut listed = 0;
    let mut query = "?limit=200".to_owned();
    loop {
        let page = app.list_members("alice", group, &query).await;
        listed += page.body["members"].as_array().map_or(0, Vec::len);
        match page.body["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=200&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(listed, 5001, "the member list holds every member once");
}

fn member_count(body: &Value) -> i64 {
    body["member_count"].as_i64().unwrap_or(-1)
}

/// With the cap at five: a group of five is created, a sixth member is refused with 409
/// naming the cap, members already in the group do not count twice, and a member who leaves
/// makes room. A refused change adds no one.
async fn the_cap_refuses_a_change_that_would_pass_it(app: TestApp) {
    let over = app
        .create_group("alice", "six", &["b", "c", "d", "e", "f"])
        .await;
    let full = app.group_with("alice", &["b", "c", "d", "e"]).await;
    let sixth = app.add_members("alice", full, &["f"]).await;
    let again = app.add_members("alice", full, &["b", "c"]).await;
    let small = app.group_with("alice", &["b", "c"]).await;
    let fits = app.add_members("alice", small, &["b", "d", "e"]).await;
    let members_after_refusal = app.list_members("alice", full, "").await;
    app.remove_member("alice", full, "e").await;
    let after_leaving = app.add_members("alice", full, &["f"]).await;

    assert_eq!(over.status, 409, "{:?}", over.body);
    assert_eq!(over.error_code(), "conflict");
    let message = over.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 5"), "{message}");
    assert!(message.contains("would add 6"), "{message}");
    let groups = app.my_groups("alice", "").await;
    assert_eq!(
        groups.body["groups"].as_array().map(Vec::len),
        Some(2),
        "the refused group was not created"
    );
    assert_eq!(sixth.status, 409);
    assert!(sixth.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("it has 5")));
    assert_eq!(
        members_after_refusal.body["members"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
    assert_eq!(again.status, 200, "members already in count once");
    assert_eq!(again.body["added"], json!([]));
    assert_eq!(fits.status, 200);
    assert_eq!(fits.body["added"], json!(["d", "e"]));
    assert_eq!(after_leaving.status, 200);
    assert_eq!(member_count(&app.get_group("alice", full).await.body), 5);
    assert_eq!(member_count(&app.get_group("alice", small).await.body), 5);
}

/// Four owners' requests race to add two members each to a group of one under a cap of
/// five: exactly two succeed, and the group ends with exactly five members.
async fn racing_additions_never_pass_the_cap(app: TestApp) {
    let group = app.group_with("alice", &[]).await;
    let pairs = [["a1", "a2"], ["b1", "b2"], ["c1", "c2"], ["d1", "d2"]];
    let answers =
        futures::future::join_all(pairs.iter().map(|p| app.add_members("alice", group, p))).await;

    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        2,
        "{statuses:?}"
    );
    let listed = app.list_members("alice", group, "").await;
    assert_eq!(listed.body["members"].as_array().map(Vec::len), Some(5));
    assert_eq!(member_count(&app.get_group("alice", group).await.body), 5);
}
