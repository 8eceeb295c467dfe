//! Prometheus metrics, served at `/metrics`, and the middleware that observes every request:
//! it counts and times it by route and status, gives it a request id (logged on every line
//! of its span and returned as `x-request-id`), and logs one line when it ends.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};
use tracing::Instrument;

pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    pub messages_sent: IntCounter,
    pub acks: IntCounter,
    pub push: PushMetrics,
    waiting_polls: IntGauge,
    pool_in_use: IntGauge,
    pool_idle: IntGauge,
    calls_waiting: IntGauge,
    db_commits: IntCounter,
    db_writes: IntCounter,
    /// Held while the totals kept elsewhere are copied in and read out: two renders at once
    /// would each add the same difference.
    catching_up: std::sync::Mutex<()>,
}

/// What `/metrics` reads from elsewhere at the moment it is rendered.
pub struct Readings {
    pub waiting_polls: usize,
    /// Database connections (in use, idle).
    pub pool: (u32, u32),
    /// Database calls waiting for a connection (and SQLite writes for the writer lane).
    pub calls_waiting: usize,
    /// Write transactions committed, and the writes they carried.
    pub commits: (u64, u64),
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("chorus".into()), None)?;
        let (requests, latency) = http_metrics(&registry)?;
        let counter = |name, help| registered(&registry, IntCounter::new(name, help)?);
        let gauge = |name, help| registered(&registry, IntGauge::new(name, help)?);
        Ok(Metrics {
            requests,
            latency,
            messages_sent: counter(
                "messages_sent_total",
                "Messages stored (not counting idempotent repeats)",
            )?,
            acks: counter("acks_total", "Acks that moved a member's cursor")?,
            push: PushMetrics::new(&registry)?,
            waiting_polls: gauge("longpolls_waiting", "Long-polls currently waiting")?,
            pool_in_use: gauge("db_connections_in_use", "Database connections checked out")?,
            pool_idle: gauge(
                "db_connections_idle",
                "Database connections idle in the pool",
            )?,
            calls_waiting: gauge(
                "db_calls_waiting",
                "Database calls waiting for a connection (SQLite: and writes waiting for the \
                 writer)",
            )?,
            db_commits: counter(
                "db_commits_total",
                "Write transactions committed (one disk flush each)",
            )?,
            db_writes: counter(
                "db_writes_total",
                "Writes committed; above db_commits_total when SQLite grouped several into one \
                 commit",
            )?,
            catching_up: std::sync::Mutex::new(()),
            registry,
        })
    }

    /// The text exposition, with the gauges read now.
    pub fn render(&self, now: Readings) -> String {
        self.waiting_polls.set(now.waiting_polls as i64);
        self.pool_in_use.set(i64::from(now.pool.0));
        self.pool_idle.set(i64::from(now.pool.1));
        self.calls_waiting.set(now.calls_waiting as i64);
        // The database layer keeps these totals; the counters catch up with them.
        // Held through the gathering too, so one rendering never reads the pair while
        // another is between its two updates.
        let one_at_a_time = self
            .catching_up
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        catch_up(&self.db_commits, now.commits.0);
        catch_up(&self.db_writes, now.commits.1);
        let gathered = self.registry.gather();
        drop(one_at_a_time);
        let mut buffer = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&gathered, &mut buffer) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

/// Requests by route, method and status, and the time to answer them, registered.
fn http_metrics(registry: &Registry) -> Result<(IntCounterVec, HistogramVec), prometheus::Error> {
    let requests = IntCounterVec::new(
        Opts::new(
            "http_requests_total",
            "HTTP requests by route, method and status",
        ),
        &["route", "method", "status"],
    )?;
    let latency = HistogramVec::new(
        HistogramOpts::new("http_request_duration_seconds", "Time to answer, by route").buckets(
            vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ],
        ),
        &["route", "method"],
    )?;
    Ok((
        registered(registry, requests)?,
        registered(registry, latency)?,
    ))
}

/// `metric`, registered in `registry`.
fn registered<M>(registry: &Registry, metric: M) -> Result<M, prometheus::Error>
where
    M: prometheus::core::Collector + Clone + 'static,
{
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

fn catch_up(counter: &IntCounter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

/// What the push job did (cheap to clone: the job holds its own copy).
#[derive(Clone)]
pub struct PushMetrics {
    /// Notifications built because a device was due one.
    pub due: IntCounter,
    /// Notifications the push service took.
    pub sent: IntCounter,
    /// Attempts that failed and will be retried.
    pub retried: IntCounter,
    /// Notifications given up: refused, or still failing when their retry time ran out.
    pub failed: IntCounter,
    /// From building a notification to the push service taking it.
    pub latency: Histogram,
}

impl PushMetrics {
    fn new(registry: &Registry) -> Result<PushMetrics, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "push_delivery_seconds",
                "From building a notification to the push service taking it",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ]),
        )?;
        registry.register(Box::new(latency.clone()))?;
        Ok(PushMetrics {
            due: counter("push_due_total", "Notifications built for devices due one")?,
            sent: counter("push_sent_total", "Notifications the push service took")?,
            retried: counter(
                "push_retried_total",
                "Push attempts that failed and will be retried",
            )?,
            failed: counter(
                "push_failed_total",
                "Notifications given up (refused, or out of retry time)",
            )?,
            latency,
        })
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Observes one request (see the module doc). Routes are labelled by their template, so ids
/// in paths do not multiply the series.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(str::to_owned)
        .unwrap_or_else(new_request_id);
    let method = method_label(req.method());
    let span = tracing::info_span!(
        "request",
        id = %request_id,
        method = %req.method(),
        path = %req.path()
    );
    let metrics = req.app_data::<actix_web::web::Data<Metrics>>().cloned();
    let mut response = next.call(req).instrument(span.clone()).await?;
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".into());
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    if let Some(metrics) = metrics {
        metrics
            .requests
            .with_label_values(&[&route, method, &status.to_string()])
            .inc();
        metrics
            .latency
            .with_label_values(&[&route, method])
            .observe(elapsed.as_secs_f64());
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    span.in_scope(|| {
        tracing::info!(status, route = %route, elapsed_ms = elapsed.as_secs_f64() * 1000.0, "answered")
    });
    Ok(response)
}

/// The method as a metrics label, from a closed set: a client may send any token as a method,
/// and a label value per made-up method would grow `/metrics` and memory without bound.
/// (Routes are closed already: a path no route matches is `unmatched`.)
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    const KNOWN: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::PATCH, "PATCH"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    KNOWN
        .iter()
        .find(|(known, _)| known == method)
        .map_or("other", |(_, label)| label)
}

fn new_request_id() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}
