//! Other instances' wake-ups, heard through PostgreSQL's LISTEN/NOTIFY: one dedicated
//! connection per database node, each handing what it hears to this process's waiters.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::events::CHANNEL;
use super::waiters::Waiters;

/// Listens for other instances' wake-ups on every node of the database until the process
/// ends. A notification reaches only the listeners of the node it was sent on, and on Citus
/// each instance sends on the node it is attached to (the coordinator or any worker), so an
/// instance listens on each of them: the configured node, and every active primary Citus
/// lists in `pg_dist_node`, reached at the configured URL with that node's host and port.
/// The list is read again every [`NODES_REREAD_EVERY`], so added nodes are heard and removed
/// ones let go. On plain PostgreSQL that is the one configured node.
pub async fn run_pg_listeners(url: String, waiters: Arc<Waiters>) {
    let mut listening: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let mut one_node = false;
        let mut wanted = match cluster_node_urls(&url).await {
            Ok(urls) => {
                // Plain PostgreSQL: one node, nothing to read again.
                one_node = urls.is_empty();
                urls
            }
            Err(e) => {
                tracing::warn!(error = ?e, "cannot read the database's node list; keeping the listeners as they are");
                listening.keys().cloned().collect()
            }
        };
        // In the spelling the node list uses, so the configured node is heard once.
        wanted.insert(node_url_as_listed(&url));
        listening.retain(|node_url, task| {
            let keep = wanted.contains(node_url);
            if !keep {
                task.abort();
            }
            keep
        });
        for node_url in wanted {
            listening
                .entry(node_url.clone())
                .or_insert_with(|| tokio::spawn(run_pg_listener(node_url, waiters.clone())));
        }
        let mut stopping = waiters.shutting_down();
        if one_node {
            let _ = stopping.wait_for(|stopping| *stopping).await;
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(NODES_REREAD_EVERY) => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// How often the node list of a Citus database is read again.
const NODES_REREAD_EVERY: Duration = Duration::from_secs(30);

/// The URLs of every node Citus lists for the database (the configured one among them, in
/// its own spelling): empty on plain PostgreSQL, and when the configured URL is not in URL
/// form (`host=… port=…`), which cannot be pointed elsewhere: then only its node is heard.
async fn cluster_node_urls(url: &str) -> Result<HashSet<String>, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT nodename, nodeport FROM pg_dist_node \
             WHERE noderole = 'primary' AND isactive \
               AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            &[],
        )
        .await;
    drop(client);
    driver.abort();
    let rows = match rows {
        Ok(rows) => rows,
        // No pg_dist_node: not a Citus database.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(HashSet::new())
        }
        Err(e) => return Err(e),
    };
    if !rows.is_empty() && url::Url::parse(url).is_err() {
        tracing::warn!(
            "the database URL is not in URL form: wake-ups sent on the other Citus nodes are not heard"
        );
    }
    Ok(rows
        .iter()
        .filter_map(|row| {
            let host: String = row.try_get(0).ok()?;
            let port: i32 = row.try_get(1).ok()?;
            node_url(url, &host, u16::try_from(port).ok()?)
        })
        .collect())
}

/// `url` as [`node_url`] spells a URL it derives, or as it is when it does not parse.
fn node_url_as_listed(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| url.to_owned(), String::from)
}

/// `url` pointed at another node: the same user, password, database and options.
fn node_url(url: &str, host: &str, port: u16) -> Option<String> {
    let mut parsed = url::Url::parse(url).ok()?;
    parsed.set_host(Some(host)).ok()?;
    parsed.set_port(Some(port)).ok()?;
    Some(parsed.into())
}

/// Listens for other instances' wake-ups until the process ends, reconnecting with backoff.
/// After every (re)connect all local waiters re-check the database, since notifications sent
/// while the connection was down are gone.
async fn run_pg_listener(url: String, waiters: Arc<Waiters>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listen(&url, &waiters, &mut backoff).await {
            Ok(()) => tracing::warn!("notification listener connection closed"),
            Err(e) => tracing::warn!(error = ?e, "notification listener failed"),
        }
        if waiters.is_shutting_down() {
            return;
        }
        // No wake-up here: while the database is down a woken poll could only fail. The
        // successful reconnect wakes everyone.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);

async fn listen(
    url: &str,
    waiters: &Arc<Waiters>,
    backoff: &mut Duration,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let (sender, mut payloads) = tokio::sync::mpsc::unbounded_channel::<String>();
    // The connection object yields notifications; it must be polled for the client to work.
    let driver = tokio::spawn(async move {
        loop {
            let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
            match message {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if sender.send(n.payload().to_owned()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    tracing::info!("listening for other instances' wake-ups");
    *backoff = FIRST_BACKOFF;
    waiters.wake_all();
    while let Some(payload) = payloads.recv().await {
        waiters.handle_remote(&payload);
    }
    drop(client);
    match driver.await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_url_keeps_everything_but_host_and_port() {
        assert_eq!(
            node_url(
                "postgres://chorus:secret@db-0:9700/chorus?sslmode=disable",
                "10.0.0.7",
                5432
            )
            .as_deref(),
            Some("postgres://chorus:secret@10.0.0.7:5432/chorus?sslmode=disable")
        );
    }
}
