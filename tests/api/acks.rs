//! Acks: forward-only cursors, read implies delivered, bounds, batches all-or-nothing.

use serde_json::{json, Value};

use crate::helpers::{spawn_app, TestApp};
use crate::support::engine::Engine;
use crate::{on_both_engines, on_postgres};

on_both_engines!(
    ack_never_moves_cursor_backwards,
    ack_defaults_read_to_ack_and_read_implies_delivered,
    ack_beyond_last_message_is_rejected_and_changes_nothing,
    ack_many_acks_several_groups_in_one_request,
    ack_many_is_all_or_nothing,
    non_member_cannot_ack,
    a_login_sync_leaves_every_group_as_acking_them_one_by_one_would,
    a_login_sync_of_the_most_groups_allowed_acks_them_all,
    a_users_devices_acking_the_same_groups_in_opposite_orders_at_once_all_succeed,
    an_acks_answer_counts_what_is_left_as_the_chat_list_does,
);

on_postgres!(
    on_postgres_an_ack_writes_its_effects_in_one_transaction_at_most_one_statement_per_table,
    on_postgres_an_ack_the_database_fails_answers_an_error_moves_nothing_and_lands_on_retry,
    on_postgres_an_ack_that_waits_for_a_recall_of_the_members_own_message_counts_it_once,
    on_postgres_a_send_that_waits_for_the_senders_ack_never_moves_their_cursor_back,
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
    let g2 = app.group_with("alice", &["bob"]).await;
    let beyond_in_another_group = app
        .ack_many(
            "bob",
            json!({"acks": [
                {"group_id": g1, "last_ack_msg_id": 1},
                {"group_id": g2, "last_ack_msg_id": 1}
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
    assert_eq!(beyond_in_another_group.status, 422);
    assert!(beyond_in_another_group.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("acks[1]")));
    assert_eq!(empty.status, 400);
    let mine = app.my_groups("bob", "").await;
    let row = |group_id: i64| {
        let groups = mine.body["groups"].as_array().expect("groups");
        groups
            .iter()
            .find(|g| g["group_id"] == group_id)
            .cloned()
            .expect("bob's group")
    };
    assert_eq!(
        row(g1)["last_ack_msg_id"],
        0,
        "the first ack rolled back with the batch"
    );
    assert_eq!(row(g2)["last_ack_msg_id"], 0);
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
    let erins = five_groups_for(&app, "erin").await;

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

    // Erin's phone sends the same acks in two requests, each naming a group once.
    let mut erins_acks = login_sync(&erins);
    let second = erins_acks.split_off(5);
    let first = app
        .ack_many("erin#erin-phone", json!({ "acks": erins_acks }))
        .await;
    let then = app
        .ack_many("erin#erin-phone", json!({ "acks": second }))
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(then.status, 200, "{:?}", then.body);
    let mut in_two = first.body["results"].as_array().expect("results").clone();
    in_two.extend(then.body["results"].as_array().expect("results").clone());

    let results = batch.body["results"].as_array().expect("results").clone();
    assert_eq!(results.len(), 6, "one answer per ack, in request order");
    for (i, (b, e)) in results.iter().zip(&in_two).enumerate() {
        assert_eq!(
            without_group_id(b.clone()),
            without_group_id(e.clone()),
            "acks[{i}]: the batches without a repeat answer as the batch with one"
        );
    }
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
        let erin = app.my_groups(&caller("erin"), "").await;
        let rows = |r: &crate::helpers::TestResponse| -> Vec<Value> {
            let groups = r.body["groups"].as_array().expect("groups").clone();
            groups.into_iter().map(without_group_id).collect()
        };
        assert_eq!(rows(&bob), rows(&dave), "bob{device} and dave{device}");
        assert_eq!(rows(&bob), rows(&erin), "bob{device} and erin{device}");
    }
    for ((&b, &d), &e) in bobs.iter().zip(&daves).zip(&erins) {
        for msg_id in 1..=2 {
            let of_bob = app.message_receipts("alice", b, msg_id, "").await;
            for other in [d, e] {
                let of_other = app.message_receipts("alice", other, msg_id, "").await;
                assert_eq!(of_bob.body["read_count"], of_other.body["read_count"]);
                assert_eq!(
                    of_bob.body["delivered_count"],
                    of_other.body["delivered_count"]
                );
            }
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

async fn a_users_devices_acking_the_same_groups_in_opposite_orders_at_once_all_succeed(
    app: TestApp,
) {
    // Two writers locking the same rows in opposite orders would deadlock; every write that
    // touches several groups locks them in group order instead.
    let mut groups = Vec::new();
    for _ in 0..4 {
        groups.push(app.group_with("alice", &["bob"]).await);
    }
    let rounds = 8;
    for &g in &groups {
        for k in 0..rounds {
            app.send_ok("alice", g, &format!("m{k}")).await;
        }
    }
    let acks_to = |msg_id: i64, order: &[i64]| {
        let acks: Vec<Value> = order
            .iter()
            .map(|g| json!({"group_id": g, "last_ack_msg_id": msg_id}))
            .collect();
        json!({ "acks": acks })
    };
    let reversed: Vec<i64> = groups.iter().rev().copied().collect();
    for msg_id in 1..=rounds {
        let (phone, laptop, single) = tokio::join!(
            app.ack_many("bob#bob-phone", acks_to(msg_id, &groups)),
            app.ack_many("bob#bob-laptop", acks_to(msg_id, &reversed)),
            app.ack("bob", groups[2], json!({"last_ack_msg_id": msg_id})),
        );
        for (who, r) in [("phone", &phone), ("laptop", &laptop), ("default", &single)] {
            assert_eq!(r.status, 200, "round {msg_id}, {who}: {:?}", r.body);
        }
        for result in phone.body["results"].as_array().expect("results") {
            assert_eq!(result["last_ack_msg_id"], msg_id, "the phone's own cursor");
            assert_eq!(result["last_read_msg_id"], msg_id, "never behind this ack");
        }
    }
    let mine = app.my_groups("bob#bob-laptop", "").await;
    let rows = mine.body["groups"].as_array().expect("groups");
    assert_eq!(rows.len(), groups.len());
    for row in rows {
        assert_eq!(row["last_read_msg_id"], rounds);
        assert_eq!(row["last_ack_msg_id"], rounds);
        assert_eq!(row["unread_count"], 0);
    }
    for &g in &groups {
        let receipts = app.message_receipts("alice", g, rounds, "").await;
        assert_eq!(receipts.body["read_count"], 1);
    }
    if app.engine == Engine::Postgres {
        // A deadlock would not show in the answers (a shared transaction that lost it
        // stores each of its acks again alone), only in the database's statistics, which each connection
        // reports within about ten seconds of going idle (PostgreSQL 15).
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        let deadlocks = app
            .postgres_values(
                "SELECT deadlocks::text AS value FROM pg_stat_database \
                 WHERE datname = current_database()",
            )
            .await;
        assert_eq!(deadlocks, vec!["0"]);
    }
}

/// A trigger of the test's own notes every row written to the tables an ack writes: the
/// table, the transaction, and the statement the client sent that wrote it.
const NOTE_WRITES: &str = "CREATE TABLE ack_writes (tbl text, tx bigint, stmt text); \
     CREATE FUNCTION note_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
       INSERT INTO ack_writes VALUES (TG_TABLE_NAME, txid_current(), md5(current_query())); \
       RETURN NULL; END $$; \
     CREATE TRIGGER note_write AFTER UPDATE ON group_members \
       FOR EACH ROW EXECUTE FUNCTION note_write(); \
     CREATE TRIGGER note_write AFTER INSERT OR UPDATE ON device_cursors \
       FOR EACH ROW EXECUTE FUNCTION note_write(); \
     CREATE TRIGGER note_write AFTER INSERT ON receipt_events \
       FOR EACH ROW EXECUTE FUNCTION note_write(); \
     CREATE TRIGGER note_write AFTER INSERT ON member_events \
       FOR EACH ROW EXECUTE FUNCTION note_write();";

/// The writes noted since the last call: the tables written, sorted, and how many
/// transactions and how many statements wrote them.
#[derive(Debug, PartialEq)]
struct Writes {
    tables: Vec<String>,
    transactions: usize,
    statements: usize,
}

async fn writes_since(app: &TestApp) -> Writes {
    let tables = app
        .postgres_values("SELECT tbl AS value FROM ack_writes ORDER BY tbl")
        .await;
    let count = |query: &'static str| async move {
        let values = app.postgres_values(query).await;
        values
            .first()
            .and_then(|n| n.parse().ok())
            .expect("a count")
    };
    let transactions = count("SELECT count(DISTINCT tx)::text AS value FROM ack_writes").await;
    let statements =
        count("SELECT count(DISTINCT (tx, stmt))::text AS value FROM ack_writes").await;
    app.run_postgres_sql("DELETE FROM ack_writes").await;
    Writes {
        tables,
        transactions,
        statements,
    }
}

/// Checks that `writes` wrote rows to `tables` (a table once per row) in one transaction, by
/// at most one statement per table, however many rows.
fn assert_set_based(writes: &Writes, tables: &[&str]) {
    let mut expected: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
    expected.sort();
    assert_eq!(writes.tables, expected, "{writes:?}");
    let mut distinct = expected.clone();
    distinct.dedup();
    assert_eq!(
        writes.transactions,
        usize::from(!expected.is_empty()),
        "{writes:?}"
    );
    assert!(writes.statements <= distinct.len(), "{writes:?}");
    assert_eq!(writes.statements == 0, expected.is_empty(), "{writes:?}");
}

/// An ack's writes are set-based: however many groups a request names, one transaction
/// writes each table the ack touches with at most one statement. A trigger of the test's own notes
/// each row written, with its transaction and statement.
async fn on_postgres_an_ack_writes_its_effects_in_one_transaction_at_most_one_statement_per_table()
{
    let app = spawn_app(Engine::Postgres).await;
    let mut groups = Vec::new();
    for _ in 0..3 {
        let g = app.group_with("alice", &["bob"]).await;
        app.send_ok("alice", g, "one").await;
        app.send_ok("alice", g, "two").await;
        groups.push(g);
    }
    app.run_postgres_sql(NOTE_WRITES).await;

    // One group, from a phone: the member's cursors, the phone's cursor, a receipt change
    // for the sender, a read event for bob's other devices.
    let r = app
        .ack(
            "bob#bob-phone",
            groups[0],
            json!({"last_ack_msg_id": 2, "last_read_msg_id": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        (&r.body["last_ack_msg_id"], &r.body["last_read_msg_id"]),
        (&json!(2), &json!(1))
    );
    assert_eq!(r.body["unread_count"], 1);
    let effects = [
        "device_cursors",
        "group_members",
        "member_events",
        "receipt_events",
    ];
    let one_group = writes_since(&app).await;
    assert_set_based(&one_group, &effects);

    // Several groups in one request: still one statement per table.
    let batch = app
        .ack_many(
            "bob#bob-phone",
            json!({"acks": [
                {"group_id": groups[2], "last_ack_msg_id": 2},
                {"group_id": groups[1], "last_ack_msg_id": 2}
            ]}),
        )
        .await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    let twice: Vec<&str> = effects.iter().flat_map(|t| [*t, *t]).collect();
    let groups_at_once = writes_since(&app).await;
    assert_set_based(&groups_at_once, &twice);
    assert_eq!(
        groups_at_once.statements, one_group.statements,
        "as many statements for two groups as for one"
    );
    let results = batch.body["results"].as_array().expect("results");
    assert_eq!(results[0]["group_id"], groups[2], "in request order");
    assert!(results.iter().all(|r| r["unread_count"] == 0));

    // The default device reads the rest: no device cursor to move.
    let r = app
        .ack("bob", groups[0], json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(r.body["unread_count"], 0);
    assert_set_based(
        &writes_since(&app).await,
        &["group_members", "member_events", "receipt_events"],
    );

    // An ack that moves nothing writes nothing; a refused one writes nothing either.
    let again = app
        .ack("bob", groups[0], json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(
        (again.status, &again.body["last_read_msg_id"]),
        (200, &json!(2))
    );
    let beyond = app
        .ack("bob", groups[0], json!({"last_ack_msg_id": 3}))
        .await;
    assert_eq!(beyond.status, 422);
    assert_set_based(&writes_since(&app).await, &[]);

    // A batch naming a group twice acks it twice, one after the other: still one
    // transaction, and the member's row written once by each.
    app.send_ok("alice", groups[1], "three").await;
    writes_since(&app).await;
    let repeat = app
        .ack_many(
            "bob#bob-laptop",
            json!({"acks": [
                {"group_id": groups[1], "last_ack_msg_id": 3, "last_read_msg_id": 2},
                {"group_id": groups[1], "last_ack_msg_id": 3}
            ]}),
        )
        .await;
    assert_eq!(repeat.status, 200, "{:?}", repeat.body);
    assert_eq!(repeat.body["results"][1]["last_read_msg_id"], 3);
    let writes = writes_since(&app).await;
    assert_eq!(writes.transactions, 1, "{writes:?}");
    let member_rows = writes.tables.iter().filter(|t| *t == "group_members");
    assert_eq!(member_rows.count(), 2, "{writes:?}");
}

/// The test's trigger refuses every receipt change with the message and code of its one-row
/// table, as a constraint, a bug or a statement out of time might, counting the refusals in a
/// sequence (which no rollback undoes).
const REFUSE_RECEIPT_CHANGES: &str = "CREATE SEQUENCE refusals; \
     CREATE TABLE refuse_as (message text, code text); \
     INSERT INTO refuse_as VALUES ('refused by the test', 'P0001'); \
     CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
       DECLARE how refuse_as%ROWTYPE; BEGIN \
         PERFORM nextval('refusals'); \
         SELECT * INTO how FROM refuse_as; \
         RAISE EXCEPTION USING MESSAGE = how.message, ERRCODE = how.code; \
       END $$; \
     CREATE TRIGGER refuse BEFORE INSERT ON receipt_events \
       FOR EACH ROW EXECUTE FUNCTION refuse();";

async fn refusals(app: &TestApp) -> Vec<String> {
    app.postgres_values(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END::text AS value FROM refusals",
    )
    .await
}

/// An ack whose write the database refuses answers an error and leaves every cursor where it
/// was (a 500 for an error of the database's own, a 503 when it ran out of time, so the
/// client retries); once the database is back, the same ack lands, once.
async fn on_postgres_an_ack_the_database_fails_answers_an_error_moves_nothing_and_lands_on_retry() {
    let app = spawn_app(Engine::Postgres).await;
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    app.run_postgres_sql(REFUSE_RECEIPT_CHANGES).await;

    let refused = app
        .ack(
            "bob#bob-phone",
            group,
            json!({"last_ack_msg_id": 2, "last_read_msg_id": 1}),
        )
        .await;
    assert_eq!(refused.status, 500, "{:?}", refused.body);
    assert_eq!(
        refused.body["error"]["code"], "internal",
        "{:?}",
        refused.body
    );
    assert_eq!(refusals(&app).await, vec!["1"], "the write was tried once");
    let mine = app.my_groups("bob#bob-phone", "").await;
    assert_eq!(
        mine.body["groups"][0]["last_read_msg_id"], 0,
        "nothing moved"
    );
    assert_eq!(
        mine.body["groups"][0]["last_ack_msg_id"], 0,
        "nothing moved"
    );

    app.run_postgres_sql(
        "UPDATE refuse_as SET message = 'canceling statement due to statement timeout', \
         code = '57014'",
    )
    .await;
    let timed_out = app
        .ack("bob#bob-phone", group, json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(timed_out.status, 503, "{:?}", timed_out.body);
    assert_eq!(refusals(&app).await, vec!["2"]);
    let mine = app.my_groups("bob#bob-phone", "").await;
    assert_eq!(
        mine.body["groups"][0]["last_read_msg_id"], 0,
        "nothing moved"
    );

    // The client retries once the database is back.
    app.run_postgres_sql("DROP TRIGGER refuse ON receipt_events")
        .await;
    let retried = app
        .ack("bob#bob-phone", group, json!({"last_ack_msg_id": 2}))
        .await;
    assert_eq!(retried.status, 200, "{:?}", retried.body);
    assert_eq!(retried.body["last_read_msg_id"], 2);
    assert_eq!(retried.body["unread_count"], 0);
    let receipts = app.message_receipts("alice", group, 2, "").await;
    assert_eq!(receipts.body["read_count"], 1);
    let changes = app
        .postgres_values(
            "SELECT count(*)::text AS value FROM receipt_events WHERE reader_id = 'bob'",
        )
        .await;
    assert_eq!(changes, vec!["1"], "the receipt change recorded once");
}

/// What an ack answers about what is left above the new read cursor: change entries never
/// count as unread, the member's own messages neither, and mentions of them (by name or of
/// everyone) count once each. The answer agrees with the chat list, for an ack of one group
/// and for a batch.
async fn an_acks_answer_counts_what_is_left_as_the_chat_list_does(app: TestApp) {
    let mut groups = Vec::new();
    for _ in 0..2 {
        let g = app.group_with("alice", &["bob"]).await;
        app.send_ok("alice", g, "one").await;
        app.send_ok("alice", g, "two").await;
        app.change("alice", g, "edit", 1, Some("one, edited")).await;
        app.send_ok("bob", g, "mine").await;
        let named = json!({"content": "@bob look", "mentions": ["bob"]});
        assert_eq!(app.send_entry("alice", g, named).await.status, 201);
        let everyone = json!({"content": "@all look", "mention_all": true});
        assert_eq!(app.send_entry("alice", g, everyone).await.status, 201);
        app.send_ok("alice", g, "seven").await;
        groups.push(g);
    }
    // Read through 2, delivered through 7: above the read cursor are the edit (3), bob's own
    // message (4), two mentions (5, 6) and a plain message (7).
    let one = app
        .ack(
            "bob#bob-phone",
            groups[0],
            json!({"last_ack_msg_id": 7, "last_read_msg_id": 2}),
        )
        .await;
    let batch = app
        .ack_many(
            "bob#bob-phone",
            json!({"acks": [{"group_id": groups[1], "last_ack_msg_id": 7, "last_read_msg_id": 2}]}),
        )
        .await;
    assert_eq!(one.status, 200, "{:?}", one.body);
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    let list = app.my_groups("bob#bob-phone", "").await;
    for (group, answer) in groups.iter().zip([&one.body, &batch.body["results"][0]]) {
        assert_eq!(answer["unread_count"], 3, "5, 6 and 7");
        assert_eq!(answer["unread_mention_count"], 2, "5 and 6");
        assert_eq!(answer["last_ack_msg_id"], 7);
        let row = list.body["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["group_id"] == *group)
            .cloned()
            .expect("the group in bob's list");
        assert_eq!(row["unread_count"], answer["unread_count"]);
        assert_eq!(row["unread_mention_count"], answer["unread_mention_count"]);
    }
}

/// A recall of the member's own message commits while their ack waits for their membership
/// row (held by a transaction of the test's own, so that the two queue in that order). The
/// recall lowers the count of their own messages above the read cursor; the ack, which
/// passes the recalled message, must not subtract it a second time. If it did, the unread
/// count would stay one too high, and every later read past their other message would be
/// refused by the database (the count would go below zero). For an ack of one group and for
/// a batch.
async fn on_postgres_an_ack_that_waits_for_a_recall_of_the_members_own_message_counts_it_once() {
    let app = spawn_app(Engine::Postgres).await;
    for batch in [false, true] {
        let group = app.group_with("alice", &["bob"]).await;
        let quiet = app.group_with("alice", &["bob"]).await;
        for k in 1..=4 {
            app.send_ok("alice", group, &format!("a{k}")).await;
        }
        let mine = app.send_ok("bob", group, "mine, to recall").await;
        app.send_ok("alice", group, "a6").await;
        app.send_ok("alice", group, "a7").await;
        app.send_ok("bob", group, "mine, to keep").await;
        assert_eq!(
            mine, 5,
            "bob has read nothing: 5 and 8 are his, above his cursor"
        );

        let held = app
            .transaction_held(&format!(
                "SELECT 1 FROM group_members WHERE group_id = {group} AND user_id = 'bob' \
                 FOR UPDATE"
            ))
            .await;
        let ack = async {
            app.until_waiting_for_locks(1).await;
            if batch {
                let acks = json!({"acks": [
                    {"group_id": group, "last_ack_msg_id": 6},
                    {"group_id": quiet, "last_ack_msg_id": 0}
                ]});
                let r = app.ack_many("bob", acks).await;
                (r.status, r.body["results"][0].clone())
            } else {
                let r = app.ack("bob", group, json!({"last_ack_msg_id": 6})).await;
                (r.status, r.body)
            }
        };
        let release = async {
            app.until_waiting_for_locks(2).await;
            held.commit().await;
        };
        let (recall, (status, acked), ()) =
            tokio::join!(app.change("bob", group, "recall", mine, None), ack, release);
        assert_eq!(recall.status, 201, "{:?}", recall.body);
        assert_eq!(status, 200, "batch {batch}: {acked:?}");
        // Above 6: alice's 7, bob's own 8, the recall's entry 9.
        assert_eq!(acked["last_read_msg_id"], 6);
        assert_eq!(acked["unread_count"], 1, "batch {batch}: {acked:?}");
        let list = app.my_groups("bob", "").await;
        let row = list.body["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["group_id"] == group)
            .cloned()
            .expect("the group in bob's list");
        assert_eq!(row["unread_count"], 1, "batch {batch}");
        let rest = app.ack("bob", group, json!({"last_ack_msg_id": 9})).await;
        assert_eq!(rest.status, 200, "batch {batch}: {:?}", rest.body);
        assert_eq!(rest.body["unread_count"], 0);
    }
}

/// A send decides its sender's cursor moves from their membership row: an ack of the same
/// member that commits while the send waits for the row must be what the send decides from,
/// never overwritten by a row read before it.
async fn on_postgres_a_send_that_waits_for_the_senders_ack_never_moves_their_cursor_back() {
    let app = spawn_app(Engine::Postgres).await;
    let group = app.group_with("alice", &["bob"]).await;
    for k in 1..=4 {
        app.send_ok("alice", group, &format!("a{k}")).await;
    }
    let held = app
        .transaction_held(&format!(
            "SELECT 1 FROM group_members WHERE group_id = {group} AND user_id = 'bob' \
             FOR UPDATE"
        ))
        .await;
    // Bob's ack queues on his row first, then his send.
    let ack = async {
        let r = app.ack("bob", group, json!({"last_ack_msg_id": 4})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    };
    let send = async {
        app.until_waiting_for_locks(1).await;
        app.send_ok("bob", group, "read it all").await
    };
    let release = async {
        app.until_waiting_for_locks(2).await;
        held.commit().await;
    };
    let ((), sent, ()) = tokio::join!(ack, send, release);
    assert_eq!(sent, 5);
    let list = app.my_groups("bob", "").await;
    let row = list.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group_id"] == group)
        .cloned()
        .expect("the group in bob's list");
    // Whichever took the row first, bob has read 1-4 and his own 5 is not unread.
    assert!(row["last_read_msg_id"].as_i64() >= Some(4), "{row:?}");
    assert_eq!(row["unread_count"], 0, "{row:?}");
}
