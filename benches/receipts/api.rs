//! HTTP calls the scenarios make, through a client that counts every request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::http::{status_and_text, status_label, transport_label, Http};
use crate::{CONTENT, REQUEST_TIMEOUT};

/// A client for one server on 127.0.0.1 that counts every request it makes.
#[derive(Clone)]
pub struct CountingHttp {
    http: Http,
    requests: Arc<AtomicU64>,
}

impl CountingHttp {
    pub fn new(base: String, requests: Arc<AtomicU64>) -> CountingHttp {
        CountingHttp {
            http: Http::new(base, REQUEST_TIMEOUT),
            requests,
        }
    }

    /// Sends a request; Ok with the JSON body (Null when empty) when the status is one of
    /// `expect`, otherwise Err with a short label ("429 too_many_waiters", "transport: timeout").
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
        expect: &[u16],
    ) -> Result<Value, String> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut request = self.http.request(method, path, token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let (status, text) = status_and_text(request).await.map_err(transport_label)?;
        if !expect.contains(&status) {
            return Err(status_label(status, &text));
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| format!("bad body: {e}"))
    }

    pub async fn get(&self, path: &str, token: &str) -> Result<Value, String> {
        self.call(reqwest::Method::GET, path, token, None, &[200])
            .await
    }

    pub async fn post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        expect: &[u16],
    ) -> Result<Value, String> {
        self.call(reqwest::Method::POST, path, token, Some(body), expect)
            .await
    }

    /// Opens up to `n` keep-alive connections so measured requests do not pay for TCP set-up.
    pub async fn warm_up(&self, n: usize) {
        self.http.warm_up(n).await
    }
}

/// Creates a group owned by the token's user with `members` besides; ids go 1000 at a time
/// (the documented bound per request): the first 1000 with the create, the rest added after.
pub async fn create_group(
    http: &CountingHttp,
    owner_token: &str,
    name: &str,
    members: &[String],
) -> Result<i64, String> {
    let mut chunks = members.chunks(1000);
    let first = chunks.next().unwrap_or(&[]);
    let body = json!({"name": name, "member_ids": first});
    let created = http.post("/v1/groups", owner_token, &body, &[201]).await?;
    let group = created["group_id"]
        .as_i64()
        .ok_or("create group: no group_id")?;
    for chunk in chunks {
        let body = json!({ "user_ids": chunk });
        http.post(
            &format!("/v1/groups/{group}/members"),
            owner_token,
            &body,
            &[200],
        )
        .await?;
    }
    Ok(group)
}

pub async fn send_message(
    http: &CountingHttp,
    token: &str,
    group: i64,
    client_msg_id: &str,
) -> Result<i64, String> {
    let body = json!({"client_msg_id": client_msg_id, "content": CONTENT});
    let sent = http
        .post(
            &format!("/v1/groups/{group}/messages"),
            token,
            &body,
            &[201],
        )
        .await?;
    sent["msg_id"]
        .as_i64()
        .ok_or_else(|| "send: no msg_id".into())
}

/// The cursor of a long-poll feed ("/v1/sync" or "/v1/receipts") without waiting.
pub async fn feed_cursor(http: &CountingHttp, token: &str, feed: &str) -> Result<String, String> {
    let answer = http.get(feed, token).await?;
    answer["cursor"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{feed}: no cursor"))
}
