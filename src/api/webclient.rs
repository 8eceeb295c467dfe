//! The reference web client: static files compiled into the binary, so it runs with no build
//! step and no files beside the executable.

use actix_web::{http::header, web, HttpResponse};

use super::error::ApiError;

const INDEX_HTML: &str = include_str!("../../web/index.html");
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../web/app.css"),
    ),
];

pub async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(INDEX_HTML)
}

pub async fn asset(path: web::Path<(String,)>) -> Result<HttpResponse, ApiError> {
    let name = path.into_inner().0;
    let (_, content_type, body) = ASSETS
        .iter()
        .find(|(file, _, _)| *file == name)
        .ok_or_else(|| ApiError::NotFound(format!("no asset named {name}")))?;
    Ok(HttpResponse::Ok()
        .content_type(*content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(*body))
}
