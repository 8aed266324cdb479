//! Message delivery that cannot type twice: a message is marked `delivering` before it is typed
//! into a tmux pane, one hung pane holds up no other session, a delivery cut off by a crash is
//! never typed again, and a follower that falls behind is told how many messages it missed.
//!
//! tmux is replaced by a shim on the daemon's PATH that records every call and hangs on panes
//! named `hang:*` (unless `SHIM_NO_HANG` is set).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use canopy_model::work::{MessageTarget, Provenance};
use canopy_store::Store;
use canopy_store::messages::NewMessage;
use serde_json::{Value, json};
use support::{Daemon, script, wait_for};

/// A directory holding the `tmux` shim and the log of its calls.
struct Shim {
    dir: tempfile::TempDir,
}

impl Shim {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        script(
            dir.path(),
            "tmux",
            &format!(
                "printf '%s\\n' \"$*\" >> {log}\n\
                 case \"$*\" in\n\
                   *'-t hang:'*) [ -z \"$SHIM_NO_HANG\" ] && exec sleep 60 ;;\n\
                 esac\n\
                 exit 0",
                log = dir.path().join("calls.log").display()
            ),
        );
        assert!(!log.exists());
        Self { dir }
    }

    /// The daemon's PATH: the shim first.
    fn path_var(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Every call so far, one line each (`send-keys -t PANE -l -- TEXT`, `send-keys -t PANE Enter`).
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// How many times `text` was typed (into any pane).
    fn typed(&self, text: &str) -> usize {
        self.calls()
            .iter()
            .filter(|call| call.ends_with(&format!("-l -- {text}")))
            .count()
    }
}

fn workdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A live session typing into tmux pane `pane`.
fn tmux_session(daemon: &Daemon, name: &str, pane: &str) -> String {
    let session = daemon.json(&["session", "new", "--name", name, "--tmux-target", pane]);
    session["id"].as_str().unwrap().to_string()
}

/// Has the built-in `interactive` executor queue `text` for the live session called `session`.
fn send(daemon: &Daemon, workdir: &Path, session: &str, text: &str) {
    let (status, report) = daemon.send(
        "POST",
        "/api/plugins/interactive/run",
        &json!({ "config": { "prompt": text, "target_session_name": session }, "workdir": workdir }),
    );
    assert_eq!(status, 200, "{report}");
}

