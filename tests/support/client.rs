//! A client of Chorus's endpoints for tests that drive a server from outside (a child process,
//! or an in-process server whose database goes away): every call says whether it was answered
//! or lost, and mints the caller's token itself.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::http::{Http, Reply};
use crate::support::tokens::TokenMint;

#[derive(Clone)]
pub struct ApiClient {
    pub http: Http,
    mint: Arc<TokenMint>,
}

/// One message as a page lists it.
#[derive(Debug)]
pub struct StoredMessage {
    pub msg_id: i64,
    pub sender_id: String,
    pub client_msg_id: String,
    pub content: String,
}

impl ApiClient {
    pub fn new(base: impl Into<String>, timeout: Duration) -> ApiClient {
        ApiClient::with_client(crate::support::http::client(timeout), base)
    }

    /// Another server, the same connections' client (and its pool).
    pub fn with_client(client: reqwest::Client, base: impl Into<String>) -> ApiClient {
        let http = Http {
            client,
            base: base.into(),
        };
        ApiClient {
            http,
            mint: Arc::new(TokenMint::new()),
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        user: &str,
        body: Option<&Value>,
    ) -> Reply {
        let mut request = self.http.request(method, path, &self.mint.token(user));
        if let Some(body) = body {
            request = request.json(body);
        }
        Reply::of(request).await
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
    StoredMessage {
        msg_id: m["msg_id"].as_i64().expect("msg_id"),
        sender_id: m["sender_id"].as_str().expect("sender_id").to_owned(),
        client_msg_id: m["client_msg_id"].as_str().expect("cmid").to_owned(),
        content: m["content"].as_str().expect("content").to_owned(),
    }
}
