//! Serving HTTP on a TCP listener without letting clients hold the daemon's file descriptors.
//! A client may open connections and then send nothing, or a byte now and then: each would
//! hold a descriptor for good, until the daemon could open no file, pipe or socket (its
//! database readers and its handlers' processes included). The webhook listener faces the
//! network; the API is loopback-only, but every local user can connect to it. So both:
//!
//! - keep at most `max_connections` open at once; at the cap the listener stops accepting,
//!   and the next connection waits in the kernel's backlog until one closes (a queue, not a
//!   drop);
//! - close a connection whose request headers have not arrived within `header_timeout` of
//!   the first wait for them; an idle keep-alive connection waiting for its next request
//!   too. A request's body and a streamed answer (an SSE feed) are not timed here.
//!
//! A stop closes idle connections at once and lets a request in progress end, as axum's
//! graceful shutdown does.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How long the listener waits after a failed accept (say at the file descriptor limit).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What a listener allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Which listener, in its log lines (`webhook`, `API`).
    pub name: &'static str,
    /// Where its limits are set, named when the cap is reached.
    pub settings: &'static str,
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// Serves `app` on `listener` within `limits` until `stopped` resolves, then waits for every
/// connection to end.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stopped: impl std::future::Future<Output = ()>,
) {
    let cap = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(cap));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(stopped);
    // Set while every slot is taken, so a sustained flood is logged once, not per connection.
    let mut full = false;
    loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                full = false;
                slot
            }
            Err(_) => {
                if !full {
                    full = true;
                    tracing::warn!(
                        max_connections = cap,
                        "every {} connection is in use; new ones wait until one closes ({})",
                        limits.name,
                        limits.settings
                    );
                }
                tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = &mut stopped => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "the {} listener cannot accept a connection; it tries again shortly", limits.name);
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                        () = &mut stopped => break,
                    }
                }
            },
            () = &mut stopped => break,
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %err, "cannot set TCP_NODELAY on a connection of the {} listener", limits.name);
        }
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        ));
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = stop_asked(&mut stopping) => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = served {
                tracing::debug!(%peer, error = %err, "a connection of the {} listener ended with an error", limits.name);
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection has ended once all the slots are back.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// Resolves once the listener stops.
async fn stop_asked(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// The default `max_connections`: a quarter of this process's file descriptor limit, from 16
/// to 1024, so a flood of connections leaves the daemon most of its descriptors.
pub fn default_max_connections() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    u32::try_from(soft / 4).unwrap_or(u32::MAX).clamp(16, 1024)
}