/// The message of `session` whose text is `text`, as `session inbox --json` shows it.
fn message(daemon: &Daemon, session: &str, text: &str) -> Option<Value> {
    let inbox = daemon.json(&["session", "inbox", session]);
    inbox["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["text"] == text)
        .cloned()
}

/// Waits until the message of `session` with `text` is in `status`; returns it.
fn wait_status(daemon: &Daemon, session: &str, text: &str, status: &str, limit: Duration) -> Value {
    wait_for(
        &format!("message `{text}` of session {session} to be {status}"),
        limit,
        || message(daemon, session, text).filter(|m| m["status"] == status),
    )
}

#[test]
fn a_message_is_delivering_while_typed_and_a_hung_pane_stalls_no_other_session() {
    let shim = Shim::new();
    let path = shim.path_var();
    let daemon = Daemon::start_with_env("", &[("PATH", path.as_str())]);
    let work = workdir();
    tmux_session(&daemon, "stuck", "hang:0.0");
    tmux_session(&daemon, "fine", "ok:0.0");
    daemon.ok(&["session", "new", "--name", "box"]);

    send(&daemon, work.path(), "stuck", "into the hung pane");
    // Marked before tmux runs: the shim has the call and hangs in it, and the message says so.
    let stuck = wait_status(
        &daemon,
        "stuck",
        "into the hung pane",
        "delivering",
        Duration::from_secs(10),
    );
    assert!(stuck["delivered_at"].is_null(), "{stuck}");
    wait_for(
        "the shim to be typing into the hung pane",
        Duration::from_secs(5),
        || (shim.typed("into the hung pane") == 1).then_some(()),
    );

    // Other sessions are delivered to while that pane hangs.
    send(&daemon, work.path(), "fine", "into a working pane");
    send(&daemon, work.path(), "box", "into an inbox");
    wait_status(
        &daemon,
        "fine",
        "into a working pane",
        "delivered",
        Duration::from_secs(4),
    );
    wait_status(
        &daemon,
        "box",
        "into an inbox",
        "delivered",
        Duration::from_secs(4),
    );
    assert_eq!(
        message(&daemon, "stuck", "into the hung pane").unwrap()["status"],
        "delivering",
        "the hung pane's tmux call should still be running"
    );
    assert_eq!(shim.typed("into a working pane"), 1, "{:?}", shim.calls());
    assert!(
        shim.calls()
            .iter()
            .any(|call| call == "send-keys -t ok:0.0 Enter"),
        "{:?}",
        shim.calls()
    );

    // The hung call is killed after its timeout; the message is kept for recall, saying why.
    let failed = wait_status(
        &daemon,
        "stuck",
        "into the hung pane",
        "undeliverable",
        Duration::from_secs(15),
    );
    let why = failed["error"].as_str().unwrap();
    assert!(
        why.contains("did not finish within") && why.contains("killed"),
        "{why}"
    );
    let recall = daemon.json(&["session", "recall"]);
    assert!(
        recall["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["text"] == "into the hung pane"),
        "{recall}"
    );
    let notes = daemon.json(&["session", "notifications"]);
    assert!(
        notes["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["kind"] == "delivery_failed" && n["message_id"] == failed["id"]),
        "{notes}"
    );
    // Typed once, never retried.
    assert_eq!(shim.typed("into the hung pane"), 1, "{:?}", shim.calls());
}

#[test]
fn a_delivery_cut_off_by_a_crash_is_not_typed_again_and_says_so() {
    let shim = Shim::new();
    let path = shim.path_var();
    let mut first = Daemon::start_with_env("", &[("PATH", path.as_str())]);
    let work = workdir();
    tmux_session(&first, "pane", "hang:0.0");
    send(&first, work.path(), "pane", "typed when the daemon died");
    wait_status(
        &first,
        "pane",
        "typed when the daemon died",
        "delivering",
        Duration::from_secs(10),
    );
    wait_for("the shim to be typing", Duration::from_secs(5), || {
        (shim.typed("typed when the daemon died") == 1).then_some(())
    });
    first.kill();

    // The pane answers now; the interrupted message must still not be typed again.
    let data_dir: PathBuf = first.data_dir.clone();
    let daemon =
        Daemon::start_on_with_env(&data_dir, &[("PATH", path.as_str()), ("SHIM_NO_HANG", "1")]);
    let interrupted = wait_status(
        &daemon,
        "pane",
        "typed when the daemon died",
        "undeliverable",
        Duration::from_secs(10),
    );
    let why = interrupted["error"].as_str().unwrap();
    assert!(
        why.contains("stopped while it was typing") && why.contains("may or may not have reached"),
        "{why}"
    );
    // Shown as such by the inbox, the recall list and a notification.
    let inbox = daemon.ok(&["session", "inbox", "pane"]);
    assert!(
        inbox.contains("undeliverable")
            && inbox.contains("why: the daemon stopped while it was typing"),
        "{inbox}"
    );
    let recall = daemon.ok(&["session", "recall"]);
    assert!(recall.contains("typed when the daemon died"), "{recall}");
    let notes = daemon.json(&["session", "notifications"]);
    assert!(
        notes["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["kind"] == "delivery_interrupted" && n["message_id"] == interrupted["id"]),
        "{notes}"
    );

    // Delivery goes on for that session: a new message is typed, the old one never again.
    send(&daemon, work.path(), "pane", "after the restart");
    wait_status(
        &daemon,
        "pane",
        "after the restart",
        "delivered",
        Duration::from_secs(10),
    );
    // A few more ticks to be sure nothing retypes the interrupted one.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        shim.typed("typed when the daemon died"),
        1,
        "{:?}",
        shim.calls()
    );
    assert_eq!(shim.typed("after the restart"), 1, "{:?}", shim.calls());
}

/// A connection to the daemon whose receive buffer is a few KiB, so the daemon's writes block
/// as soon as the reader stops reading.
fn small_buffer_connection(port: u16) -> TcpStream {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns until it hands it to
    // TcpStream; every pointer passed is to a live local of the right size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let size: libc::c_int = 4096;
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "setsockopt: {}", std::io::Error::last_os_error());
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let connected = libc::connect(
            fd,
            (&raw const address).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(connected, 0, "connect: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// Reads one chunk of a chunked HTTP body; `None` at its end.
fn read_chunk(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut size_line = String::new();
    reader.read_line(&mut size_line).unwrap();
    let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap(), 16)
        .unwrap_or_else(|_| panic!("not a chunk size: {size_line:?}"));
    if size == 0 {
        return None;
    }
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk).unwrap();
    chunk.truncate(size);
    Some(chunk)
}

#[test]
fn a_follower_that_falls_behind_gets_a_lagged_event_naming_what_it_missed() {
    // Enough that the socket's buffers and the follower's own (128 messages) overflow: the
    // daemon's send buffer is at most 4 MiB on Linux by default, about 250 of these messages.
    const MESSAGES: usize = 1000;
    let daemon = Daemon::start();
    let session = daemon.json(&["session", "new", "--name", "slow"]);
    let session_id = session["id"].as_str().unwrap().to_string();

    // Follow the inbox, read the response head, then stop reading.
    let mut stream = small_buffer_connection(daemon.port());
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /api/sessions/{session_id}/inbox?follow=true HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        daemon.host(),
        daemon.token()
    )
    .unwrap();
    let mut reader = BufReader::with_capacity(1024, stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );

    // Many large messages, queued through the store and delivered by the daemon while the
    // follower reads nothing: the socket fills, then the follower's buffer overflows.
    let text = "x".repeat(16 * 1024);
    let store = support::store_of(&daemon.data_dir);
    {
        let session_id = session_id.clone();
        store
            .write_blocking(move |tx| {
                for index in 0..MESSAGES {
                    tx.insert_message(&NewMessage {
                        session_id: session_id.clone(),
                        target: MessageTarget::Name("slow".to_string()),
                        text: format!("{index:05} {text}"),
                        provenance: Provenance {
                            event: "test".to_string(),
                            ..Provenance::default()
                        },
                        plugin: "test".to_string(),
                    })?;
                }
                Ok::<_, canopy_store::StoreError>(())
            })
            .unwrap();
    }
    let pending_left = |store: &Store| {
        let session_id = session_id.clone();
        store
            .read_blocking(move |rd| rd.next_pending_message(Some(&session_id)))
            .unwrap()
            .is_some()
    };
    wait_for(
        "every message to be delivered",
        Duration::from_secs(120),
        || (!pending_left(&store)).then_some(()),
    );

    // Now read: messages in order, at least one `lagged` event, and the stream goes on to the
    // last message; what was received plus what was reported missed is everything.
    let mut received: Vec<usize> = Vec::new();
    let mut missed: u64 = 0;
    let mut lagged_events = 0;
    let mut pending = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.len() as u64 + missed < MESSAGES as u64 {
        assert!(
            Instant::now() < deadline,
            "the stream stopped after {} messages and {missed} missed",
            received.len()
        );
        let chunk = read_chunk(&mut reader).expect("the stream ended early");
        pending.push_str(&String::from_utf8(chunk).unwrap());
        while let Some(end) = pending.find("\n\n") {
            let frame: String = pending.drain(..end + 2).collect();
            let mut event = "message".to_string();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = name.trim().to_string();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim());
                }
            }
            if data.is_empty() {
                // A keep-alive comment.
                continue;
            }
            match event.as_str() {
                "message" => {
                    let message: Value = serde_json::from_str(&data).unwrap();
                    let text = message["text"].as_str().unwrap();
                    received.push(text[..5].parse().unwrap());
                }
                "lagged" => {
                    let lag: Value = serde_json::from_str(&data).unwrap();
                    let count = lag["missed"].as_u64().expect("lagged names `missed`");
                    assert!(count > 0, "{lag}");
                    missed += count;
                    lagged_events += 1;
                }
                other => panic!("unexpected event `{other}`: {frame}"),
            }
        }
    }
    assert!(lagged_events >= 1, "no lagged event");
    assert_eq!(received.len() as u64 + missed, MESSAGES as u64);
    assert!(
        received.windows(2).all(|pair| pair[0] < pair[1]),
        "messages out of order"
    );
    assert_eq!(
        received.last().copied(),
        Some(MESSAGES - 1),
        "the stream went on after the lag"
    );
}

