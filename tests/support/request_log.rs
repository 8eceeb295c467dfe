//! How long each request to a server under test took, by kind, against the bound the README
//! and openapi.yaml document for it: a long-poll answers within its `timeout_s`, any other
//! request within the pool timeout (then `503`). Both get a slack for a loaded test machine.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::support::http::Reply;

/// What one kind of request came to.
#[derive(Clone, Debug, Default)]
pub struct KindTally {
    pub requests: u64,
    pub answered_2xx: u64,
    /// `503 unavailable`: the database was down or every connection busy.
    pub unavailable: u64,
    /// Any other status.
    pub other_status: u64,
    /// No answer: the server was killed, or not listening yet.
    pub lost: u64,
    pub slowest: Duration,
    pub over_bound: u64,
}

pub struct RequestLog {
    /// The bound of a request that is not a long-poll: the pool timeout plus slack.
    pub ordinary_bound: Duration,
    /// Added to a long-poll's `timeout_s`.
    pub poll_slack: Duration,
    kinds: Mutex<BTreeMap<&'static str, KindTally>>,
    /// The first few requests past their bound, for the failure message.
    over: Mutex<Vec<String>>,
    /// When the log was made: an over-bound request says when it began, to be read beside
    /// the run's timeline of faults.
    origin: Instant,
}

impl RequestLog {
    pub fn new(ordinary_bound: Duration, poll_slack: Duration) -> RequestLog {
        RequestLog {
            ordinary_bound,
            poll_slack,
            kinds: Mutex::new(BTreeMap::new()),
            over: Mutex::new(Vec::new()),
            origin: Instant::now(),
        }
    }

    /// Counts one request and checks how long it took against its bound.
    pub fn record(&self, method: &Method, path: &str, took: Duration, reply: &Reply) {
        let kind = kind_of(method, path);
        let bound = match poll_timeout(path) {
            Some(timeout) => timeout + self.poll_slack,
            None => self.ordinary_bound,
        };
        let mut kinds = self.kinds.lock().expect("request log lock");
        let tally = kinds.entry(kind).or_default();
        tally.requests += 1;
        match reply {
            Reply::Answered(200..=299, _) => tally.answered_2xx += 1,
            Reply::Answered(503, _) => tally.unavailable += 1,
            Reply::Answered(..) => tally.other_status += 1,
            Reply::Lost(_) => tally.lost += 1,
        }
        tally.slowest = tally.slowest.max(took);
        if took > bound {
            tally.over_bound += 1;
            let mut over = self.over.lock().expect("request log lock");
            if over.len() < 10 {
                let began = self.origin.elapsed().saturating_sub(took).as_secs_f64();
                over.push(format!(
                    "{method} {path} began at {began:.1} s, took {took:?}, bound {bound:?}: \
                     {reply:?}"
                ));
            }
        }
    }

    pub fn tallies(&self) -> BTreeMap<&'static str, KindTally> {
        self.kinds.lock().expect("request log lock").clone()
    }

    pub fn over_bound(&self) -> Vec<String> {
        self.over.lock().expect("request log lock").clone()
    }
}

/// A name per endpoint and method: `send`, `pull`, `ack`, `sync`, `receipts`, ...
fn kind_of(method: &Method, path: &str) -> &'static str {
    let route = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["v1", "sync"]) => "sync",
        ("GET", ["v1", "receipts"]) => "receipts",
        ("POST", ["v1", "groups"]) => "create_group",
        ("POST", ["v1", "groups", _, "messages"]) => "send",
        ("GET", ["v1", "groups", _, "messages"]) => "pull",
        ("POST", ["v1", "groups", _, "ack"]) => "ack",
        ("POST", ["v1", "groups", _, "members"]) => "add_members",
        ("DELETE", ["v1", "groups", _, "members", _]) => "remove_member",
        _ => "other",
    }
}

/// A long-poll's `timeout_s` (25 s when absent, 60 s at most, as documented); None for a
/// request that does not wait, a feed asked without a cursor included.
fn poll_timeout(path: &str) -> Option<Duration> {
    let (route, query) = path.split_once('?')?;
    if route != "/v1/sync" && route != "/v1/receipts" {
        return None;
    }
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    };
    param("cursor")?;
    let seconds = param("timeout_s")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(25);
    Some(Duration::from_secs(seconds.min(60)))
}
