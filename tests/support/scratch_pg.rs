//! A PostgreSQL database that exists for one test or benchmark run: created next to the
//! database an admin URL names, and dropped (WITH (FORCE), so a server's open connections
//! cannot keep it alive) when the value is dropped.
//!
//! When the admin database is a Citus coordinator, the scratch database is made a Citus
//! database of its own on the same cluster: created on the coordinator and on every worker
//! with the extension, its nodes registered, so the server distributes its schema there as
//! in production (with few shards per table: a test creates the schema many times).

use diesel::sql_types::{Integer, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};

/// Shards per distributed table in a scratch Citus database: enough that groups land on
/// different workers, few enough that creating the schema stays quick.
const CITUS_SHARDS: u32 = 4;

pub struct ScratchPg {
    admin_url: String,
    name: String,
    /// The admin URLs of the Citus workers the database was also created on.
    workers: Vec<String>,
}

#[derive(QueryableByName)]
struct Node {
    #[diesel(sql_type = Text)]
    nodename: String,
    #[diesel(sql_type = Integer)]
    nodeport: i32,
}

impl ScratchPg {
    /// Creates `<prefix>_<16 random hex digits>`; Err says why it could not.
    pub fn create(admin_url: &str, prefix: &str) -> Result<ScratchPg, String> {
        let redacted = chorus::redact::redact_url(admin_url);
        let mut admin = PgConnection::establish(admin_url)
            .map_err(|e| format!("PostgreSQL at {redacted} is unreachable: {e}"))?;
        let name = format!("{prefix}_{:016x}", rand::random::<u64>());
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .map_err(|e| format!("cannot create a database on {redacted}: {e}"))?;
        let mut scratch = ScratchPg {
            admin_url: admin_url.to_owned(),
            name,
            workers: Vec::new(),
        };
        let workers = citus_workers(&mut admin)
            .map_err(|e| format!("cannot list the Citus workers of {redacted}: {e}"))?;
        if let Some(workers) = workers {
            scratch.make_citus(&workers)?;
        }
        Ok(scratch)
    }

    /// Creates the database on every worker, adds the extension everywhere and registers the
    /// nodes in the new database (Citus keeps its node list per database).
    fn make_citus(&mut self, workers: &[Node]) -> Result<(), String> {
        let (host, port) = authority(&self.admin_url);
        for worker in workers {
            let worker_admin = with_node(&self.admin_url, &worker.nodename, worker.nodeport);
            run(&worker_admin, &format!("CREATE DATABASE {}", self.name))?;
            self.workers.push(worker_admin.clone());
            run(
                &with_database(&worker_admin, &self.name),
                "CREATE EXTENSION citus",
            )?;
        }
        let url = self.url();
        run(&url, "CREATE EXTENSION citus")?;
        run(
            &url,
            &format!(
                "ALTER DATABASE {} SET citus.shard_count = {CITUS_SHARDS}",
                self.name
            ),
        )?;
        run(
            &url,
            &format!("SELECT citus_set_coordinator_host('{host}', {port})"),
        )?;
        for worker in workers {
            let add = format!(
                "SELECT citus_add_node('{}', {})",
                worker.nodename, worker.nodeport
            );
            // Now and then the coordinator's first connection to a worker's new database
            // fails ("failure on connection marked as essential") while many tests create
            // theirs; a second try a moment later succeeds.
            run(&url, &add).or_else(|_| {
                std::thread::sleep(std::time::Duration::from_millis(500));
                run(&url, &add)
            })?;
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URLs of this database on the Citus workers (none on plain PostgreSQL): where an
    /// instance attached to a worker connects.
    pub fn worker_urls(&self) -> Vec<String> {
        self.workers
            .iter()
            .map(|admin| with_database(admin, &self.name))
            .collect()
    }

    /// The URL of this database: the admin URL with its database name replaced.
    pub fn url(&self) -> String {
        with_database(&self.admin_url, &self.name)
    }
}

impl Drop for ScratchPg {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // The coordinator's first: its background work connects to the workers' databases.
        for admin_url in std::iter::once(&self.admin_url).chain(&self.workers) {
            let Ok(mut admin) = PgConnection::establish(admin_url) else {
                continue;
            };
            if diesel::sql_query(&drop).execute(&mut admin).is_err() {
                // A Citus transaction across nodes cut off by the end of the test leaves a
                // prepared transaction behind, and a database with one cannot be dropped.
                roll_back_prepared(&with_database(admin_url, &self.name));
                let _ = diesel::sql_query(&drop).execute(&mut admin);
            }
        }
    }
}

/// Rolls back the prepared transactions of the database `url` names.
fn roll_back_prepared(url: &str) {
    #[derive(QueryableByName)]
    struct Prepared {
        #[diesel(sql_type = Text)]
        gid: String,
    }
    let Ok(mut conn) = PgConnection::establish(url) else {
        return;
    };
    let prepared: Vec<Prepared> =
        diesel::sql_query("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
            .load(&mut conn)
            .unwrap_or_default();
    for p in prepared {
        let _ = diesel::sql_query(format!("ROLLBACK PREPARED '{}'", p.gid)).execute(&mut conn);
    }
}

/// The workers of the cluster the admin connection's database coordinates, or None when it
/// is not a Citus database.
fn citus_workers(admin: &mut PgConnection) -> diesel::QueryResult<Option<Vec<Node>>> {
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        citus: bool,
    }
    let found: Vec<Found> = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus",
    )
    .load(admin)?;
    if !found.first().is_some_and(|f| f.citus) {
        return Ok(None);
    }
    diesel::sql_query(
        "SELECT nodename::text AS nodename, nodeport FROM pg_dist_node \
         WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeport",
    )
    .load(admin)
    .map(Some)
}

fn run(url: &str, statement: &str) -> Result<(), String> {
    let redacted = chorus::redact::redact_url(url);
    let mut conn =
        PgConnection::establish(url).map_err(|e| format!("{redacted} is unreachable: {e}"))?;
    diesel::sql_query(statement)
        .execute(&mut conn)
        .map(drop)
        .map_err(|e| format!("{statement} on {redacted}: {e}"))
}

/// Splits `scheme://[user@]host:port/database?query` into its parts: (scheme and user,
/// host and port, database, query).
fn parts(url: &str) -> (&str, &str, &str, &str) {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let (authority_end, database) = match base[authority_start..].find('/') {
        Some(slash) => (
            authority_start + slash,
            &base[authority_start + slash + 1..],
        ),
        None => (base.len(), ""),
    };
    let host_start = base[authority_start..authority_end]
        .rfind('@')
        .map_or(authority_start, |at| authority_start + at + 1);
    (
        &base[..host_start],
        &base[host_start..authority_end],
        database,
        query,
    )
}

fn join(prefix: &str, host_port: &str, database: &str, query: &str) -> String {
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{prefix}{host_port}/{database}{query}")
}

/// The URL with its database name replaced.
fn with_database(url: &str, database: &str) -> String {
    let (prefix, host_port, _, query) = parts(url);
    join(prefix, host_port, database, query)
}

/// The URL with its host and port replaced.
fn with_node(url: &str, host: &str, port: i32) -> String {
    let (prefix, _, database, query) = parts(url);
    join(prefix, &format!("{host}:{port}"), database, query)
}

/// The URL's host and port (5432 when it names none).
fn authority(url: &str) -> (String, u16) {
    let (_, host_port, _, _) = parts(url);
    match host_port.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(5432)),
        None => (host_port.to_owned(), 5432),
    }
}
