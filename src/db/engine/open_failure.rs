//! One line saying why the database could not be opened: which file or server, and why.

use std::fs::OpenOptions;
use std::path::Path;

use super::connection::{DbSettings, Engine};
use crate::redact::redact_url;

/// `error` (from opening a connection with `settings`) as one line that names the database.
/// SQLite says only "unable to open database file"; the operating system's reason is added.
pub fn describe_open_failure(settings: &DbSettings, error: &diesel::ConnectionError) -> String {
    match Engine::from_url(&settings.url) {
        Engine::Postgres => format!(
            "cannot connect to the PostgreSQL database {} (CHORUS_DATABASE_URL): {error}",
            redact_url(&settings.url)
        ),
        Engine::Sqlite => {
            let path = Path::new(&settings.url);
            let reason = os_reason(path).map_or(String::new(), |r| format!(" ({r})"));
            format!(
                "cannot open the SQLite database {}: {error}{reason}",
                path.display()
            )
        }
    }
}

/// Why the operating system would refuse what SQLite needs: the file opened for writing, and
/// new files beside it (its `-wal` and `-shm` files). None when both work, so the cause was
/// something else that SQLite's message already says.
fn os_reason(path: &Path) -> Option<String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Err(e) = std::fs::metadata(dir) {
        return Some(format!("{}: {e}", dir.display()));
    }
    if path.exists() {
        if let Err(e) = OpenOptions::new().read(true).write(true).open(path) {
            return Some(format!("{}: {e}", path.display()));
        }
    }
    let probe = dir.join(format!(".chorus-write-probe-{}", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) => Some(format!("cannot create files in {}: {e}", dir.display())),
    }
}
