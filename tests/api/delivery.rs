//! Delivery that holds for real clients: a send never skips what the sender had not received,
//! and every device of a user catches up on its own, while reading is the user's, everywhere.

use std::time::Duration;

use serde_json::json;

use crate::endpoints::{group_ids, msg_ids};
use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    a_sender_who_pulled_nothing_still_receives_everything_before_their_message,
    a_sender_who_had_everything_moves_onto_their_own_message,
    own_messages_above_the_read_cursor_never_count_as_unread,
    a_laptop_catches_up_on_what_the_phone_acked,
    reading_on_the_laptop_clears_the_phone_badge_through_sync,
    a_device_is_not_told_of_its_own_reads,
    being_added_and_removed_appear_in_sync_on_every_device,
    a_device_offline_while_its_user_was_removed_learns_of_it_when_back,
    a_member_removed_and_added_back_is_told_and_woken_again,
    delivered_counts_a_member_once_whichever_device_received_it,
    requests_without_a_device_keep_the_default_device_cursor,
    a_send_from_a_device_moves_only_that_devices_cursor,
    a_device_that_reads_and_replies_at_once_gets_answers_to_both,
);

fn unread_of(page: &serde_json::Value, group: i64) -> i64 {
    page["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group_id"] == group)
        .unwrap_or_else(|| panic!("group {group} missing from {page}"))["unread_count"]
        .as_i64()
        .expect("unread_count")
}

async fn a_sender_who_pulled_nothing_still_receives_everything_before_their_message(app: TestApp) {
    // Arrange: alice sends 1-5; bob, who pulled nothing, replies from a notification.
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=5 {
        app.send_ok("alice", group, &format!("message {i}")).await;
    }
    assert_eq!(unread_of(&app.my_groups("bob", "").await.body, group), 5);

    // Act
    let reply = app.send_ok("bob", group, "on my way").await;

    // Assert: bob's cursors did not jump over 1-5, and his own reply is not unread.
    assert_eq!(reply, 6);
    let bob = app.my_groups("bob", "").await;
    assert_eq!(bob.body["groups"][0]["last_ack_msg_id"], 0);
    assert_eq!(bob.body["groups"][0]["last_read_msg_id"], 0);
    assert_eq!(unread_of(&bob.body, group), 5, "1-5 unread, 6 is bob's own");
    for msg in 1..=5 {
        let receipts = app.message_receipts("alice", group, msg, "").await;
        assert_eq!(
            receipts.body["unread_user_ids"],
            json!(["bob"]),
            "bob has not read {msg}"
        );
        assert_eq!(receipts.body["delivered_count"], 0);
    }
    assert_eq!(
        unread_of(&app.my_groups("alice", "").await.body, group),
        1,
        "bob's reply"
    );

    // The offline pull delivers every earlier message exactly once, then bob's own.
    let received = app.pull_and_ack_all("bob", group).await;
    assert_eq!(received, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(unread_of(&app.my_groups("bob", "").await.body, group), 0);
    let receipts = app.message_receipts("alice", group, 3, "").await;
    assert_eq!(receipts.body["read_user_ids"], json!(["bob"]));
}

async fn a_sender_who_had_everything_moves_onto_their_own_message(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "hi").await;
    app.ack("bob", group, json!({"last_ack_msg_id": 1})).await;

    app.send_ok("bob", group, "hi back").await;

    let bob = app.my_groups("bob", "").await;
    assert_eq!(bob.body["groups"][0]["last_ack_msg_id"], 2);
    assert_eq!(bob.body["groups"][0]["last_read_msg_id"], 2);
    assert_eq!(unread_of(&bob.body, group), 0);
    let pull = app.list_messages("bob", group, "").await;
    assert_eq!(msg_ids(&pull.body), Vec::<i64>::new(), "nothing to pull");
    // A retried send changes nothing.
    let again = app.send("bob", group, "retry-me", "once").await;
    assert_eq!(again.status, 201);
    let retry = app.send("bob", group, "retry-me", "once").await;
    assert_eq!(retry.status, 200);
    let bob = app.my_groups("bob", "").await;
    assert_eq!(bob.body["groups"][0]["last_read_msg_id"], 3);
    assert_eq!(unread_of(&bob.body, group), 0);
}

