//! Building the application: database, migrations, keys, and the HTTP server on a listener.
//! Tests bind port 0 and read the port back.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpServer};
use secrecy::ExposeSecret;

use crate::api::{self, extract, AppState, LongPollSettings};
use crate::auth::{self, TokenKeys};
use crate::config::Settings;
use crate::cursor_folding;
use crate::db::acks::shared_acks::SharedAcks;
use crate::db::message::message_changes::ChangeWindows;
use crate::db::message::shared_sends::SharedSends;
use crate::db::{self, Db, DbSettings, Engine};
use crate::feeds::position::CursorSigner;
use crate::metrics::{self, Metrics};
use crate::push::{self, PushConfig, PushJob};
use crate::redact::redact_url;
use crate::retention::{self, RetentionPolicy};
use crate::wake_ups::listener::run_pg_listeners;
use crate::wake_ups::waiters::{WaiterLimits, Waiters};

pub struct Application {
    port: u16,
    server: Server,
    waiters: Arc<Waiters>,
}

impl Application {
    /// Opens and migrates the database, loads the keys, starts the background jobs and binds
    /// the listener; the server runs once [`Application::run_until_stopped`] is awaited.
    pub async fn build(settings: &Settings) -> anyhow::Result<Application> {
        // First: a wrong push setting is the operator's to fix before anything else happens.
        let push = PushConfig::from_settings(settings)?;
        let db_settings = settings.db_settings()?;
        let waiters = Waiters::new(WaiterLimits {
            per_user: settings.longpoll_max_per_user,
            total: settings.longpoll_max_total,
        });
        let db = open_database(&db_settings)?.waking(waiters.clone(), settings.announce_wakes);
        let (keys, cursors) = signing_keys(settings)?;
        let listener = TcpListener::bind(&settings.bind).map_err(|e| {
            anyhow::anyhow!("cannot listen on {} (CHORUS_BIND): {e}", settings.bind)
        })?;
        let port = listener.local_addr()?.port();
        let metrics = web::Data::new(Metrics::new()?);
        spawn_background_jobs(settings, &db_settings, &db, &waiters);
        if let Some(push) = push {
            spawn_push_job(push, &db, &metrics, &waiters)?;
        }
        let shared_sends = SharedSends::new(db.clone(), settings.send_batch as usize);
        let shared_acks = SharedAcks::new(db.clone(), settings.ack_batch as usize);
        let state = web::Data::new(AppState {
            db,
            shared_sends,
            shared_acks,
            keys,
            metrics,
            cursors,
            waiters: waiters.clone(),
            longpoll: LongPollSettings {
                retention_secs: settings.receipt_retention_secs,
            },
            change_windows: ChangeWindows {
                recall_secs: settings.recall_window_secs,
                edit_secs: settings.edit_window_secs,
            },
            max_group_members: settings.max_group_members,
        });
        let server = build_server(listener, state, settings)?;
        let base = local_base_url(&settings.bind, port);
        tracing::info!(address = %settings.bind, port, web_client = %format!("{base}/"),
            docs = %format!("{base}/docs"), spec = %format!("{base}/openapi.yaml"), "listening");
        Ok(Application {
            port,
            server,
            waiters,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Something that stops this server from elsewhere (tests; the signal handler).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            handle: self.server.handle(),
            waiters: self.waiters.clone(),
        }
    }

    /// Serves until SIGINT/SIGTERM (or a [`Stopper`]); waiting long-polls answer at once.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let stopper = self.stopper();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            stopper.stop().await;
        });
        self.server.await
    }
}

/// The pools, on a database whose migrations have been applied (by this process or another:
/// instances starting together take turns through an advisory lock).
fn open_database(db_settings: &DbSettings) -> anyhow::Result<Db> {
    tracing::info!(database = %redact_url(&db_settings.url), "connecting");
    let database = redact_url(&db_settings.url);
    let mut conn = db::connect_once(db_settings)
        .map_err(|e| anyhow::anyhow!(db::describe_open_failure(db_settings, &e)))?;
    let applied = db::run_migrations(&mut conn)
        .map_err(|e| anyhow::anyhow!("cannot apply the migrations to {database}: {e:#}"))?;
    drop(conn);
    if applied > 0 {
        tracing::info!(applied, "migrations applied");
    }
    Db::connect(db_settings)
        .map_err(|e| anyhow::anyhow!("cannot open the connection pool to {database}: {e}"))
}

