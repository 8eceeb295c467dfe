//! Acks of many users that arrive together share commits (on SQLite the writer lane's; on
//! PostgreSQL one transaction carries acks of several users), yet each request keeps its own
//! answer and its own refusal, and none answers before its cursors are committed.
//!
//! The queue is made honestly: the test holds what every ack needs from a connection of its
//! own (SQLite's write lock; on PostgreSQL a share lock on the receipt changes every moving
//! ack records) while a burst of acks arrives, then lets go. Commits and the writes they
//! carried are read from `/metrics`.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::helpers::{HeldTransaction, TestApp, TestResponse};
use crate::support::engine::Engine;
use crate::{on_both_engines, on_postgres};

on_both_engines!(
    acks_of_many_users_arriving_together_each_move_their_own_cursors,
    an_ack_refused_among_acks_arriving_together_fails_alone,
    two_devices_of_one_user_acking_one_group_at_once_both_land,
);

on_postgres!(
    on_postgres_an_ack_whose_member_row_is_busy_does_not_hold_up_the_acks_beside_it,
    on_postgres_a_shared_ack_transaction_that_times_out_answers_503_to_each_and_moves_nothing,
    on_postgres_an_ack_waiting_for_its_member_row_holds_none_of_its_devices_rows_meanwhile,
);

/// How long the burst queues: long enough for every request to arrive, well inside SQLite's
/// busy timeout and PostgreSQL's statement timeout.
const HOLD: Duration = Duration::from_millis(600);

/// Holds what every moving ack needs to commit, until the returned transaction commits.
async fn hold_every_ack(app: &TestApp) -> HeldTransaction {
    let lock = match app.engine {
        // The transaction itself holds the write lock.
        Engine::Sqlite => "",
        Engine::Postgres => "LOCK TABLE receipt_events IN SHARE MODE",
    };
    app.transaction_held(lock).await
}

/// Runs `acks` while every ack is held up for [`HOLD`], then lets go; their answers.
async fn queued_together<F: std::future::Future<Output = TestResponse>>(
    app: &TestApp,
    acks: Vec<F>,
) -> Vec<TestResponse> {
    let held = hold_every_ack(app).await;
    let (answers, _) = tokio::join!(join_all(acks), async {
        tokio::time::sleep(HOLD).await;
        held.commit().await
    });
    answers
}

/// One request of a burst.
type Ack<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = TestResponse> + 'a>>;

fn one<'a>(app: &'a TestApp, user: &str, group_id: i64, body: Value) -> Ack<'a> {
    let user = user.to_owned();
    Box::pin(async move { app.ack(&user, group_id, body).await })
}

fn many<'a>(app: &'a TestApp, user: &str, body: Value) -> Ack<'a> {
    let user = user.to_owned();
    Box::pin(async move { app.ack_many(&user, body).await })
}