#[test]
fn a_message_sent_by_hand_reaches_the_inbox_and_bad_sends_say_why() {
    let daemon = Daemon::start();
    daemon.ok(&["session", "new", "--name", "lead"]);
    let said = daemon.ok(&["session", "send", "lead", "review the login form"]);
    assert!(
        said.contains("queued message") && said.contains("lead"),
        "{said}"
    );
    let delivered = wait_status(
        &daemon,
        "lead",
        "review the login form",
        "delivered",
        Duration::from_secs(10),
    );
    assert_eq!(delivered["provenance"]["event"], "api", "{delivered}");
    // From stdin.
    let mut child = std::process::Command::new(support::CANOPY)
        .args(["--data-dir", daemon.data_dir.to_str().unwrap()])
        .args(["session", "send", "lead", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"line one\nline two\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    wait_status(
        &daemon,
        "lead",
        "line one\nline two\n",
        "delivered",
        Duration::from_secs(10),
    );

    let empty = daemon.fails(&["session", "send", "lead", "  "]);
    assert!(empty.contains("`TEXT` is empty"), "{empty}");
    let unknown = daemon.fails(&["session", "send", "nobody", "hello"]);
    assert!(unknown.contains("nobody"), "{unknown}");
    daemon.ok(&["session", "finish", "lead"]);
    let finished = daemon.fails(&["session", "send", "lead", "hello"]);
    assert!(
        finished.contains("is finished") && finished.contains("canopy session resume"),
        "{finished}"
    );
}
