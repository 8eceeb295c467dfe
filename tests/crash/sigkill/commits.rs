//! How many writes each commit carried while the server ran, as it last reported before its
//! kill (`chorus_db_commits_total`, `chorus_db_writes_total` on /metrics). Writes that queue
//! during a flush share a commit (on SQLite every write, on PostgreSQL the plain sends to one
//! group), so a kill lands in the middle of such a batch: the run's verdict then covers
//! writes that were grouped, not only lone ones.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::client::ApiClient;

const EVERY: Duration = Duration::from_millis(50);

/// Commits and the writes they carried, summed over the servers of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Commits {
    pub commits: u64,
    pub writes: u64,
}

/// Reads /metrics every [`EVERY`] until stopped, keeping the last answer.
pub struct CommitSampler {
    last: Arc<Mutex<Commits>>,
    task: tokio::task::JoinHandle<()>,
}

impl CommitSampler {
    pub fn start(api: &ApiClient) -> CommitSampler {
        let last = Arc::new(Mutex::new(Commits::default()));
        let (api, seen) = (api.clone(), last.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Some(now) = read(&api).await {
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = now;
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        CommitSampler { last, task }
    }

    /// The last reading before the server went away.
    pub fn finish(self) -> Commits {
        self.task.abort();
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn read(api: &ApiClient) -> Option<Commits> {
    let response = api.http.get("/metrics", "").send().await.ok()?;
    let text = response.text().await.ok()?;
    let value = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(Commits {
        commits: value("chorus_db_commits_total")?,
        writes: value("chorus_db_writes_total")?,
    })
}

impl std::ops::AddAssign for Commits {
    fn add_assign(&mut self, other: Commits) {
        self.commits += other.commits;
        self.writes += other.writes;
    }
}
