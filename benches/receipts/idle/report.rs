//! The idle run's table: the server's memory and threads with the polls waiting, and how one
//! message woke its group.

use super::{IdleResult, IDLE_GROUP_SIZE};
use crate::measure::{f2, summarize};
use crate::support::proc_status::mib;

pub fn print(r: &IdleResult) {
    let growth = r.rss_waiting.saturating_sub(r.rss_before);
    let wake = summarize(&r.wake.iter().map(|w| w.max(0.0)).collect::<Vec<_>>());
    let first = r.wake.iter().copied().reduce(f64::min);
    if r.instances > 1 {
        println!(
            "### {}, {} server processes (RSS and threads summed over them)\n",
            r.engine.title(),
            r.instances
        );
    } else {
        println!("### {}\n", r.engine.title());
    }
    println!("| measure | value |");
    println!("|---|--:|");
    println!(
        "| server processes / bench processes holding the polls | {} / {} |",
        r.instances, r.holders
    );
    println!("| server RSS at start | {:.1} MiB |", mib(r.rss_start));
    println!(
        "| server RSS after set-up, before the polls | {:.1} MiB |",
        mib(r.rss_before)
    );
    println!(
        "| server RSS with {} polls waiting | **{:.1} MiB** |",
        r.opened,
        mib(r.rss_waiting)
    );
    println!(
        "| server RSS with the same polls waiting, {:.0} s after opening began | **{:.1} MiB** |",
        r.steady_secs,
        mib(r.rss_steady)
    );
    let peak = if r.instances > 1 {
        "sum of each server's peak RSS (VmHWM)"
    } else {
        "server peak RSS (VmHWM)"
    };
    println!("| {peak} | {:.1} MiB |", mib(r.hwm));
    let steady_growth = r.rss_steady.saturating_sub(r.rss_before);
    println!(
        "| growth per waiting poll (settled / later) | {:.1} / {:.1} KiB |",
        growth as f64 / r.opened.max(1) as f64,
        steady_growth as f64 / r.opened.max(1) as f64
    );
    println!(
        "| server threads (before / settled / later) | {} / {} / {} |",
        r.threads[0], r.threads[1], r.threads[2]
    );
    println!(
        "| time to open all polls | {:.1} s ({} of {} written) |",
        r.open_secs, r.opened, r.polls
    );
    println!(
        "| polls answered before the message (should be 0) | {} |",
        r.early.len()
    );
    println!("| send (HTTP) | {:.2} ms |", r.send_ms);
    println!(
        "| group's polls answered | {} of {IDLE_GROUP_SIZE} |",
        r.wake.len()
    );
    println!("| first answer after the send began | {} ms |", f2(first));
    println!(
        "| wake p50 / max over the group | {} / {} ms |",
        f2(wake.map(|s| s.p50)),
        f2(wake.map(|s| s.max))
    );
    println!(
        "| other polls answered meanwhile (should be 0) | {} |",
        r.others_woken
    );
    println!(
        "| holding processes' (client) RSS growth, once their polls were written | {:.1} MiB |",
        mib(r.client_rss_growth)
    );
    println!("| errors | {} |", r.errors);
    println!();
    if !r.early.is_empty() {
        let shown: Vec<&str> = r.early.iter().take(5).map(String::as_str).collect();
        println!("Early answers (first 5): {}.\n", shown.join("; "));
    }
}
