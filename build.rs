//! Compiles the PostgreSQL variants of the tests as ignored unless CHORUS_TEST_DATABASE_URL is
//! set, so that `cargo test` without it counts them as ignored instead of passed. CI sets it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(chorus_pg_tests)");
    println!("cargo::rerun-if-env-changed=CHORUS_TEST_DATABASE_URL");
    let pg_url = std::env::var_os("CHORUS_TEST_DATABASE_URL");
    if pg_url.is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=chorus_pg_tests");
    }
}
