//! Serving HTTP on a TCP listener without letting clients hold the daemon's file descriptors,
//! or its connection slots. A client may open connections and then send nothing, or a header
//! byte now and then: each would hold a descriptor and a slot, until real clients waited in the
//! backlog (1,100 such connections once held every slot of the webhook listener: each real
//! delivery waited 7 s) or the daemon could open no file, pipe or socket. The webhook listener
//! faces the network; the API is loopback-only, but every local user can connect to it. So:
//!
//! - at most `max_connections` are open at once. At the cap the listener closes the connection
//!   that has been **reading its request's headers** longest (else the one idle longest between
//!   requests), and takes the new one; only when every connection is serving a request does the
//!   next wait in the kernel's backlog until one ends;
//! - one peer address holds at most `max_per_peer` of them: past that, its connection that has
//!   waited longest without a request in progress is closed, or, with none, the new one;
//! - a request's line and headers must arrive within `header_timeout` of their first byte (a
//!   few seconds: a trickle is cut off), and a connection waiting for its next request is closed
//!   after `idle_timeout`. A request's body and a streamed answer (an SSE feed) are not timed
//!   here;
//! - headers larger than [`MAX_HEADER_BYTES`] are answered 431 and the connection closed.
//!
//! A stop closes idle connections at once, lets a request in progress end for
//! [`STOP_GRACE`], then closes whatever is still open (a feed stream whose reader stopped
//! reading would otherwise keep the daemon alive for good).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tower::ServiceExt;

/// How long the listener waits after a failed accept (say at the file descriptor limit).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The most a request's line and headers may weigh; more is answered 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How long a stop lets requests in progress (and streams) end before it closes them.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// What a listener allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Which listener, in its log lines (`webhook`, `API`).
    pub name: &'static str,
    /// Where its limits are set, named when the cap is reached.
    pub settings: &'static str,
    pub max_connections: usize,
    /// Connections one peer address may hold; `None`: no cap of its own (the loopback API,
    /// where every client is the same address).
    pub max_per_peer: Option<usize>,
    /// How long a request's line and headers may take once their first byte arrived.
    pub header_timeout: Duration,
    /// How long a connection may wait for its next request.
    pub idle_timeout: Duration,
}

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    /// Waiting for the next request: no byte of it yet.
    Idle = 0,
    /// Some of a request's line or headers arrived, not all.
    Head = 1,
    /// A request is being served (its body read, its answer written or streamed).
    Serving = 2,
}

/// One open connection, as the listener sees it.
#[derive(Debug)]
struct Tracked {
    peer: IpAddr,
    phase: AtomicU8,
    /// Milliseconds since the listener's start when the phase last changed.
    since_ms: AtomicU64,
    /// Notified to close the connection.
    close: Notify,
    start: Instant,
}

impl Tracked {
    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            1 => Phase::Head,
            2 => Phase::Serving,
            _ => Phase::Idle,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn enter(&self, phase: Phase) {
        self.since_ms.store(self.now_ms(), Ordering::Release);
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// A byte arrived: an idle connection is now reading a request's head.
    fn bytes_arrived(&self) {
        if self
            .phase
            .compare_exchange(
                Phase::Idle as u8,
                Phase::Head as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.since_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    fn in_phase_for(&self) -> Duration {
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.since_ms.load(Ordering::Acquire)),
        )
    }
}

/// Every open connection of one listener.
#[derive(Debug, Default)]
struct Registry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Tracked>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Tracked>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, tracked: Arc<Tracked>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, tracked);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn of_peer(&self, peer: IpAddr) -> usize {
        self.lock().values().filter(|t| t.peer == peer).count()
    }

    /// Asks the connection that has waited longest without a request in progress to close
    /// (reading headers first, then idle), among those of `peer` when given. False when every
    /// one is serving a request.
    fn evict(&self, peer: Option<IpAddr>) -> Option<(Phase, IpAddr)> {
        let open = self.lock();
        let victim = open
            .values()
            .filter(|t| peer.is_none_or(|p| t.peer == p) && t.phase() != Phase::Serving)
            .max_by_key(|t| (t.phase() == Phase::Head, t.in_phase_for()))?;
        victim.close.notify_one();
        Some((victim.phase(), victim.peer))
    }
}

/// A connection's socket, noting when the bytes of a new request start to arrive.
struct Watched {
    stream: TcpStream,
    tracked: Arc<Tracked>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.tracked.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// An answer's body that marks its connection idle again once it has been sent (or dropped).
struct Answer {
    body: Body,
    tracked: Arc<Tracked>,
}

impl HttpBody for Answer {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.tracked.enter(Phase::Idle);
    }
}

