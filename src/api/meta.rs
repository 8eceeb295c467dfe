//! Service endpoints: the API description and health checks.

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::error::ApiError;
use super::AppState;
use crate::db;
use crate::metrics::Readings;

/// The OpenAPI document, compiled into the binary so the served spec is the tested one.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

pub async fn openapi_spec() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/yaml")
        .body(OPENAPI_YAML)
}

/// Prometheus metrics in the text exposition format.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let body = state.metrics.render(Readings {
        waiting_polls: state.waiters.waiting(),
        pool: state.db.pool_state(),
        calls_waiting: state.db.calls_waiting(),
        commits: state.db.commit_counts(),
    });
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body)
}

/// The process is up and serving HTTP.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The database answers and its schema is current: safe to route traffic here.
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ready = state.db.read(|conn| Ok(db::is_ready(conn))).await;
    match ready {
        Ok(true) => Ok(HttpResponse::Ok().json(json!({"status": "ready"}))),
        _ => Err(ApiError::NotReady(
            "the database is unreachable or not migrated".into(),
        )),
    }
}
