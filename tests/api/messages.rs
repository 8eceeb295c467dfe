//! Sending: idempotency, contiguous ids under concurrency, history paging, late joiners.

use std::collections::BTreeSet;

use futures::future::join_all;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    send_returns_201_with_the_stored_message,
    duplicate_client_msg_id_returns_the_original_with_200,
    raced_client_msg_id_stores_one_message,
    concurrent_senders_get_contiguous_ids_without_gaps,
    history_pages_backwards_in_ascending_pages,
    a_gap_between_two_pages_is_filled_page_by_page,
    late_joiner_sees_only_later_messages,
    own_message_is_never_unread_and_reads_nothing_before_it,
);

async fn send_returns_201_with_the_stored_message(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;

    let r = app.send("alice", group, "c-1", "hello 你好 👋").await;

    assert_eq!(r.status, 201);
    assert_eq!(r.body["msg_id"], 1);
    assert_eq!(r.body["group_id"], group);
    assert_eq!(r.body["sender_id"], "alice");
    assert_eq!(r.body["client_msg_id"], "c-1");
    assert_eq!(r.body["content"], "hello 你好 👋");
    let pulled = app.list_messages("bob", group, "").await;
    assert_eq!(pulled.body["messages"][0]["content"], "hello 你好 👋");
}

async fn duplicate_client_msg_id_returns_the_original_with_200(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let first = app.send("alice", group, "same", "first").await;

    let again = app.send("alice", group, "same", "different content").await;
    let other_sender = app.send("bob", group, "same", "bob's own").await;

    assert_eq!(first.status, 201);
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body, "a retry gets the original message");
    assert_eq!(
        other_sender.status, 201,
        "client_msg_id is scoped to its sender"
    );
    assert_eq!(other_sender.body["msg_id"], 2);
    let page = app.list_messages("alice", group, "?after_msg_id=0").await;
    assert_eq!(page.body["messages"].as_array().unwrap().len(), 2);
}

async fn raced_client_msg_id_stores_one_message(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;

    let responses = join_all((0..16).map(|_| app.send("alice", group, "raced", "once"))).await;

    let created = responses.iter().filter(|r| r.status == 201).count();
    assert_eq!(created, 1, "exactly one request creates the message");
    assert!(responses.iter().all(|r| r.status == 201 || r.status == 200));
    assert!(responses.iter().all(|r| r.body["msg_id"] == 1));
    let group_view = app.get_group("alice", group).await;
    assert_eq!(
        group_view.body["last_msg_id"], 1,
        "no id was burned by the losers"
    );
    let next = app.send_ok("alice", group, "after the race").await;
    assert_eq!(next, 2);
}

async fn concurrent_senders_get_contiguous_ids_without_gaps(app: TestApp) {
    let senders: Vec<String> = (0..8).map(|i| format!("sender{i}")).collect();
    let others: Vec<&str> = senders[1..].iter().map(String::as_str).collect();
    let group = app.group_with(&senders[0], &others).await;

    let per_sender = join_all(senders.iter().map(|sender| {
        let app = &app;
        async move {
            let mut ids = Vec::with_capacity(200);
            for i in 0..200 {
                let r = app.send(sender, group, &format!("{sender}-{i}"), "x").await;
                assert_eq!(r.status, 201, "{:?}", r.body);
                ids.push(r.body["msg_id"].as_i64().unwrap());
            }
            ids
        }
    }))
    .await;

    let all: Vec<i64> = per_sender.iter().flatten().copied().collect();
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 1600);
    assert_eq!(
        distinct,
        (1..=1600).collect(),
        "ids are 1..1600, no gap, no duplicate"
    );
    for ids in &per_sender {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one sender's ids increase"
        );
    }
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = app
            .list_messages(
                "sender0",
                group,
                &format!("?after_msg_id={after}&limit=200"),
            )
            .await;
        let msgs = page.body["messages"].as_array().unwrap().clone();
        if msgs.is_empty() {
            break;
        }
        for m in &msgs {
            seen.push(m["msg_id"].as_i64().unwrap());
        }
        after = *seen.last().unwrap();
    }
    assert_eq!(
        seen,
        (1..=1600).collect::<Vec<_>>(),
        "the stored sequence reads back in order"
    );
}

