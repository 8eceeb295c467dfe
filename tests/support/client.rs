//! A client of Chorus's endpoints for tests that drive a server from outside (a child process,
//! or an in-process server whose database goes away): every call says whether it was answered
//! or lost, and mints the caller's token itself. One client may spread its calls over several
//! instances in turn, and time each call against its documented bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::http::{Http, Reply};
use crate::support::request_log::RequestLog;
use crate::support::tokens::TokenMint;

#[derive(Clone)]
pub struct ApiClient {
    /// The first (often the only) server.
    pub http: Http,
    /// Every server, taken in turn by [`ApiClient::call`].
    targets: Arc<[Http]>,
    turn: Arc<AtomicUsize>,
    log: Option<Arc<RequestLog>>,
    mint: Arc<TokenMint>,
}

/// One entry of a group's log as a page lists it: a message, or a line the server wrote
/// (`member_joined`, ...), which has no client_msg_id (empty here) and no content.
#[derive(Debug)]
pub struct StoredMessage {
    pub msg_id: i64,
    pub kind: String,
    pub sender_id: String,
    pub client_msg_id: String,
    pub content: String,
    /// The message a change entry (`recall`, `edit`, `delete`) changed.
    pub target_msg_id: Option<i64>,
    /// Whether the message was edited (it has `edited_at`).
    pub edited: bool,
}

impl ApiClient {
    pub fn new(base: impl Into<String>, timeout: Duration) -> ApiClient {
        ApiClient::with_client(crate::support::http::client(timeout), base)
    }

    /// Another server, the same connections' client (and its pool).
    pub fn with_client(client: reqwest::Client, base: impl Into<String>) -> ApiClient {
        ApiClient::round_robin(client, vec![base.into()])
    }

    /// Calls go to `bases` in turn, as behind a load balancer: a call that finds its server
    /// dead is lost, and the caller's retry goes to the next one.
    pub fn round_robin(client: reqwest::Client, bases: Vec<String>) -> ApiClient {
        let targets: Arc<[Http]> = bases
            .into_iter()
            .map(|base| Http {
                client: client.clone(),
                base,
            })
            .collect();
        ApiClient {
            http: targets[0].clone(),
            targets,
            turn: Arc::new(AtomicUsize::new(0)),
            log: None,
            mint: Arc::new(TokenMint::new()),
        }
    }

    /// Every call from now on (of this client and its clones) is timed into `log`.
    pub fn timed(mut self, log: Arc<RequestLog>) -> ApiClient {
        self.log = Some(log);
        self
    }

    fn next_target(&self) -> &Http {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        &self.targets[turn % self.targets.len()]
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        user: &str,
        body: Option<&Value>,
    ) -> Reply {
        let token = self.mint.token(user);
        let mut request = self.next_target().request(method.clone(), path, &token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let started = Instant::now();
        let reply = Reply::of(request).await;
        if let Some(log) = &self.log {
            log.record(&method, path, started.elapsed(), &reply);
        }
        reply
    }

    pub async fn send(
        &self,
        user: &str,
        group_id: i64,
        client_msg_id: &str,
        content: &str,
    ) -> Reply {
        let body = json!({"client_msg_id": client_msg_id, "content": content});
        let path = format!("/v1/groups/{group_id}/messages");
        self.call(Method::POST, &path, user, Some(&body)).await
    }

    pub async fn ack(&self, user: &str, group_id: i64, body: &Value) -> Reply {
        let path = format!("/v1/groups/{group_id}/ack");
        self.call(Method::POST, &path, user, Some(body)).await
    }

    /// The new group's id; fails the test on anything but 201.
    pub async fn create_group(&self, owner: &str, name: &str, members: &[&str]) -> i64 {
        let body = json!({"name": name, "member_ids": members});
        match self
            .call(Method::POST, "/v1/groups", owner, Some(&body))
            .await
        {
            Reply::Answered(201, body) => body["group_id"].as_i64().expect("group_id"),
            other => panic!("creating group {name} failed: {other:?}"),
        }
    }

    /// Every message of the group, from after_msg_id=0, read as `member`; and the group's
    /// last_msg_id as the last page reported it.
    pub async fn pull_all(&self, member: &str, group_id: i64) -> (Vec<StoredMessage>, i64) {
        let mut after = 0;
        let mut messages = Vec::new();
        loop {
            let path = format!("/v1/groups/{group_id}/messages?after_msg_id={after}&limit=200");
            let body = match self.call(Method::GET, &path, member, None).await {
                Reply::Answered(200, body) => body,
                other => panic!("pulling group {group_id} as {member} failed: {other:?}"),
            };
            let page = body["messages"].as_array().expect("messages");
            messages.extend(page.iter().map(stored_message));
            if let Some(last) = messages.last() {
                after = last.msg_id;
            }
            if !body["has_more"].as_bool().expect("has_more") {
                return (messages, body["last_msg_id"].as_i64().expect("last_msg_id"));
            }
        }
    }

    /// The member's (last_ack_msg_id, last_read_msg_id) in the group, as a page reports them.
    pub async fn cursors(&self, member: &str, group_id: i64) -> (i64, i64) {
        let path = format!("/v1/groups/{group_id}/messages?limit=1");
        match self.call(Method::GET, &path, member, None).await {
            Reply::Answered(200, body) => (
                body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id"),
                body["last_read_msg_id"].as_i64().expect("last_read_msg_id"),
            ),
            other => panic!("reading {member}'s cursors in group {group_id} failed: {other:?}"),
        }
    }
}

fn stored_message(m: &Value) -> StoredMessage {
    let kind = m["kind"].as_str().expect("kind").to_owned();
    let text = |field: &str| match kind.as_str() {
        "message" => m[field].as_str().expect(field).to_owned(),
        _ => m[field].as_str().unwrap_or_default().to_owned(),
    };
    StoredMessage {
        msg_id: m["msg_id"].as_i64().expect("msg_id"),
        sender_id: m["sender_id"].as_str().expect("sender_id").to_owned(),
        client_msg_id: text("client_msg_id"),
        content: text("content"),
        target_msg_id: m["target_msg_id"].as_i64(),
        edited: m.get("edited_at").is_some_and(|t| t.is_string()),
        kind,
    }
}
