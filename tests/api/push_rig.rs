//! What the push tests share: a server with push on beside a push receiver on 127.0.0.1
//! (tests/support/push_receiver.rs), its timings, and the waits they make.
//!
//! Timing: grace periods and intervals are a few hundred milliseconds, and every wait is for
//! an outcome with a generous bound, never a race against a deadline.

use std::time::{Duration, Instant};

use chorus::config::Settings;
use serde_json::json;

use crate::helpers::{spawn_app_with, TestApp};
use crate::support::engine::Engine;
use crate::support::push_receiver::{Behaviour, PushReceiver, Received};

pub const PUSH_SECRET: &str = "push-secret-push-secret-push-secret-0123";
/// Longer than any outcome takes on a loaded two-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// How long a failing notification is retried (`CHORUS_PUSH_RETRY_FOR_SECS`): longer than any
/// outage a test makes, so none is given up unless the test says so.
pub const RETRY_FOR_SECS: u64 = 120;

#[derive(Clone, Copy)]
pub struct Timing {
    pub grace_ms: u64,
    pub interval_ms: u64,
    /// Long enough that the receiver in this process answers in time on a loaded machine, so
    /// that no attempt is repeated, except where the test wants timeouts.
    pub timeout_ms: u64,
}

pub const QUICK: Timing = Timing {
    grace_ms: 400,
    interval_ms: 800,
    timeout_ms: 3000,
};

impl Timing {
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms)
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
}

pub fn push_settings(settings: &mut Settings, url: &str, timing: Timing) {
    settings.push_url = Some(url.to_owned());
    settings.push_secret = Some(PUSH_SECRET.into());
    settings.push_grace_ms = timing.grace_ms;
    settings.push_interval_ms = timing.interval_ms;
    settings.push_timeout_ms = timing.timeout_ms;
    settings.push_backoff_max_ms = 400;
    settings.push_retry_for_secs = RETRY_FOR_SECS;
}

/// A server with push on, and the receiver it pushes to.
pub async fn rig(engine: Engine, timing: Timing) -> (TestApp, PushReceiver) {
    rig_with(engine, timing, |_| {}).await
}

/// [`rig`] with `adjust` applied to the settings last.
pub async fn rig_with(
    engine: Engine,
    timing: Timing,
    adjust: impl FnOnce(&mut Settings),
) -> (TestApp, PushReceiver) {
    let push = PushReceiver::start(PUSH_SECRET);
    let url = push.url.clone();
    let app = spawn_app_with(engine, move |s| {
        push_settings(s, &url, timing);
        adjust(s);
    })
    .await;
    (app, push)
}

/// Registers a push target for `caller` ("user#device"), as that device.
pub async fn register(app: &TestApp, caller: &str) {
    let device = caller.split_once('#').expect("user#device").1;
    let token = format!("token-of-{device}");
    let r = app
        .put_push_target(caller, device, json!({"platform": "apns", "token": token}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
}

/// A group of alice and bob whose phone has a push target.
pub async fn group_with_bobs_phone(app: &TestApp) -> i64 {
    let group = app.group_with("alice", &["bob"]).await;
    register(app, "bob#phone").await;
    group
}

pub fn taken(received: &[Received]) -> Vec<&Received> {
    received
        .iter()
        .filter(|r| r.answered == Behaviour::Take)
        .collect()
}

/// The value of a series on /metrics once `done` holds for it (it is counted just after the
/// push service answered, so a moment after the receiver saw the request); the last value
/// read when [`PATIENCE`] passes first, for the caller's assertion to show.
pub async fn metric_once(app: &TestApp, name: &str, done: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let value = app.metric(name).await.unwrap_or(0.0);
        if done(value) || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
