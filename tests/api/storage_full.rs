//! A SQLite database that cannot grow: writes that need space get a documented `507
//! storage_full` with `Retry-After`, reads and acks go on, and the log says it once.
//!
//! The database is made full honestly, without root or a tiny file system: the real binary
//! runs with `CHORUS_SQLITE_MAX_SIZE_MB=1`, a cap SQLite enforces with the same error
//! (`SQLITE_FULL`, "database or disk is full") a full disk gives. SQLite only: PostgreSQL has
//! no such cap to set from a test.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::spec_check::check_against_spec;
use crate::support::child_server::start_healthy;
use crate::support::tokens::TokenMint;

/// More than 1 MiB of 16 KiB messages: the cap is reached well before the last.
const MAX_SENDS: usize = 200;
const SEND_TEMPLATE: &str = "/v1/groups/{group_id}/messages";

struct Client {
    http: reqwest::Client,
    base: String,
    mint: TokenMint,
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Client {
    async fn call(
        &self,
        method: Method,
        template: &str,
        path: &str,
        user: &str,
        body: Option<Value>,
    ) -> Answer {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(self.mint.token(user));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body: Value = response.json().await.unwrap_or(Value::Null);
        check_against_spec(method.as_str(), template, status, &body);
        Answer {
            status,
            retry_after,
            body,
        }
    }

    async fn send(&self, group: i64, n: usize, content: &str) -> Answer {
        let body = json!({"client_msg_id": format!("fill-{n}"), "content": content});
        let path = format!("/v1/groups/{group}/messages");
        self.call(Method::POST, SEND_TEMPLATE, &path, "alice", Some(body))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_database_refuses_writes_with_507_and_keeps_reads_and_acks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("CHORUS_SQLITE_MAX_SIZE_MB", "1"),
        ("CHORUS_SQLITE_SYNC", "normal"),
    ];
    let (server, http) = start_healthy(dir.path(), None, &env).await;
    let client = Client {
        http,
        base: server.base.clone(),
        mint: TokenMint::new(),
    };
    let created = client
        .call(
            Method::POST,
            "/v1/groups",
            "/v1/groups",
            "alice",
            Some(json!({"name": "full", "member_ids": ["bob"]})),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let group = created.body["group_id"].as_i64().expect("group_id");

    let content = "x".repeat(16 * 1024);
    let mut stored = 0;
    let refused = loop {
        assert!(
            stored < MAX_SENDS,
            "1 MiB should be full before {MAX_SENDS} sends"
        );
        let answer = client.send(group, stored, &content).await;
        if answer.status != 201 {
            break answer;
        }
        stored += 1;
    };

    assert_eq!(
        refused.status,
        StatusCode::INSUFFICIENT_STORAGE.as_u16(),
        "a full database is not an internal error: {:?}",
        refused.body
    );
    assert_eq!(refused.body["error"]["code"], "storage_full");
    assert!(
        refused
            .retry_after
            .as_deref()
            .is_some_and(|s| s.parse::<u64>().is_ok()),
        "507 says when to retry: {:?}",
        refused.retry_after
    );
    for n in 0..5 {
        let again = client.send(group, MAX_SENDS + n, &content).await;
        assert_eq!(again.status, 507, "still full: {:?}", again.body);
    }

    let pulled = client
        .call(
            Method::GET,
            SEND_TEMPLATE,
            &format!("/v1/groups/{group}/messages?limit=200"),
            "bob",
            None,
        )
        .await;
    assert_eq!(pulled.status, 200, "reads go on: {:?}", pulled.body);
    let ids = pulled.body["messages"].as_array().expect("messages").len();
    assert_eq!(ids, stored, "every acknowledged send is there");
    let chat_list = client
        .call(Method::GET, "/v1/me/groups", "/v1/me/groups", "bob", None)
        .await;
    assert_eq!(chat_list.status, 200, "{:?}", chat_list.body);
    let acked = client
        .call(
            Method::POST,
            "/v1/groups/{group_id}/ack",
            &format!("/v1/groups/{group}/ack"),
            "bob",
            Some(json!({"last_ack_msg_id": stored})),
        )
        .await;
    assert_eq!(acked.status, 200, "acks go on: {:?}", acked.body);

    let log = server.log();
    let alarms = log
        .lines()
        .filter(|l| l.contains("the database is full"))
        .collect::<Vec<_>>();
    assert_eq!(
        alarms.len(),
        1,
        "the log says it once, not once per refused write:\n{log}"
    );
    assert!(alarms[0].contains(" ERROR "), "loudly: {alarms:?}");
    assert!(
        !log.contains("internal error"),
        "no write was an internal error:\n{log}"
    );
}
