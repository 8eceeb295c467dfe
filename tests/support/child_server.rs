//! `chorus serve` as a child process on a free port, its output in a log file: for tests that
//! SIGKILL the server and benches that read its memory from /proc. Killed when dropped, so a
//! failing run leaves no server behind.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::ports::free_port;
use crate::support::tokens::SECRET;

/// The debug binary cargo built for this test run.
pub fn test_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_chorus"))
}

pub struct ChildConfig<'a> {
    pub binary: &'a Path,
    pub data_dir: &'a Path,
    /// None: the default SQLite file in the data directory.
    pub database_url: Option<&'a str>,
    /// More settings, e.g. `("CHORUS_LOG", "warn")`.
    pub env: &'a [(&'a str, &'a str)],
}

/// The test binary serving from `dir` (its data in `dir/data`, its log in `dir/server.log`)
/// on `database_url` (None: SQLite in the data directory) with `env`, once `/healthz`
/// answers; with the client that waited for it.
pub async fn start_healthy(
    dir: &Path,
    database_url: Option<&str>,
    env: &[(&str, &str)],
) -> (ChildServer, reqwest::Client) {
    let config = ChildConfig {
        binary: test_binary(),
        data_dir: &dir.join("data"),
        database_url,
        env,
    };
    let mut server = ChildServer::spawn(&config, dir.join("server.log")).expect("start chorus");
    let client = crate::support::http::client(Duration::from_secs(30));
    server
        .wait_healthy(&client, Duration::from_secs(30))
        .await
        .expect("healthy");
    (server, client)
}

pub struct ChildServer {
    child: Child,
    pub port: u16,
    /// `http://127.0.0.1:<port>`
    pub base: String,
    log_path: PathBuf,
}

impl ChildServer {
    /// Starts the binary with only the settings of `config` (nothing from the environment the
    /// caller runs in) and stdout and stderr in `log_path`.
    pub fn spawn(config: &ChildConfig, log_path: PathBuf) -> Result<ChildServer, String> {
        ChildServer::spawn_on(config, free_port(), log_path)
    }

    /// [`ChildServer::spawn`] on a given port: a server restarted where its clients already
    /// send their requests (the listener sets SO_REUSEADDR, so a killed server's port is free
    /// at once).
    pub fn spawn_on(
        config: &ChildConfig,
        port: u16,
        log_path: PathBuf,
    ) -> Result<ChildServer, String> {
        let log = File::create(&log_path).map_err(|e| format!("server log file: {e}"))?;
        let log_too = log
            .try_clone()
            .map_err(|e| format!("log file handle: {e}"))?;
        let mut command = Command::new(config.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CHORUS_") {
                command.env_remove(name);
            }
        }
        command
            .arg("serve")
            .env("CHORUS_BIND", format!("127.0.0.1:{port}"))
            .env("CHORUS_DATA_DIR", config.data_dir)
            .env("CHORUS_JWT_SECRET", SECRET)
            .envs(config.env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_too)
            .stderr(log);
        if let Some(url) = config.database_url {
            command.env("CHORUS_DATABASE_URL", url);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", config.binary.display()))?;
        Ok(ChildServer {
            child,
            port,
            base: format!("http://127.0.0.1:{port}"),
            log_path,
        })
    }

    /// Waits until `/healthz` answers 200; Err (with the log) if the process exits first or
    /// `within` passes.
    pub async fn wait_healthy(
        &mut self,
        client: &reqwest::Client,
        within: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                let log = self.log();
                return Err(format!(
                    "chorus exited during start-up ({status}); its log:\n{log}"
                ));
            }
            let probe = client
                .get(format!("{}/healthz", self.base))
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if matches!(&probe, Ok(r) if r.status().is_success()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = self.log();
                return Err(format!(
                    "chorus did not answer /healthz within {within:?}; its log:\n{log}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (what `Child::kill` sends on unix), then reap the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill();
    }
}
