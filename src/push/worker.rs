//! The push job: every tick it builds notifications for the devices due one, and claims the
//! attempts due again (after a backoff, or because the instance holding them died); each
//! attempt runs in a task of its own, at most [`MAX_IN_FLIGHT`] at once, so a push service
//! that hangs holds that many connections and nothing more, and no request waits for it.
//! Everything it must not forget is in the database, so its memory is bounded by the
//! attempts in flight.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::build::{build_notification, BuildContext};
use super::config::PushConfig;
use super::delivery::{backoff, Attempt, Deliverer};
use crate::db::models::now_utc;
use crate::db::push::push_due::{due_devices, CandidateScan, Cutoffs};
use crate::db::push::push_outbox::{
    claim_attempt, due_attempts, retry_later, settle, Lease, Pending,
};
use crate::db::{Db, DbError};
use crate::metrics::PushMetrics;

/// Attempts one instance has in flight at once.
pub const MAX_IN_FLIGHT: usize = 64;

pub struct PushJob {
    db: Db,
    config: PushConfig,
    deliverer: Deliverer,
    metrics: PushMetrics,
    /// This instance's name in `lease_owner`.
    instance: String,
    slots: Arc<Semaphore>,
    /// Whether the last attempt failed: an outage is logged when it starts and when it ends,
    /// not once per attempt.
    failing: AtomicBool,
    /// Where the search for due devices goes on (used on Citus only).
    scan: std::sync::Mutex<CandidateScan>,
}

impl PushJob {
    pub fn new(
        db: Db,
        config: PushConfig,
        metrics: PushMetrics,
        instance: String,
    ) -> Result<PushJob, reqwest::Error> {
        Ok(PushJob {
            deliverer: Deliverer::new(&config)?,
            db,
            config,
            metrics,
            instance,
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            failing: AtomicBool::new(false),
            scan: std::sync::Mutex::default(),
        })
    }
}

/// Runs the job until the process ends; a round that fails (the database is away) is
/// logged and the next tick tries again.
pub async fn run(job: PushJob) {
    let job = Arc::new(job);
    let mut ticker = tokio::time::interval(job.config.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(e) = job.round().await {
            tracing::warn!(error = %e, "push round failed; retrying next tick");
        }
    }
}

impl PushJob {
    /// Builds and claims until nothing more is due or every slot is taken: a burst to many
    /// devices goes out as fast as the push service takes it, not one batch per tick.
    async fn round(self: &Arc<Self>) -> Result<(), DbError> {
        loop {
            let started = self.build_due().await? + self.claim_due().await?;
            if started == 0 || self.slots.available_permits() == 0 {
                return Ok(());
            }
        }
    }

    fn lease(&self, now: NaiveDateTime) -> Lease {
        Lease {
            owner: self.instance.clone(),
            until: now + chrono_of(self.config.lease()),
        }
    }

    /// Builds a notification for each device due one, as long as there are free slots, and
    /// starts its first attempt; says how many it started.
    async fn build_due(self: &Arc<Self>) -> Result<usize, DbError> {
        let free = self.slots.available_permits() as i64;
        if free == 0 {
            return Ok(0);
        }
        let now = now_utc();
        let cutoffs = Cutoffs {
            grace: now - chrono_of(self.config.grace),
            interval: now - chrono_of(self.config.interval),
        };
        let scan = self.scan.lock().map(|s| s.clone()).unwrap_or_default();
        let (devices, scan) = self
            .db
            .read(move |conn| {
                let mut scan = scan;
                let devices = due_devices(conn, cutoffs, free, &mut scan)?;
                Ok((devices, scan))
            })
            .await?;
        if let Ok(mut kept) = self.scan.lock() {
            *kept = scan;
        }
        let mut started = 0;
        for device_id in devices {
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                break;
            };
            let ctx = BuildContext {
                cutoffs,
                now,
                lease: self.lease(now),
                content: self.config.content,
            };
            let built = self
                .db
                .write(move |conn, _| build_notification(conn, &device_id, &ctx))
                .await?;
            if let Some(pending) = built {
                self.metrics.due.inc();
                self.spawn_attempt(pending, slot);
                started += 1;
            }
        }
        Ok(started)
    }

    /// Claims the attempts that are due and that no live instance holds, and starts them;
    /// says how many it started.
    async fn claim_due(self: &Arc<Self>) -> Result<usize, DbError> {
        let free = self.slots.available_permits() as i64;
        if free == 0 {
            return Ok(0);
        }
        let now = now_utc();
        let due = self
            .db
            .read(move |conn| due_attempts(conn, now, free))
            .await?;
        let lease = self.lease(now);
        let mut started = 0;
        for device_id in due {
            let lease = lease.clone();
            let claimed = self
                .db
                .write(move |conn, _| claim_attempt(conn, &device_id, &lease, now))
                .await?;
            let Some(pending) = claimed else { continue };
            // Only this task takes slots, and attempts only give theirs back: the slots
            // counted above are still free, so this does not wait.
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                break;
            };
            self.spawn_attempt(pending, slot);
            started += 1;
        }
        Ok(started)
    }

    fn spawn_attempt(self: &Arc<Self>, pending: Pending, slot: OwnedSemaphorePermit) {
        let job = self.clone();
        tokio::spawn(async move {
            let attempt = job.deliverer.attempt(&pending).await;
            if let Err(e) = job.record(&pending, attempt).await {
                // The lease runs out and the attempt is made again, with the same key.
                tracing::warn!(error = %e, device = %pending.device_id,
                    "cannot record a push attempt; it will be repeated");
            }
            drop(slot);
        });
    }

    /// Settles or reschedules the notification after an attempt.
    async fn record(&self, pending: &Pending, attempt: Attempt) -> Result<(), DbError> {
        let now = now_utc();
        let age = (now - pending.since).to_std().unwrap_or_default();
        let (device, key) = (pending.device_id.clone(), pending.key.clone());
        match attempt {
            Attempt::Delivered => {
                self.metrics.sent.inc();
                self.metrics.latency.observe(age.as_secs_f64());
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the push service takes notifications again");
                }
                self.db.write(move |c, _| settle(c, &device, &key)).await
            }
            Attempt::Refused(status) => {
                self.metrics.failed.inc();
                tracing::warn!(device = %device, status, key = %key,
                    "the push service refused a notification; it is dropped");
                self.db.write(move |c, _| settle(c, &device, &key)).await
            }
            Attempt::Failed(reason) => self.failed(pending, reason, age, now).await,
        }
    }

    async fn failed(
        &self,
        pending: &Pending,
        reason: String,
        age: Duration,
        now: NaiveDateTime,
    ) -> Result<(), DbError> {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(reason = %reason, "the push service is failing; retrying with backoff");
        }
        let (device, key) = (pending.device_id.clone(), pending.key.clone());
        if age >= self.config.retry_for {
            self.metrics.failed.inc();
            tracing::warn!(device = %device, key = %key, reason = %reason,
                "a notification was given up after CHORUS_PUSH_RETRY_FOR_SECS of failures");
            return self.db.write(move |c, _| settle(c, &device, &key)).await;
        }
        self.metrics.retried.inc();
        let next_at = now + chrono_of(backoff(pending.attempts, self.config.backoff_max));
        self.db
            .write(move |c, _| retry_later(c, &device, &key, next_at))
            .await
    }
}

/// A std duration as chrono's, at most ten years, so that no setting, however large, makes
/// a timestamp overflow.
fn chrono_of(d: Duration) -> chrono::Duration {
    const TEN_YEARS: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
    chrono::Duration::from_std(d.min(TEN_YEARS)).unwrap_or(chrono::Duration::zero())
}
