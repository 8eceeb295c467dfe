//! openapi.yaml and the server describe the same API: same routes, same served document.

use std::collections::BTreeSet;

use chorus::api::ROUTES;

use crate::helpers::spawn_app;
use crate::spec_check::spec;
use crate::support::engine::Engine;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

#[test]
fn every_route_is_in_the_spec_and_every_spec_operation_is_a_route() {
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.as_str().to_lowercase(), r.path.to_owned()))
        .collect();
    let documented: BTreeSet<(String, String)> = spec()["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| (m.to_string(), path.clone()))
        })
        .collect();

    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.yaml: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "operations in openapi.yaml the server lacks: {unserved:?}"
    );
}

#[test]
fn every_operation_documents_its_errors_and_has_an_operation_id() {
    for (path, item) in spec()["paths"].as_object().unwrap() {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let op = &item[*method];
            assert!(
                op["operationId"].is_string(),
                "{method} {path}: no operationId"
            );
            let public = op["security"].as_array().is_some_and(|s| s.is_empty());
            if !public {
                assert!(
                    op["responses"]["401"].is_object(),
                    "{method} {path}: 401 undocumented"
                );
                assert!(
                    op["responses"]["503"].is_object(),
                    "{method} {path}: 503 undocumented"
                );
                // A device's first request records it, so every authenticated route writes.
                assert!(
                    op["responses"]["507"].is_object(),
                    "{method} {path}: 507 undocumented"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_spec_is_the_checked_in_file() {
    let app = spawn_app(Engine::Sqlite).await;

    let response = reqwest::get(format!("{}/openapi.yaml", app.address))
        .await
        .unwrap();

    assert_eq!(response.status().as_u16(), 200);
    let served = response.text().await.unwrap();
    let on_disk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
    assert_eq!(served, on_disk);
}
