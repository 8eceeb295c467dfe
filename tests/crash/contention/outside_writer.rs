//! The writer from outside: a connection of its own on the server's SQLite file that holds
//! the write lock for a second at a time, as another process or an operator's sqlite3 shell
//! would.

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::{Connection, SqliteConnection};
use serde_json::json;

use super::Outcome;
use crate::support::client::ApiClient;
use crate::support::http::Reply;

const OUTSIDE_HOLD: Duration = Duration::from_secs(1);
const OUTSIDE_HOLDS: usize = 3;

/// When a hold began and ended, relative to the run's start.
pub type Hold = (Duration, Duration);

/// Holds `BEGIN IMMEDIATE; INSERT …; (1 s); COMMIT` on the database from a connection of its
/// own, as another process or an operator's sqlite3 shell would. Tells `began` once the lock
/// is held; returns when the hold began and ended, relative to `t0`.
fn hold_write_lock(
    conn: &mut SqliteConnection,
    t0: Instant,
    began: Option<tokio::sync::oneshot::Sender<()>>,
) -> Hold {
    conn.batch_execute("BEGIN IMMEDIATE")
        .expect("outside BEGIN IMMEDIATE");
    let start = t0.elapsed();
    conn.batch_execute("INSERT INTO outside_writer (note) VALUES ('held')")
        .expect("outside insert");
    if let Some(began) = began {
        let _ = began.send(());
    }
    std::thread::sleep(OUTSIDE_HOLD);
    conn.batch_execute("COMMIT").expect("outside COMMIT");
    (start, t0.elapsed())
}

fn outside_connection(path: &str) -> SqliteConnection {
    let mut conn = SqliteConnection::establish(path).expect("outside connection");
    conn.batch_execute(
        "PRAGMA busy_timeout = 5000; \
         CREATE TABLE IF NOT EXISTS outside_writer (id INTEGER PRIMARY KEY, note TEXT);",
    )
    .expect("outside table");
    conn
}

/// `OUTSIDE_HOLDS` holds while the clients write: the first after 300 ms, then one a second.
pub fn start(path: String, t0: Instant) -> std::thread::JoinHandle<Vec<Hold>> {
    std::thread::spawn(move || {
        let mut conn = outside_connection(&path);
        let mut holds = Vec::new();
        for i in 0..OUTSIDE_HOLDS {
            std::thread::sleep(Duration::from_millis(if i == 0 { 300 } else { 1000 }));
            holds.push(hold_write_lock(&mut conn, t0, None));
        }
        holds
    })
}

/// With no other traffic, one hold from outside and, while it is held, one ack that moves a
/// cursor and one send. Both should wait out the hold (1 s, below the 5 s busy timeout).
pub async fn quiet_probe(
    api: &ApiClient,
    path: &str,
    group_id: i64,
    users: &[String],
    t0: Instant,
) -> (Vec<Outcome>, Hold) {
    let (sender, reader, other) = (&users[0], &users[1], &users[2]);
    let started = t0.elapsed();
    let msg_id = match api
        .send(sender, group_id, "probe-before-hold", "probe")
        .await
    {
        Reply::Answered(201, body) => body["msg_id"].as_i64().expect("msg_id"),
        other => panic!("probe send before the hold: {other:?}"),
    };
    let before = Outcome {
        kind: "probe setup send",
        status: Some(201),
        body: json!({"group_id": group_id, "msg_id": msg_id}),
        started,
        ended: t0.elapsed(),
    };
    let (began_tx, began_rx) = tokio::sync::oneshot::channel();
    let path = path.to_owned();
    let holder = std::thread::spawn(move || {
        let mut conn = outside_connection(&path);
        hold_write_lock(&mut conn, t0, Some(began_tx))
    });
    began_rx.await.expect("the outside writer holds the lock");
    let timed = |kind, reply, started| Outcome::of(kind, reply, started, t0.elapsed());
    let started = t0.elapsed();
    let ack = api
        .ack(reader, group_id, &json!({ "last_ack_msg_id": msg_id }))
        .await;
    let ack = timed("probe ack", ack, started);
    let started = t0.elapsed();
    let send = api
        .send(other, group_id, "probe-during-hold", "probe")
        .await;
    let send = timed("probe send", send, started);
    let hold = holder.join().expect("outside writer thread");
    (vec![before, ack, send], hold)
}
