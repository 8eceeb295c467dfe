//! Feed positions as clients meet them: stored data, not transaction ids. A cursor survives a
//! dump and restore into another database, a cursor of the format before this one is answered
//! `410 cursor_expired`, and a change left unpublished by an instance that died after its commit
//! reaches the feeds all the same.

use std::io::Write;
use std::process::{Command, Stdio};

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::json;

use crate::helpers::{spawn_app_on, TestApp};
use crate::longpoll::{poll_from_until, receipt_changes, synced_groups};
use crate::support::engine::{self, Engine};
use crate::support::scratch_db::ScratchDb;
use crate::support::tokens::SECRET;
use crate::{on_both_engines, on_postgres};

on_both_engines!(a_cursor_of_the_snapshot_format_is_answered_410_on_both_feeds,);

on_postgres!(
    on_postgres_a_dump_restored_into_another_database_keeps_every_feed_and_cursor,
    a_change_left_unpublished_by_a_dead_instance_reaches_the_feed_once,
);

/// Signs `text` as the server signs cursors (the key derived from the token secret), as a
/// cursor issued by an earlier version of the server with the same secret.
fn signed_as_the_server_does(text: &str) -> String {
    type HmacSha256 = hmac::Hmac<sha2::Sha256>;
    let mac = |key: &[u8], data: &[u8]| {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("any key length");
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    };
    let key = mac(SECRET.as_bytes(), b"chorus long-poll cursor key");
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}",
        b64.encode(text),
        b64.encode(&mac(&key, text.as_bytes())[..16])
    )
}

/// A client that kept a cursor from before the upgrade (version 2 held a PostgreSQL snapshot
/// or SQLite row ids) is told to start over, as after retention, on both feeds; a cursor of
/// the current format with a tampered position is refused as not issued here.
async fn a_cursor_of_the_snapshot_format_is_answered_410_on_both_feeds(app: TestApp) {
    let now = chrono::Utc::now().timestamp();
    for (feed, snapshot) in [("m", "740:745:741,743"), ("r", "s:4,1,9")] {
        let old = signed_as_the_server_does(&format!("2.{feed}.{now}.{snapshot}"));
        let r = match feed {
            "m" => {
                app.poll_sync("bob", &format!("?cursor={old}&timeout_s=0"))
                    .await
            }
            _ => {
                app.poll_receipts("bob", &format!("?cursor={old}&timeout_s=0"))
                    .await
            }
        };
        assert_eq!(r.status, 410, "{feed}: {:?}", r.body);
        assert_eq!(r.error_code(), "cursor_expired");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("older version")),
            "{:?}",
            r.body
        );
    }
    let forged = format!("{}x", app.cursor("bob", "/v1/sync").await);
    let r = app
        .poll_sync("bob", &format!("?cursor={forged}&timeout_s=0"))
        .await;
    assert_eq!(r.status, 400, "{:?}", r.body);
}

/// Copies the test's database into a new one with pg_dump and psql, as an operator moving
/// Chorus to another server does.
fn dump_and_restore(app: &TestApp) -> ScratchDb {
    let copy = ScratchDb::postgres(&engine::test_pg_admin_url(), "chorus_restored")
        .unwrap_or_else(|e| panic!("a database to restore into: {e}"));
    let dump = Command::new("pg_dump")
        .args(["--no-owner", "--dbname", &app.database_url])
        .output()
        .expect("pg_dump runs");
    assert!(dump.status.success(), "pg_dump dumped the database");
    let mut psql = Command::new("psql")
        .args([
            "--quiet",
            "--set",
            "ON_ERROR_STOP=1",
            "--dbname",
            copy.url(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("psql runs");
    psql.stdin
        .take()
        .expect("psql's input")
        .write_all(&dump.stdout)
        .expect("the dump goes to psql");
    let restored = psql.wait().expect("psql ends");
    assert!(restored.success(), "psql restored the dump");
    copy
}

/// A member's and a sender's cursors, taken before a dump and used against the restored copy:
/// they report what changed before the dump and after the restore, each once, in a database
/// whose transaction ids started over.
async fn on_postgres_a_dump_restored_into_another_database_keeps_every_feed_and_cursor() {
    let app = crate::helpers::spawn_app(Engine::Postgres).await;
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "before the cursors").await;
    let sync_cursor = app.cursor("bob", "/v1/sync").await;
    let receipts_cursor = app.cursor("alice", "/v1/receipts").await;
    app.send_ok("alice", group, "after the cursors, before the dump")
        .await;

    let restored = spawn_app_on(dump_and_restore(&app), |_| {}).await;
    drop(app);
    restored.send_ok("alice", group, "after the restore").await;
    let acked = restored
        .ack("bob", group, json!({"last_ack_msg_id": 3}))
        .await;
    assert_eq!(acked.status, 200, "{:?}", acked.body);

    let sync = restored
        .poll_sync("bob", &format!("?cursor={sync_cursor}&timeout_s=0"))
        .await;
    assert_eq!(sync.status, 200, "{:?}", sync.body);
    assert_eq!(synced_groups(&sync.body), [(group, 3)]);
    let receipts = restored
        .poll_receipts("alice", &format!("?cursor={receipts_cursor}&timeout_s=0"))
        .await;
    assert_eq!(receipts.status, 200, "{:?}", receipts.body);
    assert_eq!(
        receipt_changes(&receipts.body),
        [(group, 1, 1), (group, 2, 1), (group, 3, 1)],
        "bob's one ack read all three"
    );

    for (path, user, answer) in [
        ("/v1/sync", "bob", &sync),
        ("/v1/receipts", "alice", &receipts),
    ] {
        let next = answer.body["cursor"].as_str().expect("cursor");
        let again = restored
            .call(
                reqwest::Method::GET,
                path,
                &format!("{path}?cursor={next}&timeout_s=0"),
                Some(user),
                None,
            )
            .await;
        assert_eq!(again.status, 200, "{:?}", again.body);
        let items = again.body.get("groups").or(again.body.get("changes"));
        assert_eq!(items, Some(&json!([])), "{path}: nothing repeated");
    }
}

/// An instance that dies between its commit and its publication leaves the change without a
/// position (here made so directly: the send's row is set back to unpublished). Polls from a
/// cursor taken before do not see it until the next publication of any instance, or the
/// publisher's sweep within a second or so, gives it a position above every cursor; then
/// they report it once.
async fn a_change_left_unpublished_by_a_dead_instance_reaches_the_feed_once() {
    let app = crate::helpers::spawn_app(Engine::Postgres).await;
    let group = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;
    app.send_ok("alice", group, "committed, never published")
        .await;
    app.run_postgres_sql(&format!(
        "UPDATE group_msgs SET pos = NULL WHERE group_id = {group}"
    ))
    .await;

    let (reported, cursor) =
        poll_from_until(&app, "bob", "/v1/sync", cursor, |seen| !seen.is_empty()).await;
    let reported = synced_groups(&json!({ "groups": reported }));
    assert_eq!(reported, [(group, 1)]);
    let again = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;
    assert_eq!(synced_groups(&again.body), [], "reported once");
}
