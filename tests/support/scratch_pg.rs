//! A PostgreSQL database that exists for one test or benchmark run: created next to the
//! database an admin URL names, and dropped (WITH (FORCE), so a server's open connections
//! cannot keep it alive) when the value is dropped.

use diesel::{Connection, PgConnection, RunQueryDsl};

pub struct ScratchPg {
    admin_url: String,
    name: String,
}

impl ScratchPg {
    /// Creates `<prefix>_<16 random hex digits>`; Err says why it could not.
    pub fn create(admin_url: &str, prefix: &str) -> Result<ScratchPg, String> {
        let redacted = chorus::config::redact_url(admin_url);
        let mut admin = PgConnection::establish(admin_url)
            .map_err(|e| format!("PostgreSQL at {redacted} is unreachable: {e}"))?;
        let name = format!("{prefix}_{:016x}", rand::random::<u64>());
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .map_err(|e| format!("cannot create a database on {redacted}: {e}"))?;
        Ok(ScratchPg {
            admin_url: admin_url.to_owned(),
            name,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of this database: the admin URL with its database name replaced.
    pub fn url(&self) -> String {
        let (base, query) = match self.admin_url.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (self.admin_url.as_str(), String::new()),
        };
        let authority_start = base.find("://").map_or(0, |i| i + 3);
        let base = match base[authority_start..].find('/') {
            Some(slash) => &base[..authority_start + slash],
            None => base,
        };
        format!("{base}/{}{query}", self.name)
    }
}

impl Drop for ScratchPg {
    fn drop(&mut self) {
        if let Ok(mut admin) = PgConnection::establish(&self.admin_url) {
            let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
            let _ = diesel::sql_query(drop).execute(&mut admin);
        }
    }
}
