//! Wake-ups from the other daemons on the database: a connection of its own that `LISTEN`s on
//! `canopy_feed`, which every transaction appending to the feed notifies as it commits (see
//! `Dialect::feed_append`) with the node that appended. Another node's notice wakes
//! [`FeedNotices`]; the daemon then reads the new rows from the feed itself, so a notice carries
//! no row and a lost one costs only latency
//! (one is also given after every reconnect, for what passed while the link was down).

use std::sync::{Arc, Weak};
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator as _;

use super::Target;

/// How long a wait for a notice lasts before the connection is checked.
const POLL: Duration = Duration::from_secs(5);
/// How long to wait before connecting again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// Woken when another daemon (or this one) appended to the feed.
pub type FeedNotices = Arc<tokio::sync::Notify>;

/// Starts the listening thread; it ends once the store's last handle on `notices` is gone.
/// Notices of `node`'s own appends are passed over: it published those as it recorded them.
pub(crate) fn spawn(target: Target, node: &str) -> anyhow::Result<FeedNotices> {
    let notices: FeedNotices = Arc::new(tokio::sync::Notify::new());
    let watched = Arc::downgrade(&notices);
    let node = node.to_string();
    std::thread::Builder::new()
        .name("canopy-store-listen".into())
        .spawn(move || listen(&target, &node, &watched))?;
    Ok(notices)
}

fn listen(target: &Target, node: &str, notices: &Weak<tokio::sync::Notify>) {
    while notices.strong_count() > 0 {
        let mut client = match target.connect() {
            Ok(client) => client,
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "cannot listen for other daemons' feed events; trying again");
                std::thread::sleep(RETRY);
                continue;
            }
        };
        if let Err(err) = client.batch_execute("LISTEN canopy_feed") {
            tracing::warn!(error = %err, "cannot listen for other daemons' feed events; trying again");
            std::thread::sleep(RETRY);
            continue;
        }
        // What was appended while this connection was not listening.
        wake(notices);
        loop {
            let next = client.notifications().timeout_iter(POLL).next();
            match next {
                Ok(Some(notice)) if notice.payload() == node => {}
                Ok(Some(_)) => {
                    if !wake(notices) {
                        return;
                    }
                }
                Ok(None) if notices.strong_count() == 0 => return,
                Ok(None) if client.is_closed() => break,
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "lost the connection that listens for other daemons' feed events; connecting again");
                    break;
                }
            }
        }
    }
}

/// Wakes the daemon's reader of new feed rows; false once nobody listens any more.
fn wake(notices: &Weak<tokio::sync::Notify>) -> bool {
    match notices.upgrade() {
        Some(notify) => {
            notify.notify_one();
            true
        }
        None => false,
    }
}
