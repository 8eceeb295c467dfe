//! One long-poll of a change feed, as both pollers make it: the answer's body, or a tally of
//! why there was none.

use reqwest::Method;
use serde_json::Value;

use crate::support::client::ApiClient;
use crate::support::http::Reply;

/// How long a drained feed must then stay quiet before the checks read it: longer than the
/// once-a-second sweep by which a live instance publishes what a killed one committed but had
/// not yet published (see `db::engine::publish`), with room for a loaded machine.
pub const QUIET_FOR_S: u64 = 3;

/// Polls that got no 200, by why.
#[derive(Debug, Default)]
pub struct PollTally {
    /// The connection failed: the instance was killed or not yet listening.
    pub lost: u64,
    /// 503, as during the database restart.
    pub unavailable: u64,
    /// Any other status: each one breaks a promise.
    pub problems: Vec<String>,
}

impl PollTally {
    /// GET `path` as `caller`: the body of a 200; anything else is counted and gives None.
    pub async fn poll(&mut self, api: &ApiClient, caller: &str, path: &str) -> Option<Value> {
        match api.call(Method::GET, path, caller, None).await {
            Reply::Answered(200, body) => Some(body),
            Reply::Answered(503, _) => {
                self.unavailable += 1;
                None
            }
            Reply::Answered(status, body) => {
                self.problems
                    .push(format!("{caller} poll answered {status}: {body}"));
                None
            }
            Reply::Lost(_) => {
                self.lost += 1;
                None
            }
        }
    }
}
