//! Listeners that hold against slow and careless clients: a client trickling header bytes over
//! every connection slot cannot make a real delivery wait; headers must arrive within seconds of
//! their first byte while an idle connection may wait for its next request; oversized headers
//! get 431; a header the rules read, sent twice, is refused; and a feed reader that stopped
//! reading cannot keep a stopping daemon alive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{Daemon, wait_for};

const TOKEN: &str = "listener-token-8c1f3a";

/// The webhook listener's `host:port`.
fn webhooks_address(daemon: &Daemon) -> String {
    wait_for("the webhook listener", Duration::from_secs(60), || {
        std::fs::read_to_string(daemon.data_dir.join("webhooks.addr"))
            .ok()
            .map(|s| s.trim().trim_start_matches("http://").to_string())
            .filter(|s| !s.is_empty())
    })
}

fn daemon_with(listener: &str) -> Daemon {
    Daemon::start_with_config(&format!(
        r#"
[webhooks]
bind_port = 0
token = "{TOKEN}"
{listener}

[webhooks.entries.x]
type = "command"
command = "true"

[webhooks.entries.gh]
type = "command"
command = "true"
match = {{ "header.x-github-event" = "push" }}
"#
    ))
}

/// A POST to hook `hook` on its own connection; returns the status line's code, waiting at
/// most `limit` for the answer.
fn post(address: &str, hook: &str, extra: &str, limit: Duration) -> Result<u16, String> {
    let mut stream = TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(limit)).unwrap();
    // The daemon may answer (431) and close before it has read all of an oversized request:
    // a write that fails then is not the answer; the read is.
    let _ = write!(
        stream,
        "POST /hooks/global/{hook}?wait=true HTTP/1.1\r\nHost: {address}\r\nX-Canopy-Hook-Token: {TOKEN}\r\n{extra}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("no answer within {limit:?}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {text:?}"))
}

/// Whether the server has closed `stream` (reads 0 bytes or fails) within `limit`.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut buffer = [0u8; 1024];
    while Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_client_trickling_headers_over_every_slot_does_not_hold_up_a_delivery() {
    // Header deadlines long enough that only making room at the cap can serve the delivery.
    let daemon = daemon_with(
        "max_connections = 8\nmax_connections_per_peer = 8\nheader_timeout_secs = 120\nidle_timeout_secs = 120",
    );
    let address = webhooks_address(&daemon);
    let stop = Arc::new(AtomicBool::new(false));
    // Twenty connections, each sending a header byte every 200 ms, reconnecting when closed.
    let tricklers: Vec<_> = (0..20)
        .map(|_| {
            let (address, stop) = (address.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut stream) = TcpStream::connect(&address) else {
                        continue;
                    };
                    if stream
                        .write_all(b"POST /hooks/global/x HTTP/1.1\r\nX-Pad: ")
                        .is_err()
                    {
                        continue;
                    }
                    while !stop.load(Ordering::Relaxed) && stream.write_all(b"a").is_ok() {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            })
        })
        .collect();
    // Every slot is taken before the deliveries come.
    support::wait_for(
        "the tricklers to take every webhook slot",
        Duration::from_secs(20),
        || {
            daemon
                .log()
                .contains("every webhook connection is in use")
                .then_some(())
        },
    );
    for _ in 0..3 {
        assert_eq!(
            post(&address, "x", "", Duration::from_secs(15)),
            Ok(200),
            "a real delivery waited behind the trickling connections"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for trickler in tricklers {
        trickler.join().unwrap();
    }
}

#[test]
fn headers_must_arrive_soon_after_their_first_byte_while_an_idle_connection_may_wait() {
    let daemon = daemon_with("header_timeout_secs = 2\nidle_timeout_secs = 60");
    let address = webhooks_address(&daemon);
    let mut idle = TcpStream::connect(&address).unwrap();
    let mut trickle = TcpStream::connect(&address).unwrap();
    trickle
        .write_all(b"POST /hooks/global/x HTTP/1.1\r\nX-Pad: ")
        .unwrap();
    // A byte a second keeps bytes coming, but the headers never complete.
    let writer = {
        let mut trickle = trickle.try_clone().unwrap();
        std::thread::spawn(move || {
            while trickle.write_all(b"a").is_ok() {
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    assert!(
        closed_within(&mut trickle, Duration::from_secs(15)),
        "a connection trickling its headers was not cut off"
    );
    writer.join().unwrap();
    assert!(
        !closed_within(&mut idle, Duration::from_secs(1)),
        "an idle connection was closed before its idle deadline"
    );
    // The idle one still serves a request.
    write!(
        idle,
        "POST /hooks/global/x?wait=true HTTP/1.1\r\nHost: {address}\r\nX-Canopy-Hook-Token: {TOKEN}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )
    .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    idle.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn oversized_headers_get_431_and_a_header_the_rules_read_twice_is_refused() {
    let daemon = daemon_with("");
    let address = webhooks_address(&daemon);
    // Just over the 64 KiB limit, in one write. When the daemon closes with bytes unread the
    // kernel resets the connection, and the answer can be lost with it: then it is asked again.
    let big = format!("X-Pad: {}\r\n", "a".repeat(70 * 1024));
    let answered = (0..5)
        .map(|_| post(&address, "x", &big, Duration::from_secs(30)))
        .find(Result::is_ok);
    assert_eq!(answered, Some(Ok(431)));
    let fair = format!("X-Pad: {}\r\n", "a".repeat(8 * 1024));
    assert_eq!(post(&address, "x", &fair, Duration::from_secs(30)), Ok(200));
    assert_eq!(
        post(
            &address,
            "gh",
            "X-GitHub-Event: push\r\nX-GitHub-Event: ping\r\n",
            Duration::from_secs(30)
        ),
        Ok(400)
    );
    assert_eq!(
        post(
            &address,
            "gh",
            "X-GitHub-Event: push\r\n",
            Duration::from_secs(30)
        ),
        Ok(200)
    );
    // Twice on a hook whose rules do not read it: nothing to confuse.
    assert_eq!(
        post(
            &address,
            "x",
            "X-GitHub-Event: push\r\nX-GitHub-Event: ping\r\n",
            Duration::from_secs(30)
        ),
        Ok(200)
    );
    // The API port refuses oversized headers the same way.
    let api = |_| -> Result<u16, String> {
        let mut stream = TcpStream::connect(daemon.host()).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = write!(
            stream,
            "GET /api/specs HTTP/1.1\r\nHost: {}\r\nX-Pad: {}\r\n\r\n",
            daemon.host(),
            "a".repeat(70 * 1024)
        );
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("no answer: {answer:?}"))
    };
    assert_eq!((0..5).map(api).find(Result::is_ok), Some(Ok(431)));
}

#[test]
fn a_feed_reader_that_stopped_reading_cannot_keep_a_stopping_daemon_alive() {
    let mut daemon = Daemon::start();
    let mut reader = TcpStream::connect(daemon.host()).unwrap();
    write!(
        reader,
        "GET /api/feed?follow=true HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        daemon.host(),
        daemon.token()
    )
    .unwrap();
    // Events for the stream to carry; the reader never reads them.
    for i in 0..200 {
        daemon.add_spec(&format!("spec {i}"));
    }
    let asked = Instant::now();
    daemon.stop();
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "a stop with no drain budget took {:?} with a stalled feed reader",
        asked.elapsed()
    );
    drop(reader);
}
