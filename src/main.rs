//! The `chorus` command: serve (default), migrate, token.

use clap::Parser;

use chorus::config::{Cli, Command};
use chorus::domain::{DeviceId, UserId};
use chorus::startup::{load_keys, Application};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Err(e) = chorus::logging::init(&cli.settings) {
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