/// Serves `app` on `listener` within `limits` until `stopped` resolves, then waits for every
/// connection to end (at most [`STOP_GRACE`], then they are closed).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stopped: impl std::future::Future<Output = ()>,
) {
    let cap = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(cap));
    let registry = Arc::new(Registry::default());
    let start = Instant::now();
    let (stop, stopping) = watch::channel(false);
    let (force, forcing) = watch::channel(false);
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
                // Make room: the connection reading its headers longest goes first.
                let evicted = registry.evict(None);
                if !full {
                    full = true;
                    tracing::warn!(
                        max_connections = cap,
                        "every {} connection is in use; {} ({})",
                        limits.name,
                        if evicted.is_some() {
                            "the one waiting longest without a request in progress is closed for each new one"
                        } else {
                            "every one serves a request: new ones wait until one ends"
                        },
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
        if let Some(per_peer) = limits.max_per_peer
            && registry.of_peer(peer.ip()) >= per_peer
            && registry.evict(Some(peer.ip())).is_none()
        {
            tracing::debug!(%peer, max_per_peer = per_peer, "a {} connection past its peer's cap is closed: every one of the peer's serves a request", limits.name);
            drop(stream);
            continue;
        }
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %err, "cannot set TCP_NODELAY on a connection of the {} listener", limits.name);
        }
        let tracked = Arc::new(Tracked {
            peer: peer.ip(),
            phase: AtomicU8::new(Phase::Idle as u8),
            since_ms: AtomicU64::new(0),
            close: Notify::new(),
            start,
        });
        tracked.enter(Phase::Idle);
        let id = registry.add(tracked.clone());
        // Each request knows its peer and marks the connection serving; its answer marks it
        // idle again once sent.
        let on_request = tracked.clone();
        let on_answer = tracked.clone();
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(
                    move |mut request: axum::http::Request<hyper::body::Incoming>| {
                        on_request.enter(Phase::Serving);
                        request.extensions_mut().insert(ConnectInfo(peer));
                        request
                    },
                )
                .map_response(move |response: axum::http::Response<Body>| {
                    let tracked = on_answer.clone();
                    response.map(|body| Body::new(Answer { body, tracked }))
                }),
        );
        let stopping = stopping.clone();
        let forcing = forcing.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, service, tracked, limits, peer, stopping, forcing).await;
            registry.remove(id);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection has ended once all the slots are back.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    if tokio::time::timeout(STOP_GRACE, slots.acquire_many(all))
        .await
        .is_err()
    {
        let open = registry.lock().len();
        tracing::info!(
            open,
            "closing the {} connections still open after the stop's grace (streams whose readers went quiet)",
            limits.name
        );
        let _ = force.send(true);
        let _ = slots.acquire_many(all).await;
    }
}

/// Serves one connection until it ends, is closed to make room, reads its headers too slowly,
/// or the listener stops.
async fn serve_connection<S>(
    stream: TcpStream,
    service: S,
    tracked: Arc<Tracked>,
    limits: Limits,
    peer: SocketAddr,
    mut stopping: watch::Receiver<bool>,
    mut forcing: watch::Receiver<bool>,
) where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = Body> + Send,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let io = TokioIo::new(Watched {
        stream,
        tracked: tracked.clone(),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // hyper's header timer starts when the connection waits for a request: the idle
        // deadline. The header deadline proper is the check below.
        .header_read_timeout(limits.idle_timeout)
        .max_header_size(MAX_HEADER_BYTES);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let check =
        (limits.header_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut ticks = tokio::time::interval(check);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopped = false;
    let served = loop {
        tokio::select! {
            served = connection.as_mut() => break Some(served),
            () = stop_asked(&mut stopping), if !stopped => {
                stopped = true;
                connection.as_mut().graceful_shutdown();
            }
            () = stop_asked(&mut forcing) => break None,
            () = tracked.close.notified() => {
                tracing::debug!(%peer, "a {} connection waiting without a request in progress is closed to make room", limits.name);
                break None;
            }
            _ = ticks.tick() => {
                if tracked.phase() == Phase::Head && tracked.in_phase_for() > limits.header_timeout {
                    tracing::debug!(%peer, timeout_secs = limits.header_timeout.as_secs_f32(), "a {} connection whose request headers did not arrive in time is closed", limits.name);
                    break None;
                }
            }
        }
    };
    if let Some(Err(err)) = served {
        tracing::debug!(%peer, error = %err, "a connection of the {} listener ended with an error", limits.name);
    }
}

/// Resolves once the flag is set.
async fn stop_asked(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}
