//! The `chorus` command: serve (default), migrate, distribute, token.

use chorus::config::{Cli, Command};
use chorus::domain::{DeviceId, UserId};
use chorus::startup::{load_keys, Application};

fn main() {
    // Before any other thread exists: both change the process environment.
    let (cli, old_names) = Cli::parse_reading_old_names();
    chorus::logging::configure_backtraces(cli.settings.log_backtraces);
    if let Err(e) = chorus::logging::init(&cli.settings) {
        // One line, like clap's own errors for a bad flag.
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    for message in old_names {
        tracing::warn!("{message}");
    }
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(cli)));
    if let Err(e) = outcome {
        // The cause chain on one line (`{:#}`); returning the error from main would print it
        // over several lines, with a backtrace when RUST_BACKTRACE is set.
        tracing::error!("{}", chorus::logging::one_line(&format!("{e:#}")));
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            Application::build(&cli.settings)
                .await?
                .run_until_stopped()
                .await?
        }
        Command::Migrate => {
            let db_settings = cli.settings.db_settings()?;
            let mut conn = chorus::db::connect_once(&db_settings).map_err(|e| {
                anyhow::anyhow!(chorus::db::describe_open_failure(&db_settings, &e))
            })?;
            let applied = chorus::db::run_migrations(&mut conn)?;
            println!("{applied} migration(s) applied");
        }
        Command::Distribute => {
            let db_settings = cli.settings.db_settings()?;
            let mut conn = chorus::db::connect_once(&db_settings).map_err(|e| {
                anyhow::anyhow!(chorus::db::describe_open_failure(&db_settings, &e))
            })?;
            let done = chorus::db::migrate_and_distribute(&mut conn)?;
            println!(
                "{} table(s) distributed now, {} already: {}",
                done.distributed_now.len(),
                done.already,
                done.distributed_now.join(", ")
            );
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
