//! How the process logs: one subscriber on stderr, text or JSON, and the one library event it
//! files under a different level than the library gives it.

use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, Settings};

/// Logs go to stderr. A filter that does not parse stops the start: running with another
/// filter than the one asked for would hide exactly the lines someone wanted to see.
///
/// The filter is by target and level (`info`, `chorus=debug,info`). tracing's `EnvFilter` would
/// add span and field filters, which nobody operating Chorus has needed, at the price of a
/// regular-expression engine: a sixteenth of a first build's time.
pub fn init(settings: &Settings) -> anyhow::Result<()> {
    let filter: Targets = settings.log.parse().map_err(|e| {
        anyhow::anyhow!(
            "CHORUS_LOG (--log) {:?} is not a log filter ({e}); try info or chorus=debug,info",
            settings.log
        )
    })?;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour_logs());
    let fmt = match settings.log_format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(UnparsableRequests)
        .try_init()?;
    Ok(())
}

/// Whether error values capture a backtrace. anyhow captures one with every error when
/// `RUST_BACKTRACE` is set, and logging such an error in full prints it: some 65 frames per
/// internal error. Chorus decides with its own setting (`CHORUS_LOG_BACKTRACES`) instead, by
/// setting `RUST_LIB_BACKTRACE`, which error values read before `RUST_BACKTRACE`; panics
/// still follow `RUST_BACKTRACE`. Call it before any other thread starts: changing the
/// environment is not thread-safe.
pub fn configure_backtraces(enabled: bool) {
    std::env::set_var("RUST_LIB_BACKTRACE", if enabled { "1" } else { "0" });
}

/// `text` on one line: some causes (libpq's, say) span several, with hints indented below.
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Colours only for a person at a terminal: escape codes in a log file or a collector are
/// noise. NO_COLOR (no-color.org) turns them off there too.
fn colour_logs() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::stderr().is_terminal() && !no_color
}

/// actix-http logs every request its HTTP/1 parser refuses (a URL over 64 KiB, too many
/// headers, two Content-Lengths…) as `ERROR stream error: request parse error: …`. That is the
/// client's mistake, answered 400 or 431 before any handler runs, and an ERROR per malformed
/// request would page an operator for what any client can send. A level cannot be changed
/// after the fact, so this layer drops that event and logs the same cause at INFO, beside the
/// other refused requests.
struct UnparsableRequests;

/// The target and message prefix of the event described on [`UnparsableRequests`].
const DISPATCHER_TARGET: &str = "actix_http::h1::dispatcher";
const PARSE_ERROR_PREFIX: &str = "stream error: request parse error: ";

impl<S: Subscriber> Layer<S> for UnparsableRequests {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if metadata.target() != DISPATCHER_TARGET || *metadata.level() != tracing::Level::ERROR {
            return true;
        }
        let mut message = MessageText::default();
        event.record(&mut message);
        match message.0.strip_prefix(PARSE_ERROR_PREFIX) {
            Some(cause) => {
                tracing::info!(
                    target: "chorus::http",
                    error = cause,
                    "refused a request it could not parse"
                );
                false
            }
            None => true,
        }
    }
}

/// The `message` field of an event, as text.
#[derive(Default)]
struct MessageText(String);

impl Visit for MessageText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.0);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_a_multi_line_cause() {
        let libpq = "connection to server at \"127.0.0.1\", port 5999 failed: Connection \
                     refused\n\tIs the server running on that host?\n";
        assert_eq!(
            one_line(libpq),
            "connection to server at \"127.0.0.1\", port 5999 failed: Connection refused \
             Is the server running on that host?"
        );
    }
}