fn members(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn as_strs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// The caller's row for `group_id` in their chat list.
async fn chat_row(app: &TestApp, user: &str, group_id: i64) -> Value {
    let mine = app.my_groups(user, "").await;
    assert_eq!(mine.status, 200, "{:?}", mine.body);
    mine.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group_id"] == group_id)
        .cloned()
        .unwrap_or_else(|| panic!("{user}'s row for group {group_id}"))
}

fn cursors(answer: &Value) -> (i64, i64, i64) {
    let field = |name: &str| answer[name].as_i64().unwrap_or(-1);
    (
        field("last_ack_msg_id"),
        field("last_read_msg_id"),
        field("unread_count"),
    )
}

fn user_ids(body: &Value, field: &str) -> BTreeSet<String> {
    body[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {body:?}"))
        .iter()
        .filter_map(|u| u.as_str().map(str::to_owned))
        .collect()
}

async fn acks_of_many_users_arriving_together_each_move_their_own_cursors(app: TestApp) {
    let readers = members("m", 12);
    let mut everyone = readers.clone();
    everyone.push("dave".into());
    let g1 = app.group_with("alice", &as_strs(&everyone)).await;
    let g2 = app.group_with("alice", &as_strs(&everyone)).await;
    for text in ["one", "two", "three"] {
        app.send_ok("alice", g1, text).await;
    }
    for text in ["four", "five"] {
        app.send_ok("alice", g2, text).await;
    }

    // The even readers read everything on their default device; the odd ones receive
    // everything on their phones and read only the first message; dave syncs both groups
    // at login, up to the second message of each.
    let phone = |i: usize| format!("{0}#{0}-phone", readers[i]);
    // Each phone's first request records the device (a write of its own): done before.
    for i in (1..readers.len()).step_by(2) {
        chat_row(&app, &phone(i), g1).await;
    }
    let (commits_before, writes_before) = app.commits_and_writes().await;
    let mut acks = Vec::new();
    for (i, reader) in readers.iter().enumerate() {
        acks.push(if i % 2 == 0 {
            one(&app, reader, g1, json!({"last_ack_msg_id": 3}))
        } else {
            let body = json!({"last_ack_msg_id": 3, "last_read_msg_id": 1});
            one(&app, &phone(i), g1, body)
        });
    }
    acks.push(many(
        &app,
        "dave",
        json!({"acks": [
            {"group_id": g1, "last_ack_msg_id": 2},
            {"group_id": g2, "last_ack_msg_id": 2}
        ]}),
    ));
    let answers = queued_together(&app, acks).await;

    for (i, answer) in answers[..readers.len()].iter().enumerate() {
        assert_eq!(answer.status, 200, "{}: {:?}", readers[i], answer.body);
        let expected = if i % 2 == 0 { (3, 3, 0) } else { (3, 1, 2) };
        assert_eq!(cursors(&answer.body), expected, "{}", readers[i]);
        assert_eq!(answer.body["group_id"], g1);
    }
    let dave = &answers[readers.len()];
    assert_eq!(dave.status, 200, "{:?}", dave.body);
    let results = dave.body["results"].as_array().expect("results");
    assert_eq!(
        (cursors(&results[0]), &results[0]["group_id"]),
        ((2, 2, 1), &json!(g1))
    );
    assert_eq!(
        (cursors(&results[1]), &results[1]["group_id"]),
        ((2, 2, 0), &json!(g2))
    );

    // Fewer commits than acks: they shared (on Citus, acks share a transaction only within
    // one group, a request of two groups is two writes, and the lock that holds them up
    // here is the coordinator's alone).
    let (commits_after, writes_after) = app.commits_and_writes().await;
    let (commits, writes) = (commits_after - commits_before, writes_after - writes_before);
    if !app.on_citus().await {
        assert_eq!(writes, answers.len() as f64, "every ack moved a cursor");
        assert!(
            commits < writes,
            "{writes} acks in {commits} commits: none shared"
        );
    }

    // What the sender sees agrees with every answer.
    let evens: BTreeSet<String> = readers.iter().step_by(2).cloned().collect();
    let third = app.message_receipts("alice", g1, 3, "").await;
    assert_eq!(third.status, 200, "{:?}", third.body);
    assert_eq!(user_ids(&third.body, "read_user_ids"), evens);
    assert_eq!(third.body["delivered_count"], readers.len());
    let second = app.message_receipts("alice", g1, 2, "").await;
    let mut read_second = evens.clone();
    read_second.insert("dave".into());
    assert_eq!(user_ids(&second.body, "read_user_ids"), read_second);
    let first = app.message_receipts("alice", g1, 1, "").await;
    assert_eq!(first.body["read_count"], everyone.len());
    assert_eq!(first.body["unread_count"], 0);
    // And what each member's chat list says.
    assert_eq!(cursors(&chat_row(&app, &phone(1), g1).await), (3, 1, 2));
    assert_eq!(cursors(&chat_row(&app, "dave", g2).await), (2, 2, 0));
}

async fn an_ack_refused_among_acks_arriving_together_fails_alone(app: TestApp) {
    let readers = members("r", 6);
    let mut everyone = readers.clone();
    everyone.extend(["beyond", "half", "twice"].map(String::from));
    let g1 = app.group_with("alice", &as_strs(&everyone)).await;
    let g2 = app.group_with("alice", &as_strs(&everyone)).await;
    app.send_ok("alice", g1, "one").await;
    app.send_ok("alice", g1, "two").await;
    app.send_ok("alice", g2, "three").await;

    let mut acks: Vec<Ack<'_>> = Vec::new();
    for (i, reader) in readers.iter().enumerate() {
        // Interleaved with the refusals below, so they share transactions with them.
        acks.push(one(&app, reader, g1, json!({"last_ack_msg_id": 1 + i % 2})));
        match i {
            // Not a member of g1.
            0 => acks.push(one(&app, "mallory", g1, json!({"last_ack_msg_id": 1}))),
            // Beyond the group's last message.
            1 => acks.push(one(&app, "beyond", g1, json!({"last_ack_msg_id": 99}))),
            // A login sync whose second entry is beyond: nothing of it moves.
            2 => acks.push(many(
                &app,
                "half",
                json!({"acks": [
                    {"group_id": g1, "last_ack_msg_id": 2},
                    {"group_id": g2, "last_ack_msg_id": 5}
                ]}),
            )),
            // One group twice: acked in request order, as two acks one after the other.
            3 => acks.push(many(
                &app,
                "twice",
                json!({"acks": [
                    {"group_id": g1, "last_ack_msg_id": 1},
                    {"group_id": g1, "last_ack_msg_id": 2}
                ]}),
            )),
            _ => {}
        }
    }
    let answers = queued_together(&app, acks).await;

    let mut answers = answers.into_iter();
    for (i, reader) in readers.iter().enumerate() {
        let answer = answers.next().expect("the reader's answer");
        assert_eq!(answer.status, 200, "{reader}: {:?}", answer.body);
        let to = 1 + (i % 2) as i64;
        assert_eq!(cursors(&answer.body), (to, to, 2 - to), "{reader}");
        let refused = match i {
            0 => Some((403, "forbidden")),
            1 => Some((422, "")),
            2 => Some((422, "acks[1]")),
            3 => {
                let twice = answers.next().expect("twice's answer");
                assert_eq!(twice.status, 200, "{:?}", twice.body);
                let results = twice.body["results"].as_array().expect("results");
                assert_eq!(cursors(&results[0]), (1, 1, 1));
                assert_eq!(cursors(&results[1]), (2, 2, 0));
                None
            }
            _ => None,
        };
        if let Some((status, names_what)) = refused {
            let answer = answers.next().expect("the refusal");
            assert_eq!(answer.status, status, "{:?}", answer.body);
            let message = answer.body["error"]["message"].as_str().unwrap_or("");
            let code = answer.body["error"]["code"].as_str().unwrap_or("");
            assert!(
                names_what.is_empty() || message.starts_with(names_what) || code == names_what,
                "{:?} should name {names_what}",
                answer.body
            );
        }
    }

    // The refused requests moved nothing, in any group they named.
    for (user, group) in [("beyond", g1), ("half", g1), ("half", g2)] {
        assert_eq!(cursors(&chat_row(&app, user, group).await).0, 0, "{user}");
    }
    assert_eq!(cursors(&chat_row(&app, "twice", g1).await), (2, 2, 0));
    let first = app.message_receipts("alice", g1, 1, "").await;
    let mut read_first: BTreeSet<String> = readers.iter().cloned().collect();
    read_first.insert("twice".into());
    assert_eq!(user_ids(&first.body, "read_user_ids"), read_first);
}

async fn two_devices_of_one_user_acking_one_group_at_once_both_land(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    for text in ["one", "two", "three"] {
        app.send_ok("alice", group, text).await;
    }
    let ack = |user: &str, body: Value| one(&app, user, group, body);
    // The phone receives two; the laptop reads all three; the phone's ack is retried at
    // once (the client did not hear the first answer); carol acks beside them.
    let answers = queued_together(
        &app,
        vec![
            ack("bob#bob-phone", json!({"last_ack_msg_id": 2})),
            ack("bob#bob-laptop", json!({"last_ack_msg_id": 3})),
            ack("bob#bob-phone", json!({"last_ack_msg_id": 2})),
            ack("carol", json!({"last_ack_msg_id": 3})),
        ],
    )
    .await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
    // Each device's answer gives its own delivered cursor; the read cursor is the user's,
    // which the laptop moved to 3 whatever order the acks were applied in, unless the
    // phone's came after it (then the phone saw 3 too): never below what it asked.
    let phone = cursors(&answers[0].body);
    assert_eq!(phone.0, 2, "the phone's delivered cursor");
    assert!(phone.1 >= 2, "read implies delivered: {phone:?}");
    assert_eq!(cursors(&answers[1].body), (3, 3, 0));
    assert_eq!(cursors(&answers[2].body).0, 2);
    assert_eq!(cursors(&answers[3].body), (3, 3, 0));

    // Afterwards: bob has read everything; each device's cursor is where it acked.
    assert_eq!(
        cursors(&chat_row(&app, "bob#bob-laptop", group).await),
        (3, 3, 0)
    );
    assert_eq!(
        cursors(&chat_row(&app, "bob#bob-phone", group).await),
        (2, 3, 0)
    );
    let third = app.message_receipts("alice", group, 3, "").await;
    assert_eq!(
        user_ids(&third.body, "read_user_ids"),
        BTreeSet::from(["bob".to_owned(), "carol".to_owned()])
    );
}

async fn on_postgres_an_ack_whose_member_row_is_busy_does_not_hold_up_the_acks_beside_it() {
    let app = crate::helpers::spawn_app(Engine::Postgres).await;
    let readers = members("b", 16);
    let mut everyone = readers.clone();
    everyone.push("carol".into());
    let group = app.group_with("alice", &as_strs(&everyone)).await;
    app.send_ok("alice", group, "one").await;

    // Another write holds carol's membership (as a send of hers would, or a removal).
    let carols_row = app
        .transaction_held(&format!(
            "UPDATE group_members SET last_ack_msg_id = last_ack_msg_id \
             WHERE group_id = {group} AND user_id = 'carol'"
        ))
        .await;
    let held = hold_every_ack(&app).await;
    let ack = |user: &str| {
        let user = user.to_owned();
        let app = &app;
        async move {
            let answer = app.ack(&user, group, json!({"last_ack_msg_id": 1})).await;
            (answer, std::time::Instant::now())
        }
    };
    // The first half's acks hold up a transaction in every lane; carol's, then the second
    // half's, queue behind them, and go together once those are let go: carol's is left out
    // of that batch and waits alone for her row.
    let lanes = chorus::db::acks::shared_acks::ACK_LANES as usize;
    let (first_half, second_half) = readers.split_at(readers.len() / 2);
    let (others_done, others_are_done) = tokio::sync::oneshot::channel();
    let others = async {
        let later = async {
            app.until_waiting_for_locks(lanes).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            join_all(second_half.iter().map(|u| ack(u))).await
        };
        let (mut answers, later) = tokio::join!(join_all(first_half.iter().map(|u| ack(u))), later);
        answers.extend(later);
        let _ = others_done.send(());
        answers
    };
    let carol = async {
        app.until_waiting_for_locks(lanes).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        ack("carol").await
    };
    let control = async {
        app.until_waiting_for_locks(lanes).await;
        tokio::time::sleep(HOLD).await;
        held.commit().await;
        tokio::time::timeout(Duration::from_secs(10), others_are_done)
            .await
            .expect("the acks beside carol's answered while her row was held")
            .expect("the others' task");
        carols_row.commit().await
    };
    let (others, (carol, carol_answered), carols_row_released) =
        tokio::join!(others, carol, control);

    for (answer, answered) in &others {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        assert_eq!(cursors(&answer.body), (1, 1, 0));
        assert!(*answered < carols_row_released);
    }
    // Carol's ack waited for her row, and then landed.
    assert_eq!(carol.status, 200, "{:?}", carol.body);
    assert_eq!(cursors(&carol.body), (1, 1, 0));
    assert!(carol_answered > carols_row_released);
    let first = app.message_receipts("alice", group, 1, "").await;
    assert_eq!(first.body["read_count"], everyone.len());
}

/// An ack holds its member rows while it writes their devices' cursor rows. So every ack
/// must take its member rows before any device cursor row: holding a phone's cursor while it
/// waits for the member row, it would wait in a cycle with an ack holding that member row and
/// waiting for the phone's cursor.
async fn on_postgres_an_ack_waiting_for_its_member_row_holds_none_of_its_devices_rows_meanwhile() {
    let app = crate::helpers::spawn_app(Engine::Postgres).await;
    let group = app.group_with("alice", &["bob"]).await;
    for text in ["one", "two", "three"] {
        app.send_ok("alice", group, text).await;
    }
    // The laptop has read two; the phone has received one.
    let laptop = one(&app, "bob#bob-laptop", group, json!({"last_ack_msg_id": 2})).await;
    assert_eq!(cursors(&laptop.body), (2, 2, 1), "{:?}", laptop.body);
    let phone = one(&app, "bob#bob-phone", group, json!({"last_ack_msg_id": 1})).await;
    assert_eq!(cursors(&phone.body), (1, 2, 1), "{:?}", phone.body);

    let bobs_row = app
        .transaction_held(&format!(
            "UPDATE group_members SET last_ack_msg_id = last_ack_msg_id \
             WHERE group_id = {group} AND user_id = 'bob'"
        ))
        .await;
    // The phone catches up to two (its own cursor alone: bob had two), then receives three
    // (bob's row moves), in one request naming the group twice.
    let phone_acks = app.ack_many(
        "bob#bob-phone",
        json!({"acks": [
            {"group_id": group, "last_ack_msg_id": 2},
            {"group_id": group, "last_ack_msg_id": 3}
        ]}),
    );
    let phones_row = format!(
        "SELECT last_ack_msg_id::text AS value FROM device_cursors \
         WHERE group_id = {group} AND user_id = 'bob' AND device_id = 'bob-phone' \
         FOR UPDATE SKIP LOCKED"
    );
    let while_waiting = async {
        app.until_waiting_for_locks(1).await;
        // A row another transaction holds is skipped: an answer means no one holds it.
        let free = app.postgres_values(&phones_row).await;
        bobs_row.commit().await;
        free
    };
    let (answer, phones_row_while_waiting) = tokio::join!(phone_acks, while_waiting);

    assert_eq!(
        phones_row_while_waiting,
        vec!["1".to_owned()],
        "the phone's cursor row was free, unmoved, while the ack waited for bob's row"
    );
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let results = &answer.body["results"];
    assert_eq!(cursors(&results[0]), (2, 2, 1));
    assert_eq!(cursors(&results[1]), (3, 3, 0));
    assert_eq!(
        cursors(&chat_row(&app, "bob#bob-phone", group).await),
        (3, 3, 0)
    );
    assert_eq!(
        cursors(&chat_row(&app, "bob#bob-laptop", group).await),
        (2, 3, 0)
    );
}

/// The test's trigger refuses every receipt change as a statement that ran out of time
/// would, counting the refused statements in a sequence (which no rollback undoes).
const TIME_OUT_RECEIPT_CHANGES: &str = "CREATE SEQUENCE refused_statements; \
     CREATE FUNCTION time_out() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         PERFORM nextval('refused_statements'); \
         RAISE EXCEPTION USING MESSAGE = 'canceling statement due to statement timeout', \
           ERRCODE = '57014'; \
       END $$; \
     CREATE TRIGGER time_out BEFORE INSERT ON receipt_events \
       FOR EACH ROW EXECUTE FUNCTION time_out();";

async fn on_postgres_a_shared_ack_transaction_that_times_out_answers_503_to_each_and_moves_nothing()
{
    let app = crate::helpers::spawn_app(Engine::Postgres).await;
    let readers = members("t", 12);
    let group = app.group_with("alice", &as_strs(&readers)).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    app.run_postgres_sql(TIME_OUT_RECEIPT_CHANGES).await;

    let acks = |readers: &[String]| {
        readers
            .iter()
            .map(|user| {
                let app = &app;
                let user = user.clone();
                async move {
                    app.ack(
                        &user,
                        group,
                        json!({"last_ack_msg_id": 2, "last_read_msg_id": 1}),
                    )
                    .await
                }
            })
            .collect::<Vec<_>>()
    };
    let answers = queued_together(&app, acks(&readers)).await;
    for answer in &answers {
        assert_eq!(answer.status, 503, "{:?}", answer.body);
    }
    let refused: usize = app
        .postgres_values("SELECT last_value::text AS value FROM refused_statements")
        .await[0]
        .parse()
        .expect("a count");
    assert!(
        refused < readers.len(),
        "{refused} refused writes for {} acks: none shared",
        readers.len()
    );
    for reader in &readers {
        assert_eq!(cursors(&chat_row(&app, reader, group).await), (0, 0, 2));
    }

    // The database recovers; every client retries the same ack: each lands once.
    app.run_postgres_sql("DROP TRIGGER time_out ON receipt_events")
        .await;
    let retried = queued_together(&app, acks(&readers)).await;
    for answer in &retried {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        assert_eq!(cursors(&answer.body), (2, 1, 1));
    }
    let changes = app
        .postgres_values("SELECT count(*)::text AS value FROM receipt_events GROUP BY reader_id")
        .await;
    assert_eq!(
        changes,
        vec!["1"; readers.len()],
        "one receipt change per reader"
    );
}
