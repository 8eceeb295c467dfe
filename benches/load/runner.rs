//! The load runner: a count of operations spread over concurrent clients, each bounded by
//! [`TIME_LIMIT`], and what they measured.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::support::proc_status::{stat_ticks, TICKS_PER_SEC};
use crate::TIME_LIMIT;

/// What a run measured: successful requests, the items they carried (messages, group-acks),
/// the latency of each successful request, failures by label, and the wall time.
#[derive(Default)]
pub struct Measured {
    pub ok: u64,
    pub items: u64,
    pub latencies: Vec<Duration>,
    pub errors: BTreeMap<String, u64>,
    pub elapsed: Duration,
    pub hit_time_limit: bool,
}

impl Measured {
    pub fn record(&mut self, took: Duration, outcome: Result<u64, String>) {
        match outcome {
            Ok(items) => {
                self.ok += 1;
                self.items += items;
                self.latencies.push(took);
            }
            Err(label) => *self.errors.entry(label).or_default() += 1,
        }
    }

    pub fn merge(&mut self, other: Measured) {
        self.ok += other.ok;
        self.items += other.items;
        self.latencies.extend(other.latencies);
        for (label, n) in other.errors {
            *self.errors.entry(label).or_default() += n;
        }
        self.hit_time_limit |= other.hit_time_limit;
    }

    pub fn rate(&self, count: u64) -> f64 {
        count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Nearest-rank percentile of the successful requests' latencies, in milliseconds.
    pub fn percentile_ms(&self, q: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(sorted[rank - 1].as_secs_f64() * 1000.0)
    }

    pub fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "0".into();
        }
        self.errors
            .iter()
            .map(|(label, n)| format!("{n}× {label}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn requests_text(&self, planned: usize) -> String {
        let cut = if self.hit_time_limit {
            " (time limit)"
        } else {
            ""
        };
        format!("{}/{planned}{cut}", self.ok)
    }
}

/// How many of `total` operations client `k` of `clients` does.
pub fn share(total: usize, clients: usize, k: usize) -> usize {
    total / clients + usize::from(k < total % clients)
}

/// Runs `total` operations spread over `clients` concurrent tasks; `op(k, i)` is client k's
/// i-th operation and returns how many items it carried.
pub async fn run_load<F, Fut>(clients: usize, total: usize, op: F) -> Measured
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + TIME_LIMIT;
    let tasks = (0..clients).map(|k| {
        let op = op.clone();
        tokio::spawn(async move {
            let mut measured = Measured::default();
            for i in 0..share(total, clients, k) {
                if Instant::now() >= deadline {
                    measured.hit_time_limit = true;
                    break;
                }
                let t0 = Instant::now();
                let outcome = op(k, i).await;
                measured.record(t0.elapsed(), outcome);
            }
            measured
        })
    });
    let mut all = Measured::default();
    for part in join_all(tasks).await {
        all.merge(part.expect("load task panicked"));
    }
    all.elapsed = start.elapsed();
    all
}

/// CPU seconds the whole process used (user + system), from `/proc/self/stat`.
fn process_cpu_secs() -> f64 {
    stat_ticks("/proc/self/stat").map_or(0.0, |(_, ticks)| ticks as f64 / TICKS_PER_SEC)
}

/// The run's result and the CPU milliseconds per successful request it took.
pub async fn measure_cpu(run: impl std::future::Future<Output = Measured>) -> (Measured, f64) {
    let before = process_cpu_secs();
    let m = run.await;
    let cpu_ms = (process_cpu_secs() - before) * 1000.0 / m.ok.max(1) as f64;
    (m, cpu_ms)
}
