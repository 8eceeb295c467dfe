//! The soak's instances: `chorus serve` children on one database, each keeping its port across
//! restarts so the round-robin client never needs to learn a new address.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::server::start_server_on;
use crate::support::child_server::ChildServer;
use crate::support::ports::free_port;

/// The pool timeout of every instance: the bound of every request that is not a long-poll.
pub const POOL_TIMEOUT_MS: u64 = 2000;

/// The process id of each instance, None while it is down: what the sampler reads.
pub type Pids = Arc<Mutex<Vec<Option<u32>>>>;

pub struct Fleet {
    dir: PathBuf,
    database_url: String,
    client: reqwest::Client,
    ports: Vec<u16>,
    servers: Vec<Option<ChildServer>>,
    /// Every log file written so far, in start order.
    logs: Vec<PathBuf>,
    pub pids: Pids,
    /// How long each restart took, until /healthz answered.
    pub restart_ms: Vec<u64>,
}

impl Fleet {
    /// Starts `instances` servers, one after another (migrations run once).
    pub async fn start(
        dir: PathBuf,
        database_url: &str,
        client: &reqwest::Client,
        instances: usize,
    ) -> Fleet {
        let mut fleet = Fleet {
            dir,
            database_url: database_url.to_owned(),
            client: client.clone(),
            ports: (0..instances).map(|_| free_port()).collect(),
            servers: (0..instances).map(|_| None).collect(),
            logs: Vec::new(),
            pids: Arc::new(Mutex::new(vec![None; instances])),
            restart_ms: Vec::new(),
        };
        for slot in 0..instances {
            fleet.start_slot(slot).await;
        }
        fleet
    }

    pub fn bases(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect()
    }

    async fn start_slot(&mut self, slot: usize) {
        let log_name = format!("instance-{slot}-start-{}.log", self.logs.len());
        self.logs.push(self.dir.join(&log_name));
        let pool_timeout = POOL_TIMEOUT_MS.to_string();
        // Small pools and few workers: three instances and the clients share two cores.
        let env = [
            ("CHORUS_POOL_SIZE", "4"),
            ("CHORUS_WORKERS", "2"),
            ("CHORUS_POOL_TIMEOUT_MS", pool_timeout.as_str()),
        ];
        let (port, url) = (self.ports[slot], &self.database_url);
        let server = start_server_on(port, &self.dir, url, &log_name, &self.client, &env).await;
        self.pids.lock().expect("pids lock")[slot] = Some(server.pid());
        self.servers[slot] = Some(server);
    }

    /// SIGKILL instance `slot` wherever its requests are, then start it again on its port.
    pub async fn kill_and_restart(&mut self, slot: usize) {
        if let Some(mut server) = self.servers[slot].take() {
            self.pids.lock().expect("pids lock")[slot] = None;
            server.kill();
        }
        let started = Instant::now();
        self.start_slot(slot).await;
        self.restart_ms.push(started.elapsed().as_millis() as u64);
    }

    /// Waits until every instance answers /readyz (after a database restart, say).
    pub async fn wait_ready(&self, within: Duration) -> bool {
        for base in self.bases() {
            let http = crate::support::http::Http {
                client: self.client.clone(),
                base,
            };
            let every = Duration::from_millis(100);
            if !http.wait_until_ok("/readyz", within, every).await {
                return false;
            }
        }
        true
    }

    /// Every log of every instance, in start order.
    pub fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect()
    }

    pub fn stop_all(&mut self) {
        for server in self.servers.iter_mut().filter_map(Option::take) {
            drop(server);
        }
    }
}