/// The token keys and the long-poll cursor signer, both from one secret.
fn signing_keys(settings: &Settings) -> anyhow::Result<(TokenKeys, CursorSigner)> {
    let secret = auth::load_secret(settings.jwt_secret.as_ref(), &settings.data_dir)?;
    let keys = TokenKeys::new(secret.bytes.expose_secret(), secret.development)?;
    if secret.development {
        tracing::warn!(
            data_dir = %settings.data_dir.display(),
            "development mode: no CHORUS_JWT_SECRET set, using a generated secret from the data directory"
        );
    }
    Ok((keys, CursorSigner::new(secret.bytes.expose_secret())))
}

/// The PostgreSQL notification listener (other instances' wake-ups) and folding job, and the
/// retention job.
fn spawn_background_jobs(
    settings: &Settings,
    db_settings: &DbSettings,
    db: &Db,
    waiters: &Arc<Waiters>,
) {
    if db.engine() == Engine::Postgres {
        tokio::spawn(run_pg_listeners(db_settings.url.clone(), waiters.clone()));
        tokio::spawn(cursor_folding::run(db.clone()));
    }
    let policy = RetentionPolicy {
        receipt_changes_secs: settings.receipt_retention_secs,
        devices_secs: settings.device_retention_secs,
        messages_secs: settings.message_retention_secs,
    };
    tokio::spawn(retention::run(
        db.clone(),
        policy,
        Duration::from_secs(settings.retention_interval_secs),
    ));
}

/// The job that wakes devices through the push service.
fn spawn_push_job(
    config: PushConfig,
    db: &Db,
    metrics: &Metrics,
    waiters: &Waiters,
) -> anyhow::Result<()> {
    tracing::info!(url = %redact_url(config.url.as_str()), "push notifications on");
    let instance = waiters.instance_id().to_owned();
    let job = PushJob::new(db.clone(), config, metrics.push.clone(), instance)
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client for CHORUS_PUSH_URL: {e}"))?;
    tokio::spawn(push::run(job));
    Ok(())
}

/// The token keys; without a configured secret, development keys from the data directory.
pub fn load_keys(settings: &Settings) -> anyhow::Result<TokenKeys> {
    let secret = auth::load_secret(settings.jwt_secret.as_ref(), &settings.data_dir)?;
    Ok(TokenKeys::new(
        secret.bytes.expose_secret(),
        secret.development,
    )?)
}

#[derive(Clone)]
pub struct Stopper {
    handle: ServerHandle,
    waiters: Arc<Waiters>,
}

impl Stopper {
    /// Answers waiting long-polls, then stops accepting and lets in-flight requests finish.
    pub async fn stop(self) {
        self.waiters.begin_shutdown();
        self.handle.stop(true).await;
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn build_server(
    listener: TcpListener,
    state: web::Data<AppState>,
    settings: &Settings,
) -> std::io::Result<Server> {
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(state.metrics.clone())
            .app_data(extract::json_config())
            .app_data(extract::query_config())
            .app_data(extract::path_config())
            .wrap(actix_web::middleware::from_fn(metrics::observe))
            // Outermost, so that it runs first, while the request head has no other owner.
            .wrap(actix_web::middleware::from_fn(
                api::compact_headers::compact,
            ))
            .configure(api::configure)
            .default_service(web::to(extract::route_not_found))
    })
    .keep_alive(Duration::from_secs(settings.keep_alive_secs))
    // A client that closes its connection has given up on the answer. actix-web keeps
    // serving a half-closed connection by default, so a long-poll whose client went away
    // would hold its waiter slot until `timeout_s`; refusing half-closed connections drops
    // the request (and its slot) as soon as the end of the stream is read. No HTTP client
    // we serve half-closes a connection and then waits for the answer.
    .h1_allow_half_closed(false)
    .shutdown_timeout(5)
    .disable_signals()
    .listen(listener)?;
    if settings.workers > 0 {
        server = server.workers(settings.workers);
    }
    Ok(server.run())
}

/// Where a browser on this machine reaches a server bound to `bind` on `port`: an address
/// that means every interface is reached at the loopback one.
fn local_base_url(bind: &str, port: u16) -> String {
    let host = bind.rsplit_once(':').map_or(bind, |(host, _)| host);
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1",
        "[::]" => "[::1]",
        named => named,
    };
    format!("http://{host}:{port}")
}

#[cfg(test)]
mod tests {
    use super::local_base_url;

    #[test]
    fn a_server_on_every_interface_is_reached_at_the_loopback_address() {
        assert_eq!(
            local_base_url("0.0.0.0:8080", 8080),
            "http://127.0.0.1:8080"
        );
        assert_eq!(local_base_url("[::]:0", 4100), "http://[::1]:4100");
        assert_eq!(local_base_url("127.0.0.1:0", 4100), "http://127.0.0.1:4100");
        assert_eq!(local_base_url("chat.local:80", 80), "http://chat.local:80");
    }
}
