//! Compiles the PostgreSQL variants of the tests as ignored unless CHORUS_TEST_DATABASE_URL is
//! set, so that `cargo test` without it counts them as ignored instead of passed. CI sets it.
//! Also rebuilds the crate when a migration is added: the embedded migrations name their files,
//! and a new folder is not among them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(chorus_pg_tests)");
    println!("cargo::rerun-if-env-changed=CHORUS_TEST_DATABASE_URL");
    println!("cargo::rerun-if-changed=migrations");
    let pg_url = std::env::var_os("CHORUS_TEST_DATABASE_URL");
    if pg_url.is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=chorus_pg_tests");
    }
}
