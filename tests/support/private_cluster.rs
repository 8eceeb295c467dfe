//! A throwaway PostgreSQL cluster (initdb in a temp dir, its own port) that a test may stop
//! and start without disturbing any other test. Needs Debian's PostgreSQL binaries and root,
//! to run them as the `postgres` user. Used by the outage test and the soak.

use std::path::PathBuf;
use std::process::Command;

use crate::support::ports::free_port;

/// A throwaway PostgreSQL cluster, stopped and deleted on drop.
pub struct PrivateCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Server settings beyond the defaults, as `-c name=value` options.
    settings: Vec<String>,
}

impl PrivateCluster {
    pub fn create() -> Option<PrivateCluster> {
        PrivateCluster::create_with(&[])
    }

    /// A cluster with these server settings (`name=value`) beyond the defaults.
    pub fn create_with(settings: &[&str]) -> Option<PrivateCluster> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists())?;
        let is_root = Command::new("id").arg("-u").output().ok()?.stdout == b"0\n";
        if !is_root {
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        Command::new("chown")
            .arg("postgres")
            .arg(dir.path())
            .status()
            .ok()?;
        let port = free_port();
        let settings = settings.iter().map(|s| format!("-c {s}")).collect();
        let cluster = PrivateCluster {
            bin,
            dir,
            port,
            settings,
        };
        let data = cluster.data();
        let ok = cluster
            .as_postgres(
                "initdb",
                &["-D", &data, "-U", "postgres", "--auth=trust", "-N"],
            )
            .success();
        (ok && cluster.start()).then_some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn as_postgres(&self, tool: &str, args: &[&str]) -> std::process::ExitStatus {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run a PostgreSQL tool")
    }

    pub fn start(&self) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off {}",
            self.port,
            self.dir.path().display(),
            self.settings.join(" ")
        );
        let log = self.dir.path().join("log").display().to_string();
        self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        )
        .success()
    }

    pub fn stop(&self) {
        self.as_postgres("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// The directory of the PostgreSQL binaries this cluster runs.
    pub fn bin(&self) -> &std::path::Path {
        &self.bin
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