async fn own_messages_above_the_read_cursor_never_count_as_unread(app: TestApp) {
    // alice 1, bob 2 (behind), alice 3, bob 4, bob 5.
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "1").await;
    app.send_ok("bob", group, "2").await;
    app.send_ok("alice", group, "3").await;
    app.send_ok("bob", group, "4").await;
    app.send_ok("bob", group, "5").await;
    assert_eq!(unread_of(&app.my_groups("bob", "").await.body, group), 2);
    assert_eq!(
        app.my_groups("bob", "?unread_only=true").await.body["groups"][0]["group_id"],
        group
    );

    // Reading up to 2 passes one own message (2): only 3 stays unread.
    let ack = app
        .ack(
            "bob",
            group,
            json!({"last_ack_msg_id": 2, "last_read_msg_id": 2}),
        )
        .await;
    assert_eq!(ack.status, 200);
    assert_eq!(ack.body["unread_count"], 1);
    assert_eq!(unread_of(&app.my_groups("bob", "").await.body, group), 1);

    // Reading 3 leaves only his own 4 and 5 above the cursor: nothing unread.
    let ack = app.ack("bob", group, json!({"last_ack_msg_id": 3})).await;
    assert_eq!(ack.body["unread_count"], 0);
    let listed = app.my_groups("bob", "?unread_only=true").await;
    assert_eq!(listed.body["groups"], json!([]));
    assert_eq!(listed.body["total_unread"], 0);

    // Reading to the end keeps it at zero (the own count never goes below it).
    let ack = app.ack("bob", group, json!({"last_ack_msg_id": 5})).await;
    assert_eq!(ack.body["unread_count"], 0);
    app.send_ok("alice", group, "6").await;
    assert_eq!(unread_of(&app.my_groups("bob", "").await.body, group), 1);
}

async fn a_laptop_catches_up_on_what_the_phone_acked(app: TestApp) {
    // Arrange: 100 messages; bob's phone pulls and acks them all while the laptop is off.
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=100 {
        app.send_ok("alice", group, &format!("message {i}")).await;
    }
    let phone_got = app.pull_and_ack_all("bob#phone", group).await;
    assert_eq!(phone_got, (1..=100).collect::<Vec<i64>>());

    // Act: the laptop comes back and pulls without after_msg_id.
    let laptop_before = app.my_groups("bob#laptop", "").await;
    let laptop_got = app.pull_and_ack_all("bob#laptop", group).await;

    // Assert: every message exactly once, in order; read is the user's, so nothing is unread
    // on either device before or after.
    assert_eq!(laptop_got, (1..=100).collect::<Vec<i64>>());
    assert_eq!(laptop_before.body["groups"][0]["last_ack_msg_id"], 0);
    assert_eq!(laptop_before.body["groups"][0]["last_read_msg_id"], 100);
    assert_eq!(unread_of(&laptop_before.body, group), 0);
    for device in ["bob#phone", "bob#laptop"] {
        let mine = app.my_groups(device, "").await;
        assert_eq!(mine.body["groups"][0]["last_ack_msg_id"], 100, "{device}");
        assert_eq!(unread_of(&mine.body, group), 0);
        let again = app.list_messages(device, group, "").await;
        assert_eq!(
            msg_ids(&again.body),
            Vec::<i64>::new(),
            "{device} has everything"
        );
    }
    // The default device of the same user has received nothing yet.
    let default_pull = app.list_messages("bob", group, "?limit=5").await;
    assert_eq!(msg_ids(&default_pull.body), vec![1, 2, 3, 4, 5]);
}

async fn reading_on_the_laptop_clears_the_phone_badge_through_sync(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "are you there?").await;
    app.send_ok("alice", group, "ping").await;
    let phone_cursor = app.cursor("bob#phone", "/v1/sync").await;
    assert_eq!(
        unread_of(&app.my_groups("bob#phone", "").await.body, group),
        2
    );

    let query = format!("?cursor={phone_cursor}&timeout_s=20");
    let (poll, ack) = tokio::join!(app.poll_sync("bob#phone", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.ack("bob#laptop", group, json!({"last_ack_msg_id": 2}))
            .await
    });

    assert_eq!(ack.status, 200);
    assert_eq!(poll.status, 200);
    assert_eq!(poll.body["groups"][0]["group_id"], group);
    assert_eq!(
        poll.body["groups"][0]["unread_count"], 0,
        "the badge clears"
    );
    assert_eq!(poll.body["groups"][0]["last_read_msg_id"], 2);
    assert_eq!(
        poll.body["groups"][0]["last_ack_msg_id"], 0,
        "the phone itself has received nothing yet"
    );
    assert_eq!(poll.body["total_unread"], 0);
    assert_eq!(poll.body["removed_group_ids"], json!([]));
}

