//! The soak's figures (printed, and appended as one JSON line to CHORUS_RELIABILITY_LOG) and
//! the assertions on them.

use serde_json::json;

use super::owed::Owed;
use super::run::{Cast, RunFacts};
use super::sampler::{growth, table};
use crate::sigkill::report::{append_if_asked, Tally};
use crate::sigkill::verdict::Verdict;
use crate::support::machine::Machine;
use crate::support::proc_status::mib;
use crate::support::request_log::RequestLog;

pub struct Findings {
    pub verdict: Verdict,
    pub owed: Owed,
}

/// The table's rows: one per minute, or per tenth of a run shorter than ten minutes.
fn bucket_secs(facts: &RunFacts) -> f64 {
    if facts.secs >= 600 {
        60.0
    } else {
        (facts.secs as f64 / 10.0).max(1.0)
    }
}

fn poller_problems(cast: &Cast) -> Vec<String> {
    let sync = cast
        .sync
        .iter()
        .flat_map(|p| p.tally.problems.iter().cloned());
    let receipts = cast
        .receipts
        .iter()
        .flat_map(|p| p.tally.problems.iter().cloned());
    let churn = cast.churn.problems.iter().cloned();
    sync.chain(receipts).chain(churn).collect()
}

/// System lines found in the churn group, and the membership changes that took effect.
fn system_lines(findings: &Findings, cast: &Cast) -> (usize, usize) {
    let lines = findings.verdict.system_lines.get(&cast.churn.group_id);
    (lines.copied().unwrap_or(0), cast.churn.changes.len())
}

pub fn print(facts: &RunFacts, t: &Tally, findings: &Findings, cast: &Cast, log: &RequestLog) {
    let machine = Machine::read();
    let v = &findings.verdict;
    let o = &findings.owed;
    println!(
        "soak[{}] {} s, seed {}, {} instance(s), {} cores, load {} | kills {} restarts {} \
         (restart ms {:?}) database restarts {} (down {} ms, ready again {} ms)",
        facts.engine.name(),
        facts.secs,
        facts.seed,
        facts.instances,
        machine.cores,
        machine.load_average,
        facts.faults.kills,
        facts.faults.restarts,
        facts.restart_ms,
        facts.faults.database_restarts,
        facts.faults.database_down_ms,
        facts.faults.ready_again_ms,
    );
    println!(
        "sends attempted {} acknowledged {} (first try {}, lost then retried {}, 503 then \
         retried {}, retries: 200 {} / 201 {}) stored {} | acks {} pulls {} | lost {} \
         duplicated {} gaps {} backwards {} unknown {} problems {}",
        t.attempted,
        t.acknowledged,
        t.first_try,
        t.lost_response,
        t.first_try_unavailable,
        t.retried_200,
        t.retried_201,
        v.stored,
        t.acks,
        t.pulls,
        v.lost.len(),
        v.duplicated.len(),
        v.gaps.len(),
        v.backwards.len(),
        v.unknown.len(),
        v.problems.len() + poller_problems(cast).len(),
    );
    let (lines, changes) = system_lines(findings, cast);
    println!(
        "owed: {} messages to /v1/sync pollers ({} sent before a poller started), {} \
         membership changes; receipts: {} messages checked, {} reported; missed {} | churn: \
         {} changes, {} system lines",
        o.messages_owed,
        o.messages_not_owed,
        o.membership_owed,
        o.receipts_checked,
        o.receipts_reported,
        o.missed.len(),
        changes,
        lines,
    );
    println!("| kind | requests | 2xx | 503 | other | lost | slowest | over bound |");
    println!("|---|---|---|---|---|---|---|---|");
    for (kind, k) in log.tallies() {
        println!(
            "| {kind} | {} | {} | {} | {} | {} | {:.2} s | {} |",
            k.requests,
            k.answered_2xx,
            k.unavailable,
            k.other_status,
            k.lost,
            k.slowest.as_secs_f64(),
            k.over_bound
        );
    }
    println!(
        "{}",
        table(&facts.samples, facts.instances, bucket_secs(facts))
    );
    for instance in 0..facts.instances {
        if let Some((first, last, lived)) = growth(&facts.samples, instance) {
            println!(
                "instance {instance}: longest-lived process {lived:.0} s, RSS median first \
                 third {:.1} MiB, last third {:.1} MiB",
                mib(first),
                mib(last)
            );
        }
    }
    for (at, event) in &facts.faults.events {
        println!("  {at:7.1} s  {event}");
    }
}

