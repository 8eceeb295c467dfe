//! The `chorus` command: serve (default), migrate, token.

use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use chorus::config::{Cli, Command, LogFormat, Settings};
use chorus::domain::{DeviceId, UserId};
use chorus::startup::{load_keys, Application};

/// Logs go to stderr. A filter that does not parse stops the start: running with another
/// filter than the one asked for would hide exactly the lines someone wanted to see.
fn init_logging(settings: &Settings) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&settings.log).map_err(|e| {
        anyhow::anyhow!(
            "CHORUS_LOG (--log) {:?} is not a log filter ({e}); try info or chorus=debug,info",
            settings.log
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_logs());
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}

/// Colours only for a person at a terminal: escape codes in a log file or a collector are
/// noise. NO_COLOR (no-color.org) turns them off there too.
fn colour_logs() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::stderr().is_terminal() && !no_color
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Err(e) = init_logging(&cli.settings) {
        // One line, like clap's own errors for a bad flag (anyhow would add a backtrace).
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            Application::build(&cli.settings)
                .await?
                .run_until_stopped()
                .await?
        }
        Command::Migrate => {
            let db_settings = cli.settings.db_settings()?;
            let mut conn = chorus::db::connect_once(&db_settings)?;
            let applied = chorus::db::run_migrations(&mut conn)?;
            println!("{applied} migration(s) applied");
        }
        Command::Token {
            user_id,
            device,
            ttl_hours,
        } => {
            let user = UserId::parse("user_id", &user_id)?;
            let device = device
                .map(|d| DeviceId::parse("--device", &d))
                .transpose()?;
            let keys = load_keys(&cli.settings)?;
            let ttl = ttl_hours.saturating_mul(3600);
            println!("{}", keys.issue_for_device(&user, device.as_ref(), ttl)?);
        }
    }
    Ok(())
}