async fn a_device_is_not_told_of_its_own_reads(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "hello").await;
    let laptop_cursor = app.cursor("bob#laptop", "/v1/sync").await;
    let phone_cursor = app.cursor("bob#phone", "/v1/sync").await;

    app.ack("bob#laptop", group, json!({"last_ack_msg_id": 1}))
        .await;

    let own = app
        .poll_sync(
            "bob#laptop",
            &format!("?cursor={laptop_cursor}&timeout_s=0"),
        )
        .await;
    assert_eq!(
        own.body["groups"],
        json!([]),
        "the laptop knows what it read"
    );
    let other = app
        .poll_sync("bob#phone", &format!("?cursor={phone_cursor}&timeout_s=0"))
        .await;
    assert_eq!(other.body["groups"][0]["group_id"], group);
    // An ack that moves nothing (the phone acking what is read already) reports nothing.
    let phone_cursor = other.body["cursor"].as_str().unwrap().to_owned();
    app.ack("bob#phone", group, json!({"last_ack_msg_id": 1}))
        .await;
    let laptop = app
        .poll_sync(
            "bob#laptop",
            &format!("?cursor={laptop_cursor}&timeout_s=0"),
        )
        .await;
    assert_eq!(laptop.body["groups"], json!([]));
    let phone = app
        .poll_sync("bob#phone", &format!("?cursor={phone_cursor}&timeout_s=0"))
        .await;
    assert_eq!(phone.body["groups"], json!([]));
}

async fn being_added_and_removed_appear_in_sync_on_every_device(app: TestApp) {
    let group = app.group_with("alice", &["carol"]).await;
    app.send_ok("alice", group, "before bob").await;
    let phone = app.cursor("bob#phone", "/v1/sync").await;
    let laptop = app.cursor("bob#laptop", "/v1/sync").await;

    let added = app.add_members("alice", group, &["bob"]).await;
    assert_eq!(added.status, 200);

    for (device, cursor) in [("bob#phone", &phone), ("bob#laptop", &laptop)] {
        let poll = app
            .poll_sync(device, &format!("?cursor={cursor}&timeout_s=5"))
            .await;
        assert_eq!(poll.body["groups"][0]["group_id"], group, "{device}");
        assert_eq!(
            poll.body["groups"][0]["unread_count"], 0,
            "joining is not unread"
        );
        assert_eq!(
            poll.body["groups"][0]["last_message"]["kind"], "member_joined",
            "{device}: the line of bob's join, nothing from before it"
        );
    }

    let phone = app
        .poll_sync("bob#phone", &format!("?cursor={phone}&timeout_s=0"))
        .await;
    let phone_cursor = phone.body["cursor"].as_str().unwrap().to_owned();
    let query = format!("?cursor={phone_cursor}&timeout_s=20");
    let (poll, removed) = tokio::join!(app.poll_sync("bob#phone", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.remove_member("alice", group, "bob").await
    });
    assert_eq!(removed.status, 204);
    assert_eq!(poll.body["groups"], json!([]));
    assert_eq!(
        poll.body["removed_group_ids"],
        json!([group]),
        "it disappears"
    );
    let mine = app.my_groups("bob#phone", "").await;
    assert_eq!(mine.body["groups"], json!([]));
}

async fn a_device_offline_while_its_user_was_removed_learns_of_it_when_back(app: TestApp) {
    // Bob is in two groups; his laptop takes a sync cursor and goes offline.
    let kept = app.group_with("alice", &["bob"]).await;
    let left = app.group_with("carol", &["bob"]).await;
    let laptop = app.cursor("bob#laptop", "/v1/sync").await;

    // While it is away, carol removes him from her group and alice writes in hers.
    assert_eq!(app.remove_member("carol", left, "bob").await.status, 204);
    app.send_ok("alice", kept, "while you were away").await;
    app.send_ok("carol", left, "after bob left").await;

    // Back online, its first poll answers at once with both changes.
    let poll = app
        .poll_sync("bob#laptop", &format!("?cursor={laptop}&timeout_s=5"))
        .await;
    assert_eq!(poll.status, 200);
    assert_eq!(group_ids(&poll.body), [kept]);
    assert_eq!(unread_of(&poll.body, kept), 1);
    assert_eq!(poll.body["removed_group_ids"], json!([left]));
    assert_eq!(
        poll.body["total_unread"], 1,
        "the group he left counts nothing"
    );
    let mine = app.my_groups("bob#laptop", "").await;
    assert_eq!(group_ids(&mine.body), [kept]);
}

async fn a_member_removed_and_added_back_is_told_and_woken_again(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    assert_eq!(app.remove_member("alice", group, "bob").await.status, 204);
    let phone = app.cursor("bob#phone", "/v1/sync").await;

    assert_eq!(app.add_members("alice", group, &["bob"]).await.status, 200);

    let poll = app
        .poll_sync("bob#phone", &format!("?cursor={phone}&timeout_s=5"))
        .await;
    assert_eq!(group_ids(&poll.body), [group], "back in the list");
    assert_eq!(poll.body["removed_group_ids"], json!([]));
    let mine = app.my_groups("bob#phone", "").await;
    assert_eq!(group_ids(&mine.body), [group]);

    // A poll waiting after his return is woken by the group's next message.
    let cursor = poll.body["cursor"].as_str().expect("cursor").to_owned();
    let query = format!("?cursor={cursor}&timeout_s=20");
    let started = std::time::Instant::now();
    let (woken, _) = tokio::join!(app.poll_sync("bob#phone", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.send_ok("alice", group, "welcome back").await
    });
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "woken, not timed out"
    );
    assert_eq!(group_ids(&woken.body), [group]);
    assert_eq!(unread_of(&woken.body, group), 1);
}