pub fn append_to_reliability_log(
    facts: &RunFacts,
    t: &Tally,
    findings: &Findings,
    cast: &Cast,
    log: &RequestLog,
) {
    let kinds: serde_json::Map<String, serde_json::Value> = (log.tallies().into_iter())
        .map(|(kind, k)| {
            let value = json!({
                "requests": k.requests, "ok": k.answered_2xx, "unavailable": k.unavailable,
                "other": k.other_status, "lost": k.lost,
                "slowest_s": k.slowest.as_secs_f64(), "over_bound": k.over_bound,
            });
            (kind.to_owned(), value)
        })
        .collect();
    let samples: Vec<_> = (facts.samples.iter())
        .map(|s| json!([s.secs, s.instance, s.pid, s.rss_kib, s.sockets]))
        .collect();
    let (lines, changes) = system_lines(findings, cast);
    let v = &findings.verdict;
    let o = &findings.owed;
    append_if_asked(&json!({
        "test": "soak_across_instances_keeps_every_promise",
        "engine": facts.engine.name(), "seed": facts.seed, "secs": facts.secs,
        "instances": facts.instances, "load_average": Machine::read().load_average,
        "kills": facts.faults.kills, "restarts": facts.faults.restarts,
        "restart_ms": facts.restart_ms, "database_restarts": facts.faults.database_restarts,
        "sends_attempted": t.attempted, "sends_acknowledged": t.acknowledged,
        "first_try": t.first_try, "lost_response": t.lost_response,
        "first_try_unavailable": t.first_try_unavailable,
        "retried_200": t.retried_200, "retried_201": t.retried_201,
        "acks": t.acks, "pulls": t.pulls, "stored": v.stored,
        "lost": v.lost.len(), "duplicated": v.duplicated.len(), "gaps": v.gaps.len(),
        "backwards": v.backwards.len(), "unknown": v.unknown.len(),
        "messages_owed": o.messages_owed, "membership_owed": o.membership_owed,
        "receipts_checked": o.receipts_checked, "missed": o.missed.len(),
        "churn_changes": changes, "system_lines": lines,
        "requests": kinds, "samples": samples, "seconds": facts.seconds,
    }));
}

pub fn assert_promises_kept(
    facts: &RunFacts,
    t: &Tally,
    findings: &Findings,
    cast: &Cast,
    log: &RequestLog,
    server_logs: &str,
) {
    let v = &findings.verdict;
    assert!(
        !server_logs.contains("panicked"),
        "a server panicked:\n{server_logs}"
    );
    assert!(
        v.is_clean(),
        "soak on {}: lost {:?}, duplicated {:?}, gaps {:?}, backwards {:?}, unknown {:?}, \
         problems {:?}",
        facts.engine.name(),
        first(&v.lost),
        first(&v.duplicated),
        first(&v.gaps),
        first(&v.backwards),
        first(&v.unknown),
        first(&v.problems),
    );
    let problems = poller_problems(cast);
    assert!(problems.is_empty(), "{:?}", first(&problems));
    let missed = &findings.owed.missed;
    assert!(
        missed.is_empty(),
        "{} owed changes missed: {:?}",
        missed.len(),
        first(missed)
    );
    let (lines, changes) = system_lines(findings, cast);
    assert_eq!(lines, changes, "one system line per membership change");
    assert_eq!(
        t.lost_response + t.first_try_unavailable,
        t.retried_200 + t.retried_201,
        "every send not answered 2xx at first is answered 2xx by exactly one retry"
    );
    assert_eq!(t.acknowledged, t.first_try + t.retried_200 + t.retried_201);
    let over = log.over_bound();
    assert!(
        over.is_empty(),
        "requests past their bound: {over:#?}\nthe servers' warnings and errors:\n{}",
        warnings_and_errors(server_logs)
    );
    assert!(facts.faults.kills >= 1, "the run killed nothing");
    let database_restarts = usize::from(facts.plan.database_restart_at.is_some());
    assert_eq!(facts.faults.database_restarts, database_restarts);
    assert!(t.acks > 0 && t.pulls > 0 && findings.owed.messages_owed > 0);
    for instance in 0..facts.instances {
        let lived = growth(&facts.samples, instance);
        if let Some((first_third, last_third, _)) =
            lived.filter(|&(_, _, secs)| secs >= super::GROWTH_MIN_LIFE_SECS)
        {
            assert!(
                last_third as f64 <= first_third as f64 * super::GROWTH_FACTOR,
                "instance {instance}'s RSS grew from {first_third} KiB to {last_third} KiB"
            );
        }
    }
}

/// The servers' WARN and ERROR lines, the last 80 of them: what a slow request may have met.
fn warnings_and_errors(server_logs: &str) -> String {
    let lines: Vec<&str> = server_logs
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

fn first<T: std::fmt::Debug>(items: &[T]) -> Vec<&T> {
    items.iter().take(5).collect()
}
