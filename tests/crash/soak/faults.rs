//! The soak's faults on a schedule of their own, independent of the traffic: an instance
//! SIGKILLed and restarted every `kill_every` (in turn among those that may be killed), and on
//! PostgreSQL the database itself stopped and started once, halfway.

use std::time::{Duration, Instant};

use super::fleet::Fleet;
use crate::support::private_cluster::PrivateCluster;

pub struct FaultPlan {
    pub kill_every: Duration,
    /// Instances that get killed; on PostgreSQL one instance lives through the whole run, so
    /// its memory can be followed from start to end.
    pub killable: Vec<usize>,
    /// When to restart PostgreSQL, from the start of the traffic.
    pub database_restart_at: Option<Duration>,
}

#[derive(Default)]
pub struct FaultLog {
    pub kills: usize,
    pub restarts: usize,
    pub database_restarts: usize,
    /// How long PostgreSQL was down, and until every instance was ready again.
    pub database_down_ms: u64,
    pub ready_again_ms: u64,
    /// (seconds into the run, what happened), for the report.
    pub events: Vec<(f64, String)>,
}

/// Runs the plan until `until`, then returns with every instance up and the database running.
pub async fn run_faults(
    fleet: &mut Fleet,
    cluster: Option<&PrivateCluster>,
    plan: &FaultPlan,
    started: Instant,
    until: Instant,
) -> FaultLog {
    let mut log = FaultLog::default();
    let mut next_kill = started + plan.kill_every;
    let mut database_restart = plan.database_restart_at.map(|at| started + at);
    loop {
        let next = database_restart.map_or(next_kill, |at| at.min(next_kill));
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next.into()).await;
        if database_restart == Some(next) {
            database_restart = None;
            if let Some(cluster) = cluster {
                restart_database(cluster, fleet, &mut log, started).await;
            }
            continue;
        }
        let slot = plan.killable[log.kills % plan.killable.len()];
        let at = started.elapsed().as_secs_f64();
        fleet.kill_and_restart(slot).await;
        log.kills += 1;
        log.restarts += 1;
        log.events
            .push((at, format!("SIGKILL instance {slot}, restarted")));
        next_kill += plan.kill_every;
    }
    tokio::time::sleep_until(until.into()).await;
    log
}

/// A fast shutdown (PostgreSQL ends every connection), two seconds down, a start; then waits
/// for every instance to pass /readyz again without being restarted.
async fn restart_database(
    cluster: &PrivateCluster,
    fleet: &Fleet,
    log: &mut FaultLog,
    started: Instant,
) {
    let at = started.elapsed().as_secs_f64();
    let down = Instant::now();
    // pg_ctl blocks; the runtime's other worker keeps the clients going meanwhile.
    tokio::task::block_in_place(|| cluster.stop());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let up = tokio::task::block_in_place(|| cluster.start());
    assert!(up, "the private PostgreSQL cluster starts again");
    log.database_down_ms = down.elapsed().as_millis() as u64;
    let ready = fleet.wait_ready(Duration::from_secs(30)).await;
    assert!(
        ready,
        "every instance is ready again after the database restart"
    );
    log.ready_again_ms = down.elapsed().as_millis() as u64;
    log.database_restarts += 1;
    log.events
        .push((at, "PostgreSQL stopped (fast) and started".to_owned()));
}
