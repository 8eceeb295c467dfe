//! The run's figures: one summary line in the test output and, when CHORUS_RELIABILITY_LOG
//! names a file, one JSON line appended to it (RELIABILITY.md is written from those).

use std::collections::HashSet;
use std::io::Write;

use serde_json::json;

use super::traffic::Traffic;
use super::verdict::Verdict;
use crate::support::engine::Engine;

const RELIABILITY_LOG_VAR: &str = "CHORUS_RELIABILITY_LOG";

/// What the clients did, summed over all of them.
pub struct Tally {
    pub attempted: u64,
    /// Distinct sends answered 2xx, at the first attempt or a retry.
    pub acknowledged: u64,
    pub first_try: u64,
    pub lost_response: u64,
    pub retried_200: u64,
    pub retried_201: u64,
    pub retry_lost_again: u64,
    pub acks: u64,
    pub acks_lost: u64,
    pub pulls: u64,
    pub pulls_lost: u64,
    /// First attempts of sends answered 503 (each then retried until answered 2xx).
    pub first_try_unavailable: u64,
    /// Every request of the lanes and members answered 503.
    pub unavailable: u64,
}

impl Tally {
    pub fn of(traffic: &Traffic) -> Tally {
        let lanes = &traffic.lanes;
        let sum = |f: fn(&super::sender_lane::SenderLane) -> u64| lanes.iter().map(f).sum();
        let members = &traffic.members;
        let msum = |f: fn(&super::member::MemberClient) -> u64| members.iter().map(f).sum();
        let acknowledged: HashSet<&str> = lanes
            .iter()
            .flat_map(|l| &l.acknowledged)
            .map(|a| a.client_msg_id.as_str())
            .collect();
        Tally {
            attempted: sum(|l| l.attempted),
            acknowledged: acknowledged.len() as u64,
            first_try: sum(|l| l.first_try_2xx),
            lost_response: sum(|l| l.lost_response),
            retried_200: sum(|l| l.retried_200),
            retried_201: sum(|l| l.retried_201),
            retry_lost_again: sum(|l| l.retry_lost_again),
            acks: msum(|m| m.acks),
            acks_lost: msum(|m| m.acks_lost),
            pulls: msum(|m| m.pulls),
            pulls_lost: msum(|m| m.pulls_lost),
            first_try_unavailable: sum(|l| l.first_try_unavailable),
            unavailable: sum(|l| l.first_try_unavailable + l.retry_unavailable)
                + msum(|m| m.unavailable),
        }
    }
}

/// How the run was set up and how long it took.
pub struct RunFacts {
    pub engine: Engine,
    pub seed: u64,
    pub kills: usize,
    pub windows_ms: Vec<u64>,
    pub seconds: f64,
    /// What the killed servers last reported of their commits (see `commits`).
    pub killed_commits: super::commits::Commits,
}

fn verdict_word(verdict: &Verdict) -> &'static str {
    if verdict.is_clean() {
        "PASS"
    } else {
        "FAIL"
    }
}

pub fn print_summary(run: &RunFacts, t: &Tally, verdict: &Verdict) {
    // One restart after each kill.
    let restarts = run.kills;
    println!(
        "crash[{engine}] seed={seed} kills={kills} restarts={restarts} | sends attempted={attempted} \
         acknowledged_2xx={acked} (first try {first_try}) lost_response_then_retried={lost_response} \
         (200 committed before the kill: {retried_200}, 201 not committed: {retried_201}; \
         retries lost again: {retry_lost_again}) stored={stored} | acks={acks} \
         (lost {acks_lost}) pulls={pulls} (lost {pulls_lost}) | lost={lost} duplicated={dup} \
         backwards={back} gaps={gaps} unknown={unknown} problems={problems} -> {word} \
         ({secs:.1} s)",
        engine = run.engine.name(),
        seed = run.seed,
        kills = run.kills,
        attempted = t.attempted,
        acked = t.acknowledged,
        first_try = t.first_try,
        lost_response = t.lost_response,
        retried_200 = t.retried_200,
        retried_201 = t.retried_201,
        retry_lost_again = t.retry_lost_again,
        stored = verdict.stored,
        acks = t.acks,
        acks_lost = t.acks_lost,
        pulls = t.pulls,
        pulls_lost = t.pulls_lost,
        lost = verdict.lost.len(),
        dup = verdict.duplicated.len(),
        back = verdict.backwards.len(),
        gaps = verdict.gaps.len(),
        unknown = verdict.unknown.len(),
        problems = verdict.problems.len(),
        word = verdict_word(verdict),
        secs = run.seconds,
    );
    println!("kill windows (ms): {:?}", run.windows_ms);
    let c = run.killed_commits;
    println!(
        "killed servers committed {} writes in {} commits ({:.2} writes per commit)",
        c.writes,
        c.commits,
        c.writes as f64 / c.commits.max(1) as f64
    );
}

/// Appends the run as one JSON line to the file CHORUS_RELIABILITY_LOG names, if it is set.
pub fn append_to_reliability_log(run: &RunFacts, t: &Tally, verdict: &Verdict) {
    let Ok(path) = std::env::var(RELIABILITY_LOG_VAR) else {
        return;
    };
    let record = json!({
        "test": "sigkill_during_traffic_loses_and_duplicates_nothing",
        "engine": run.engine.name(),
        "seed": run.seed,
        "kills": run.kills,
        "restarts": run.kills,
        "kill_windows_ms": run.windows_ms,
        "killed_servers_commits": run.killed_commits.commits,
        "killed_servers_writes": run.killed_commits.writes,
        "sends_attempted": t.attempted,
        "sends_acknowledged": t.acknowledged,
        "sends_acknowledged_first_try": t.first_try,
        "lost_response_then_retried": t.lost_response,
        "retried_200": t.retried_200,
        "retried_201": t.retried_201,
        "retries_lost_again": t.retry_lost_again,
        "messages_stored": verdict.stored,
        "acks": t.acks,
        "acks_lost": t.acks_lost,
        "pulls": t.pulls,
        "pulls_lost": t.pulls_lost,
        "lost": verdict.lost.len(),
        "duplicated": verdict.duplicated.len(),
        "backwards": verdict.backwards.len(),
        "gaps": verdict.gaps.len(),
        "unknown": verdict.unknown.len(),
        "problems": verdict.problems.len(),
        "verdict": verdict_word(verdict),
        "seconds": run.seconds,
    });
    append_record(&path, &record);
}

/// Appends `record` as one line to the file CHORUS_RELIABILITY_LOG names, if it is set.
pub fn append_if_asked(record: &serde_json::Value) {
    if let Ok(path) = std::env::var(RELIABILITY_LOG_VAR) {
        append_record(&path, record);
    }
}

fn append_record(path: &str, record: &serde_json::Value) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open CHORUS_RELIABILITY_LOG");
    writeln!(file, "{record}").expect("append to CHORUS_RELIABILITY_LOG");
}
