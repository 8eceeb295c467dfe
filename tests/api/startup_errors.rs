//! A server that cannot start says why in one line: the path or setting at fault and the
//! operating system's reason, with no backtrace (also with `RUST_BACKTRACE=1` set).
//!
//! These start the real binary on SQLite, whose files are what a data directory holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::child_server::{test_binary, ChildConfig, ChildServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_data_dir_is_named_with_the_reason_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (dir, how) = unwritable_dir(tmp.path());
    let database = dir.join("chorus.sqlite3");
    let os_reason = std::fs::File::create(&database)
        .expect_err("the directory refuses new files")
        .to_string();

    let line = start_up_failure(&dir, tmp.path()).await;

    assert!(
        line.contains(&database.display().to_string()) && line.contains(&os_reason),
        "names {} and says {os_reason:?} ({how}): {line}",
        database.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_that_cannot_be_created_is_named_with_the_reason_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (parent, how) = unwritable_dir(tmp.path());
    let dir = parent.join("chorus-data");
    let os_reason = std::fs::create_dir_all(&dir)
        .expect_err("the parent refuses new directories")
        .to_string();

    let line = start_up_failure(&dir, tmp.path()).await;

    assert!(
        line.contains(&dir.display().to_string()) && line.contains(&os_reason),
        "names {} and says {os_reason:?} ({how}): {line}",
        dir.display()
    );
}

/// A directory this process cannot create files in, and how it was found. `chmod 0555` is
/// the honest way, but does not stop root (tests may run as root in containers); then
/// `/sys/kernel`, where sysfs refuses new files to everyone, root included.
fn unwritable_dir(tmp: &Path) -> (PathBuf, &'static str) {
    use std::os::unix::fs::PermissionsExt;
    let read_only = tmp.join("read-only");
    std::fs::create_dir(&read_only).expect("create dir");
    std::fs::set_permissions(&read_only, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    if refuses_new_files(&read_only) {
        return (read_only, "a directory with mode 0555");
    }
    let sysfs = PathBuf::from("/sys/kernel");
    if sysfs.is_dir() && refuses_new_files(&sysfs) {
        return (
            sysfs,
            "running as root, so /sys/kernel, which refuses new files",
        );
    }
    panic!("no directory refuses writes here: not even chmod 0555 or /sys/kernel");
}

fn refuses_new_files(dir: &Path) -> bool {
    let probe = dir.join("probe");
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            false
        }
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_push_url_or_secret_is_named_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let long = "push-secret-push-secret-push-secret-0123";
    let cases = [
        ("https://push.example/notify", long, "CHORUS_PUSH_URL"),
        ("push.example", long, "CHORUS_PUSH_URL"),
        (
            "http://127.0.0.1:9/notify",
            "too-short",
            "CHORUS_PUSH_SECRET",
        ),
    ];
    for (i, (url, secret, setting)) in cases.into_iter().enumerate() {
        let env = [
            ("RUST_BACKTRACE", "1"),
            ("CHORUS_PUSH_URL", url),
            ("CHORUS_PUSH_SECRET", secret),
        ];
        let data_dir = tmp.path().join(format!("data-{i}"));

        let line = start_up_failure_with(&data_dir, tmp.path(), &env).await;

        assert!(
            line.contains(setting),
            "{url}, {secret}: names {setting}: {line}"
        );
        assert!(!line.contains(long), "the secret is not logged: {line}");
    }
}

/// Starts the binary on `data_dir` (with its embedded SQLite database), expects it to exit
/// during start-up, and returns the one line of its log that is not INFO.
async fn start_up_failure(data_dir: &Path, log_dir: &Path) -> String {
    start_up_failure_with(data_dir, log_dir, &[("RUST_BACKTRACE", "1")]).await
}

/// [`start_up_failure`] with these settings.
async fn start_up_failure_with(data_dir: &Path, log_dir: &Path, env: &[(&str, &str)]) -> String {
    let config = ChildConfig {
        binary: test_binary(),
        data_dir,
        database_url: None,
        env,
    };
    let mut server =
        ChildServer::spawn(&config, log_dir.join("server.log")).expect("run the binary");
    let client = crate::support::http::client(Duration::from_secs(2));
    let outcome = server.wait_healthy(&client, Duration::from_secs(30)).await;
    assert!(
        outcome
            .as_ref()
            .is_err_and(|e| e.contains("exited during start-up")),
        "the server does not start: {outcome:?}"
    );
    let log = server.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains(" INFO "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one line says what went wrong, no backtrace or cause list:\n{log}"
    );
    lines[0].to_owned()
}
