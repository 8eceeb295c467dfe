//! A long-poll whose client hangs up gives its slot back within seconds, not at `timeout_s`:
//! a phone that lost its connection must be able to poll again at once, and abandoned polls
//! must not count against the server-wide bound.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    sync_polls_of_a_closed_connection_free_their_slots_within_two_seconds,
    receipt_polls_of_a_closed_connection_free_their_slots_within_two_seconds,
);

/// How soon after the client closes its socket the slot must be free again.
const RELEASED_WITHIN: Duration = Duration::from_secs(2);
/// Far longer than [`RELEASED_WITHIN`], so only noticing the hang-up can free the slots in time.
const POLL_TIMEOUT_S: u64 = 30;
/// The default per-user bound: every slot the user has is taken.
const POLLS: i64 = 8;

async fn sync_polls_of_a_closed_connection_free_their_slots_within_two_seconds(app: TestApp) {
    slots_come_back_after_hang_up(&app, "/v1/sync").await;
}

async fn receipt_polls_of_a_closed_connection_free_their_slots_within_two_seconds(app: TestApp) {
    slots_come_back_after_hang_up(&app, "/v1/receipts").await;
}

async fn slots_come_back_after_hang_up(app: &TestApp, feed: &str) {
    let cursor = app.cursor("bob", feed).await;
    let query = format!("?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}");
    let mut sockets = Vec::new();
    for _ in 0..POLLS {
        sockets.push(open_poll(app, &format!("{feed}{query}"), "bob").await);
    }
    assert!(
        wait_for_waiting(app, POLLS, Duration::from_secs(10)).await,
        "all {POLLS} polls are waiting"
    );
    let refused = poll_now(app, feed, &cursor).await;
    assert_eq!(refused.status, 429, "every slot of bob's is taken");

    drop(sockets);
    let closed = Instant::now();

    assert!(
        wait_for_waiting(app, 0, RELEASED_WITHIN).await,
        "the slots were freed within {RELEASED_WITHIN:?} of the hang-up (waiting now: {})",
        waiting(app).await
    );
    let again = poll_now(app, feed, &cursor).await;
    assert_eq!(
        again.status,
        200,
        "a new poll is served {:?} after the hang-up: {:?}",
        closed.elapsed(),
        again.body
    );
}

/// Sends a long-poll on its own connection and leaves it waiting; dropping the stream closes
/// the connection as a client that gives up does.
async fn open_poll(app: &TestApp, path_and_query: &str, user: &str) -> TcpStream {
    let host = app.address.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).await.expect("connect");
    let request = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\r\n",
        app.token(user)
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send poll");
    stream
}

async fn poll_now(app: &TestApp, feed: &str, cursor: &str) -> crate::helpers::TestResponse {
    let path = format!("{feed}?cursor={cursor}&timeout_s=0");
    app.call(reqwest::Method::GET, feed, &path, Some("bob"), None)
        .await
}

/// The `chorus_longpolls_waiting` gauge.
async fn waiting(app: &TestApp) -> i64 {
    app.metric("chorus_longpolls_waiting")
        .await
        .expect("the waiting gauge is exported") as i64
}

/// Whether the gauge reads `expected` before `within` passes.
async fn wait_for_waiting(app: &TestApp, expected: i64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if waiting(app).await == expected {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