async fn delivered_counts_a_member_once_whichever_device_received_it(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;

    app.ack(
        "bob#phone",
        group,
        json!({"last_ack_msg_id": 2, "last_read_msg_id": 0}),
    )
    .await;
    app.ack(
        "bob#laptop",
        group,
        json!({"last_ack_msg_id": 1, "last_read_msg_id": 0}),
    )
    .await;

    let two = app.message_receipts("alice", group, 2, "").await;
    assert_eq!(two.body["delivered_count"], 1, "bob once, via his phone");
    assert_eq!(two.body["read_count"], 0);
    assert_eq!(two.body["unread_count"], 2);
    app.ack("bob#laptop", group, json!({"last_ack_msg_id": 2}))
        .await;
    let two = app.message_receipts("alice", group, 2, "").await;
    assert_eq!(two.body["delivered_count"], 1);
    assert_eq!(two.body["read_count"], 1);
    assert_eq!(two.body["read_user_ids"], json!(["bob"]));
}

async fn requests_without_a_device_keep_the_default_device_cursor(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    app.ack(
        "bob",
        group,
        json!({"last_ack_msg_id": 1, "last_read_msg_id": 0}),
    )
    .await;

    app.ack("bob#phone", group, json!({"last_ack_msg_id": 2}))
        .await;

    let page = app.list_messages("bob", group, "").await;
    assert_eq!(
        msg_ids(&page.body),
        vec![2],
        "the default device continues after 1"
    );
    assert_eq!(page.body["last_ack_msg_id"], 1);
    assert_eq!(page.body["last_read_msg_id"], 2, "read on the phone");
    let phone_page = app.list_messages("bob#phone", group, "").await;
    assert_eq!(msg_ids(&phone_page.body), Vec::<i64>::new());
    assert_eq!(phone_page.body["last_ack_msg_id"], 2);
    let devices = app.my_devices("bob").await;
    assert_eq!(devices.body["devices"][0]["device_id"], "phone");
    assert_eq!(
        devices.body["devices"].as_array().unwrap().len(),
        1,
        "the default device is not a listed device"
    );
}

async fn a_send_from_a_device_moves_only_that_devices_cursor(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.ack("bob#phone", group, json!({"last_ack_msg_id": 1}))
        .await;

    app.send_ok("bob#phone", group, "two").await;

    let phone = app.list_messages("bob#phone", group, "").await;
    assert_eq!(
        msg_ids(&phone.body),
        Vec::<i64>::new(),
        "the phone had everything"
    );
    assert_eq!(phone.body["last_ack_msg_id"], 2);
    assert_eq!(phone.body["last_read_msg_id"], 2);
    let laptop = app.list_messages("bob#laptop", group, "").await;
    assert_eq!(
        msg_ids(&laptop.body),
        vec![1, 2],
        "the laptop receives both"
    );
    assert_eq!(
        unread_of(&app.my_groups("bob#laptop", "").await.body, group),
        0
    );
}

/// A phone opening a chat acks what it shows and sends a reply at the same moment: both
/// requests touch the member's row and the device's row, and neither may fail or leave the
/// counts wrong.
async fn a_device_that_reads_and_replies_at_once_gets_answers_to_both(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for round in 0..30 {
        let last = app
            .send_ok("alice", group, &format!("question {round}"))
            .await;

        let client_msg_id = format!("r-{round}");
        let (ack, reply) = tokio::join!(
            app.ack("bob#phone", group, json!({"last_ack_msg_id": last})),
            app.send("bob#phone", group, &client_msg_id, "answer")
        );

        assert_eq!(ack.status, 200, "round {round}: {:?}", ack.body);
        assert_eq!(reply.status, 201, "round {round}: {:?}", reply.body);
    }
    let bob = app.my_groups("bob#phone", "").await;
    assert_eq!(
        bob.body["groups"][0]["unread_count"], 0,
        "read all, own replies never unread"
    );
    let laptop = app.pull_and_ack_all("bob#laptop", group).await;
    assert_eq!(
        laptop,
        (1..=60).collect::<Vec<i64>>(),
        "every message, once, in order"
    );
}
