//! The storm's tables: latency, requests per message, rows written per message, CPU.

use super::run::SeedResult;
use super::{NAIVE_ROWS_PER_MESSAGE, SEED_MEMBERS, SEED_MESSAGES, SEED_ONLINE};
use crate::measure::{f2, Summary};
use crate::support::machine::Machine;

pub fn print_all(results: &[SeedResult]) {
    print_latencies(results);
    print_requests(results);
    print_rows(results);
    print_cpu(results);
}

fn print_latencies(results: &[SeedResult]) {
    println!(
        "| engine | sends | sent | sends/s | send p50 ms | acks | acks/s | ack→wake p50 ms | \
         p99 ms | max ms | sender first / missed | members done | errors |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    for r in results {
        let wake = |f: fn(&Summary) -> f64| f2(r.wake.as_ref().map(f));
        println!(
            "| {} | {} | {}/{SEED_MESSAGES} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} / {} | {}/{SEED_ONLINE} | {} |",
            r.engine.title(),
            r.pacing.text(),
            r.sends,
            r.sends as f64 / r.send_secs.max(1e-9),
            f2(r.send.map(|s| s.p50)),
            r.acks,
            r.acks as f64 / r.storm_secs.max(1e-9),
            wake(|s| s.p50),
            wake(|s| s.p99),
            wake(|s| s.max),
            r.wake_early,
            r.wake_missed,
            r.members_done,
            r.errors,
        );
    }
    println!(
        "\nsends/s: messages over the time from the first send to the last send's response; \
         acks/s: acks that moved a cursor over the time from the first send to the last ack.\n"
    );
}

fn print_requests(results: &[SeedResult]) {
    println!("HTTP requests made by all clients during the storm, per message sent:\n");
    println!(
        "| engine | sends | total | per message | sends | `/v1/sync` polls | pulls | acks | `/v1/receipts` polls |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for r in results {
        let n = r.sends.max(1) as f64;
        let per = |v: u64| format!("{:.2}", v as f64 / n);
        println!(
            "| {} | {} | {} | **{}** | {} | {} | {} | {} | {} |",
            r.engine.title(),
            r.pacing.text(),
            r.requests,
            per(r.requests),
            per(r.kinds[0]),
            per(r.kinds[1]),
            per(r.kinds[2]),
            per(r.kinds[3]),
            per(r.kinds[4]),
        );
    }
}

fn print_rows(results: &[SeedResult]) {
    println!(
        "\nDatabase rows written per message (row counts before and after the storm; an ack that \
         moves a cursor updates one membership row and inserts one `receipt_events` row, so \
         moved cursors = `receipt_events` growth):\n"
    );
    println!(
        "| engine | sends | `group_msgs` | `receipt_events` | membership rows updated by acks | \
         **total** | the seeds' design | PostgreSQL's own counters, all rows written |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|---|");
    for r in results {
        let n = r.sends.max(1) as f64;
        let total = r.rows.msgs + 2 * r.rows.events;
        let pg = r.pg_rows.as_ref().map_or("–".into(), |rows| {
            let all: i64 = rows.values().map(|(i, u)| i + u).sum();
            let detail: Vec<String> = rows
                .iter()
                .map(|(t, (i, u))| format!("`{t}` +{i} ins / {u} upd"))
                .collect();
            format!("{:.1} per message ({})", all as f64 / n, detail.join(", "))
        });
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | **{:.2}** | {NAIVE_ROWS_PER_MESSAGE} | {pg} |",
            r.engine.title(),
            r.pacing.text(),
            r.rows.msgs as f64 / n,
            r.rows.events as f64 / n,
            r.rows.events as f64 / n,
            total as f64 / n,
        );
    }
    println!(
        "\nThe seeds' design: 1 message + {} per-recipient rows + {SEED_ONLINE} ack-flag updates \
         = {NAIVE_ROWS_PER_MESSAGE} rows per message. Besides the rows above, each send also \
         updates the group's `last_msg_id` and the sender's own cursors (in PostgreSQL's \
         counters). Membership rows added during the storm: {}.\n",
        SEED_MEMBERS - 1,
        results
            .iter()
            .map(|r| r.rows.members.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
}

fn print_cpu(results: &[SeedResult]) {
    println!(
        "CPU seconds used during the storm (from just before the polls opened until every task ended), from \
         `/proc/self/task/*/stat` and the bench database's PostgreSQL backends; the machine \
         has {} cores, so at most {}× the wall time is available — to everything running on \
         it, other people's work included:\n",
        cores(),
        cores()
    );
    println!(
        "| engine | sends | wall s | clients | server HTTP workers | server database calls | \
         server other | PostgreSQL backends | sum / (cores × wall) |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for r in results {
        let sum: f64 = r.cpu.iter().sum();
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% |",
            r.engine.title(),
            r.pacing.text(),
            r.wall,
            r.cpu[0],
            r.cpu[1],
            r.cpu[2],
            r.cpu[3],
            r.cpu[4],
            100.0 * sum / (cores() as f64 * r.wall.max(1e-9)),
        );
    }
    println!();
}

/// Cores the machine has (at least 1): the CPU table's share is of cores × wall time.
fn cores() -> usize {
    Machine::read().cores.max(1)
}
