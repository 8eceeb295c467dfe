//! Building the application: database, migrations, keys, and the HTTP server on a listener.
//! Tests bind port 0 and read the port back.

use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};

use crate::api::{self, extract, AppState};
use crate::auth::{self, TokenKeys};
use crate::config::{redact_url, Settings};
use crate::db::{self, Db};

pub struct Application {
    port: u16,
    server: Server,
    state: web::Data<AppState>,
}

impl Application {
    pub async fn build(settings: &Settings) -> anyhow::Result<Application> {
        let db_settings = settings.db_settings()?;
        tracing::info!(database = %redact_url(&db_settings.url), "connecting");
        let mut conn = db::connect_once(&db_settings)
            .map_err(|e| anyhow::anyhow!("cannot open the database: {e}"))?;
        let applied = db::run_migrations(&mut conn)?;
        drop(conn);
        if applied > 0 {
            tracing::info!(applied, "migrations applied");
        }
        let db = Db::connect(&db_settings)?;
        let keys = load_keys(settings)?;
        if keys.development {
            tracing::warn!(
                data_dir = %settings.data_dir.display(),
                "development mode: no CHORUS_JWT_SECRET set, using a generated secret from the data directory"
            );
        }
        let listener = TcpListener::bind(&settings.bind)?;
        let port = listener.local_addr()?.port();
        let state = web::Data::new(AppState { db, keys });
        let server = build_server(listener, state.clone(), settings.workers)?;
        tracing::info!(address = %settings.bind, port, "listening");
        Ok(Application {
            port,
            server,
            state,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn state(&self) -> web::Data<AppState> {
        self.state.clone()
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

/// The token keys; without a configured secret, development keys from the data directory.
pub fn load_keys(settings: &Settings) -> anyhow::Result<TokenKeys> {
    let (secret, development) =
        auth::load_secret(settings.jwt_secret.as_deref(), &settings.data_dir)?;
    Ok(TokenKeys::new(&secret, development)?)
}

fn build_server(
    listener: TcpListener,
    state: web::Data<AppState>,
    workers: usize,
) -> std::io::Result<Server> {
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(extract::json_config())
            .app_data(extract::query_config())
            .app_data(extract::path_config())
            .configure(api::configure)
            .default_service(web::to(extract::route_not_found))
    })
    .shutdown_timeout(5)
    .listen(listener)?;
    if workers > 0 {
        server = server.workers(workers);
    }
    Ok(server.run())
}
