//! Latency samples and failures: nearest-rank summaries in milliseconds, failures counted by
//! label, and how the tables print them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures by label.
#[derive(Default)]
pub struct Errors(Mutex<BTreeMap<String, u64>>);

impl Errors {
    pub fn add(&self, label: String) {
        *self.0.lock().unwrap().entry(label).or_default() += 1;
    }

    pub fn text(&self) -> String {
        let errors = self.0.lock().unwrap();
        if errors.is_empty() {
            return "none".into();
        }
        errors
            .iter()
            .map(|(label, n)| format!("{n}× {label}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Latency samples in milliseconds.
#[derive(Clone, Copy)]
pub struct Summary {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Nearest rank.
    let at = |q: f64| {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    };
    Some(Summary {
        p50: at(0.50),
        p99: at(0.99),
        max: sorted[sorted.len() - 1],
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
    })
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `b - a` in milliseconds, negative when b came first.
pub fn signed_ms(a: Instant, b: Instant) -> f64 {
    if b >= a {
        ms(b - a)
    } else {
        -ms(a - b)
    }
}

pub fn f2(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

/// How many operations a timed block runs, and for how long at most.
#[derive(Clone, Copy)]
pub struct Block {
    pub ops: usize,
    pub time_limit: Duration,
}

/// `op(0)`, `op(1)`, … one after another, `block.ops` times or until its time limit; each
/// success's latency goes to `samples`, each failure to `errors` under `what`. Returns the
/// block's seconds.
pub async fn timed_block<F, Fut>(
    what: &str,
    block: Block,
    samples: &mut Vec<f64>,
    errors: &Errors,
    op: F,
) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    for i in 0..block.ops {
        if start.elapsed() >= block.time_limit {
            errors.add(format!("{what}: time limit"));
            break;
        }
        let t0 = Instant::now();
        match op(i).await {
            Ok(()) => samples.push(ms(t0.elapsed())),
            Err(label) => errors.add(format!("{what}: {label}")),
        }
    }
    start.elapsed().as_secs_f64()
}
