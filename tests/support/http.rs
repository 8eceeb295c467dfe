//! HTTP to a server under test: one way to build the client and its bearer requests, and an
//! answer told apart from a connection that failed.

use std::time::{Duration, Instant};

use reqwest::{Method, RequestBuilder};
use serde_json::Value;

/// A cheap-to-clone client for one server on 127.0.0.1.
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
}

/// A reqwest client that never goes through a proxy; `timeout` bounds every request, so it
/// must be longer than any long-poll the caller makes.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()
        .expect("build HTTP client")
}

impl Http {
    pub fn new(base: impl Into<String>, timeout: Duration) -> Http {
        Http {
            client: client(timeout),
            base: base.into(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn request(&self, method: Method, path: &str, token: &str) -> RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(token)
    }

    pub fn get(&self, path: &str, token: &str) -> RequestBuilder {
        self.request(Method::GET, path, token)
    }

    pub fn post(&self, path: &str, token: &str, body: &Value) -> RequestBuilder {
        self.request(Method::POST, path, token).json(body)
    }

    /// Opens up to `n` keep-alive connections so measured requests do not pay for TCP set-up.
    pub async fn warm_up(&self, n: usize) {
        let url = self.url("/healthz");
        let requests = (0..n).map(|_| self.client.get(&url).send());
        for response in futures::future::join_all(requests).await {
            response.expect("warm-up request to /healthz");
        }
    }

    /// Asks `path` (`/healthz`, `/readyz`) every `every` until it answers 2xx; false when
    /// `within` passes first.
    pub async fn wait_until_ok(&self, path: &str, within: Duration, every: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let probe = self.client.get(self.url(path)).send().await;
            if probe.is_ok_and(|r| r.status().is_success()) {
                return true;
            }
            tokio::time::sleep(every).await;
        }
        false
    }
}

/// What came back: a response (status and JSON body), or nothing because the connection failed
/// (the server died before, while or after handling the request: the outcome is unknown).
#[derive(Debug)]
pub enum Reply {
    Answered(u16, Value),
    Lost(String),
}

impl Reply {
    /// Sends the request. The body is Null when empty, and a JSON string of the raw text when
    /// it is not JSON.
    pub async fn of(request: RequestBuilder) -> Reply {
        match status_and_text(request).await {
            Ok((status, text)) if text.is_empty() => Reply::Answered(status, Value::Null),
            Ok((status, text)) => {
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                Reply::Answered(status, body)
            }
            Err(e) => Reply::Lost(e.to_string()),
        }
    }

    /// The status and body, failing the test when the connection failed.
    pub fn expect_answer(self) -> (u16, Value) {
        match self {
            Reply::Answered(status, body) => (status, body),
            Reply::Lost(e) => panic!("the server did not answer: {e}"),
        }
    }
}

/// The status and the whole body as text; Err when the connection failed at either step.
pub async fn status_and_text(request: RequestBuilder) -> Result<(u16, String), reqwest::Error> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// A short label for a failed connection ("transport: timeout"), for the benches to count.
pub fn transport_label(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "other"
    };
    format!("transport: {kind}")
}

/// A short label for an unexpected answer: its status and error code ("503 unavailable").
pub fn status_label(status: u16, body: &str) -> String {
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    format!("{status} {code}").trim().to_owned()
}
