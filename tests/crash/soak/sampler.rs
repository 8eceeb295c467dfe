//! Every few seconds, each instance's resident memory and open sockets from /proc, and the
//! table of them per minute (per tenth of the run when it is shorter than ten minutes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::fleet::Pids;
use crate::support::proc_status::{mib, open_sockets, rss_kib};

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub secs: f64,
    pub instance: usize,
    pub pid: u32,
    pub rss_kib: u64,
    pub sockets: usize,
}

/// Samples until `stop`.
pub async fn sample(
    pids: Pids,
    every: Duration,
    started: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let now: Vec<Option<u32>> = pids.lock().expect("pids lock").clone();
        for (instance, pid) in now.into_iter().enumerate() {
            let Some(pid) = pid else { continue };
            let rss = rss_kib(pid);
            let Some(sockets) = open_sockets(pid) else {
                continue;
            };
            if rss > 0 {
                samples.push(Sample {
                    secs: started.elapsed().as_secs_f64(),
                    instance,
                    pid,
                    rss_kib: rss,
                    sockets,
                });
            }
        }
        tokio::time::sleep(every).await;
    }
    samples
}

/// One row per bucket: for each instance, the median RSS (MiB) and median sockets of its
/// samples there, and `*` when it was restarted within the bucket.
pub fn table(samples: &[Sample], instances: usize, bucket_secs: f64) -> String {
    let bucket_of = |s: &Sample| (s.secs / bucket_secs) as usize;
    let buckets = samples.iter().map(bucket_of).max().map_or(0, |b| b + 1);
    let mut out = String::from("| from (s) |");
    for i in 0..instances {
        out.push_str(&format!(" instance {i}: RSS MiB / sockets |"));
    }
    out.push_str(&format!("\n|---|{}\n", "---|".repeat(instances)));
    let mut rows = vec![String::new(); buckets];
    for i in 0..instances {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.instance == i).collect();
        for (b, row) in rows.iter_mut().enumerate() {
            let here: Vec<&Sample> = mine.iter().copied().filter(|s| bucket_of(s) == b).collect();
            // A new pid since the sample before this bucket's first: restarted here.
            let before = mine.iter().rev().find(|s| bucket_of(s) < b).map(|s| s.pid);
            let pids = before.into_iter().chain(here.iter().map(|s| s.pid));
            let restarted = pids.collect::<Vec<_>>().windows(2).any(|w| w[0] != w[1]);
            row.push_str(&cell(&here, restarted));
        }
    }
    for (b, row) in rows.iter().enumerate() {
        out.push_str(&format!("| {:.0} |{row}\n", b as f64 * bucket_secs));
    }
    out
}

fn cell(here: &[&Sample], restarted: bool) -> String {
    if here.is_empty() {
        return " - |".to_owned();
    }
    let rss = median(here.iter().map(|s| s.rss_kib).collect());
    let sockets = median(here.iter().map(|s| s.sockets as u64).collect());
    let mark = if restarted { " *" } else { "" };
    format!(" {:.1} / {sockets}{mark} |", mib(rss))
}

pub fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// For the instance's longest-lived process: the median RSS (KiB) of its first third of
/// samples and of its last third, and how long that process lived (s).
pub fn growth(samples: &[Sample], instance: usize) -> Option<(u64, u64, f64)> {
    let mine: Vec<&Sample> = samples.iter().filter(|s| s.instance == instance).collect();
    let mut lives: Vec<Vec<&Sample>> = Vec::new();
    for s in mine {
        match lives.last_mut() {
            Some(life) if life[0].pid == s.pid => life.push(s),
            _ => lives.push(vec![s]),
        }
    }
    let life = lives.into_iter().max_by_key(|l| l.len())?;
    if life.len() < 6 {
        return None;
    }
    let third = life.len() / 3;
    let first = median(life[..third].iter().map(|s| s.rss_kib).collect());
    let last = median(
        life[life.len() - third..]
            .iter()
            .map(|s| s.rss_kib)
            .collect(),
    );
    let lived = life[life.len() - 1].secs - life[0].secs;
    Some((first, last, lived))
}