async fn history_pages_backwards_in_ascending_pages(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=7 {
        app.send_ok("alice", group, &format!("m{i}")).await;
    }

    let newest = app
        .list_messages("bob", group, "?before_msg_id=8&limit=3")
        .await;
    let older = app
        .list_messages("bob", group, "?before_msg_id=5&limit=3")
        .await;
    let oldest = app
        .list_messages("bob", group, "?before_msg_id=2&limit=3")
        .await;

    let ids = |r: &crate::helpers::TestResponse| -> Vec<i64> {
        r.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["msg_id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&newest), vec![5, 6, 7]);
    assert_eq!(newest.body["has_more"], true);
    assert_eq!(ids(&older), vec![2, 3, 4]);
    assert_eq!(ids(&oldest), vec![1]);
    assert_eq!(oldest.body["has_more"], false);
}

/// A client holding messages 1-2 and 9-10 (say, the last page before it went offline and the
/// newest) fetches what lies between, oldest first, page by page.
async fn a_gap_between_two_pages_is_filled_page_by_page(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=10 {
        app.send_ok("alice", group, &format!("m{i}")).await;
    }
    let ids = |r: &crate::helpers::TestResponse| -> Vec<i64> { crate::endpoints::msg_ids(&r.body) };

    let first = app
        .list_messages("bob", group, "?after_msg_id=2&before_msg_id=9&limit=4")
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(ids(&first), vec![3, 4, 5, 6]);
    assert_eq!(first.body["has_more"], true, "7 and 8 remain");
    let second = app
        .list_messages("bob", group, "?after_msg_id=6&before_msg_id=9&limit=4")
        .await;
    assert_eq!(ids(&second), vec![7, 8]);
    assert_eq!(second.body["has_more"], false, "the gap is filled");
    assert_eq!(
        second.body["last_msg_id"], 10,
        "the group's newest, as always"
    );

    // Bounds with nothing between them give an empty page, not an error.
    for query in [
        "?after_msg_id=4&before_msg_id=5",
        "?after_msg_id=7&before_msg_id=3",
    ] {
        let empty = app.list_messages("bob", group, query).await;
        assert_eq!(empty.status, 200, "{query}: {:?}", empty.body);
        assert_eq!(ids(&empty), Vec::<i64>::new(), "{query}");
        assert_eq!(empty.body["has_more"], false, "{query}");
    }
    // Listing moves no cursor.
    let pull = app.list_messages("bob", group, "").await;
    assert_eq!(ids(&pull).first(), Some(&1));
}

async fn late_joiner_sees_only_later_messages(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "before carol").await;
    app.send_ok("alice", group, "still before carol").await;

    let added = app.add_members("alice", group, &["carol"]).await;
    let after_join = app.send_ok("alice", group, "carol can see this").await;

    assert_eq!(added.status, 200);
    assert_eq!(added.body["added"], serde_json::json!(["carol"]));
    let pull = app.list_messages("carol", group, "").await;
    let history = app
        .list_messages("carol", group, "?before_msg_id=100")
        .await;
    let explicit = app.list_messages("carol", group, "?after_msg_id=0").await;
    for page in [&pull, &history, &explicit] {
        let msgs = page.body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 2, "{:?}", page.body);
        assert_eq!(msgs[0]["kind"], "member_joined", "the line of carol's join");
        assert_eq!(msgs[1]["msg_id"], after_join);
    }
    let mine = app.my_groups("carol", "").await;
    assert_eq!(
        mine.body["groups"][0]["unread_count"], 1,
        "earlier messages never count as unread"
    );
}

async fn own_message_is_never_unread_and_reads_nothing_before_it(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("bob", group, "from bob").await;

    app.send_ok("alice", group, "from alice").await;

    let alice = app.my_groups("alice", "").await;
    let bob = app.my_groups("bob", "").await;
    assert_eq!(
        alice.body["groups"][0]["unread_count"], 1,
        "bob's message stays unread; alice's own does not count"
    );
    assert_eq!(
        alice.body["groups"][0]["last_read_msg_id"], 0,
        "sending does not read what came before"
    );
    assert_eq!(bob.body["groups"][0]["unread_count"], 1);
}
