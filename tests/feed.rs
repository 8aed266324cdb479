//! The feed end to end: an event of every family with its whole envelope and a payload its
//! schema accepts; the SSE stream (and `canopy feed --follow`) resuming after a dropped
//! connection with nothing skipped or repeated; who caused an event, as the CLI says; and bad
//! queries named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{CANOPY, Daemon, NOOP_WASM, git_repo, real, script, spec_body, wait_for};

/// Every event in the feed, oldest first.
fn all_events(daemon: &Daemon) -> Vec<Value> {
    let (status, answer) = daemon.get("/api/feed?last=1000");
    assert_eq!(status, 200, "{answer}");
    answer["events"].as_array().unwrap().clone()
}

/// The feed's events named `event`.
fn named<'a>(events: &'a [Value], event: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == event).collect()
}

/// Waits until the feed has an event named `event` that `check` accepts; returns it.
fn wait_event(daemon: &Daemon, event: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(
        &format!("a {event} event in the feed"),
        Duration::from_secs(30),
        || {
            all_events(daemon)
                .into_iter()
                .find(|e| e["event"] == event && check(e))
        },
    )
}

/// Has the built-in `interactive` executor queue `text` for the live session called `session`.
fn send_message(daemon: &Daemon, workdir: &Path, session: &str, text: &str) {
    let (status, report) = daemon.send(
        "POST",
        "/api/plugins/interactive/run",
        &json!({ "config": { "prompt": text, "target_session_name": session }, "workdir": workdir }),
    );
    assert_eq!(status, 200, "{report}");
}

/// The errors of `payload` against the payload schema the taxonomy gives `event`.
fn schema_errors(event: &str, payload: &Value) -> Vec<String> {
    let def = canopy_model::events::find(event)
        .unwrap_or_else(|| panic!("{event} is not in the taxonomy"));
    let schema = (def.payload_schema)();
    let validator = jsonschema::validator_for(schema.as_value())
        .unwrap_or_else(|err| panic!("the schema of {event} does not compile: {err}"));
    validator
        .iter_errors(payload)
        .map(|err| format!("{}: {err}", err.instance_path))
        .collect()
}

#[test]
fn every_family_reaches_the_feed_with_its_envelope_and_a_payload_its_schema_accepts() {
    // Every tmux call fails: a message for a pane is kept as undeliverable.
    let shim = tempfile::tempdir().unwrap();
    script(shim.path(), "tmux", "echo 'no server running' >&2; exit 1");
    let path = format!(
        "{}:{}",
        shim.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let daemon = Daemon::start_with_env("", &[("PATH", path.as_str())]);
    let repo = git_repo();
    let workdir = real(repo.path());

    // spec.*, graph.*, node.*, and hook.* from the graph's hook.
    let spec = daemon.add_spec("Login form");
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [spec],
        "nodes": [{ "name": "build", "command": "true" }],
        "hooks": { "on_completed": [{ "command": "true" }] }
    }));
    daemon.control_ok("web", json!({ "action": "run" }));
    assert_eq!(daemon.settled("web")["status"], "completed");

    // session.*: one inbox delivered to, one pane that cannot be reached.
    daemon.ok(&["session", "new", "--name", "lead"]);
    let created = daemon.cli(&[
        "session",
        "new",
        "--name",
        "pane",
        "--tmux-target",
        "gone:0.0",
    ]);
    // Recorded, with a warning that the pane cannot be reached now.
    let warned = String::from_utf8_lossy(&created.stderr);
    assert!(
        created.status.success()
            && warned.contains("warning: tmux pane `gone:0.0` cannot be reached now"),
        "{created:?}"
    );
    send_message(&daemon, repo.path(), "lead", "hello");
    send_message(&daemon, repo.path(), "pane", "lost");
    wait_event(&daemon, "session.message.delivered", |_| true);
    wait_event(&daemon, "session.message.undeliverable", |_| true);
    daemon.ok(&["session", "finish", "lead"]);

    // plugin.*: install and remove one, disable (remove a built-in) and enable another.
    daemon.ok(&["plugin", "install", NOOP_WASM]);
    let installed = wait_event(&daemon, "plugin.installed", |_| true);
    let noop = installed["target"].as_str().unwrap().to_string();
    daemon.ok(&["plugin", "remove", &noop]);
    daemon.ok(&["plugin", "remove", "docs-maintenance"]);
    daemon.ok(&["plugin", "enable", "docs-maintenance"]);
    wait_event(&daemon, "hook.run.completed", |_| true);

    let events = all_events(&daemon);
    let expected = [
        "spec.created",
        "spec.completed",
        "graph.created",
        "graph.run.started",
        "graph.run.completed",
        "node.started",
        "node.completed",
        "hook.run.completed",
        "session.created",
        "session.finished",
        "session.message.queued",
        "session.message.delivered",
        "session.message.undeliverable",
        "plugin.installed",
        "plugin.removed",
        "plugin.disabled",
        "plugin.enabled",
    ];
    let seen: BTreeSet<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for name in expected {
        assert!(seen.contains(name), "no {name} in the feed: {seen:?}");
    }
    let families: BTreeSet<&str> = events.iter().filter_map(|e| e["family"].as_str()).collect();
    assert_eq!(
        families,
        BTreeSet::from(["graph", "hook", "node", "plugin", "session", "spec"])
    );

    // Every envelope, whole.
    let node = events[0]["node"].as_str().unwrap().to_string();
    assert!(!node.is_empty());
    let mut last_id = 0;
    for event in &events {
        let fields: BTreeSet<&str> = event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            fields,
            BTreeSet::from([
                "actor",
                "dispatch_depth",
                "event",
                "family",
                "id",
                "node",
                "payload",
                "project",
                "target",
                "timestamp"
            ]),
            "{event}"
        );
        let id = event["id"].as_i64().unwrap();
        assert!(id > last_id, "ids grow: {id} after {last_id}");
        last_id = id;
        assert_eq!(event["node"], node.as_str(), "{event}");
        let name = event["event"].as_str().unwrap();
        let def = canopy_model::events::find(name).unwrap();
        assert_eq!(event["family"], def.family.as_str(), "{event}");
        let timestamp = event["timestamp"].as_str().unwrap();
        assert!(
            timestamp.ends_with('Z') && humantime::parse_rfc3339(timestamp).is_ok(),
            "not an RFC 3339 UTC time: {timestamp}"
        );
        assert!(
            event["target"].as_str().is_some_and(|t| !t.is_empty()),
            "{event}"
        );
        match def.family.as_str() {
            // A hook run's end is its hook's doing, one level deeper than the event that fired it.
            "hook" => {
                assert_eq!(event["actor"], "hook:web.on_completed[0]", "{event}");
                assert_eq!(event["dispatch_depth"], 1, "{event}");
            }
            _ => {
                assert_eq!(event["actor"], "user", "{event}");
                assert_eq!(event["dispatch_depth"], 0, "{event}");
            }
        }
        match def.family.as_str() {
            "graph" | "node" | "hook" => assert_eq!(event["project"], workdir.as_str(), "{event}"),
            // Sessions and plugins belong to no project (these messages came from no run).
            "session" | "plugin" => assert!(event["project"].is_null(), "{event}"),
            _ => {}
        }
        let errors = schema_errors(name, &event["payload"]);
        assert!(
            errors.is_empty(),
            "{name}: {errors:?}\n{}",
            event["payload"]
        );
    }

    // What the events are about.
    let target = |name: &str| -> Vec<&str> {
        named(&events, name)
            .iter()
            .filter_map(|e| e["target"].as_str())
            .collect()
    };
    assert_eq!(target("spec.created"), [spec.as_str()]);
    assert_eq!(target("graph.run.completed"), ["web"]);
    assert_eq!(target("session.created"), ["lead", "pane"]);
    assert_eq!(target("session.finished"), ["lead"]);
    assert_eq!(target("session.message.delivered"), ["lead"]);
    assert_eq!(target("session.message.undeliverable"), ["pane"]);
    assert_eq!(target("plugin.disabled"), ["docs-maintenance"]);
    assert_eq!(target("plugin.enabled"), ["docs-maintenance"]);
    assert_eq!(target("plugin.removed"), [noop.as_str()]);
    let lost = named(&events, "session.message.undeliverable")[0];
    assert!(
        lost["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no server running")),
        "{lost}"
    );
    let queued = named(&events, "session.message.queued");
    let delivered = named(&events, "session.message.delivered");
    assert_eq!(
        queued[0]["payload"]["message_id"],
        delivered[0]["payload"]["message_id"]
    );

    // Filters: a family, an event glob, a project.
    let (_, sessions) = daemon.get("/api/feed?family=session");
    assert!(
        sessions["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["family"] == "session")
    );
    assert_eq!(sessions["events"].as_array().unwrap().len(), 7);
    let (_, runs) = daemon.get("/api/feed?event=graph.run.*");
    let names: Vec<&str> = runs["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(names, ["graph.run.started", "graph.run.completed"]);
    assert_eq!(runs["head"], last_id);
    let (_, project) = daemon.get(&format!("/api/feed?project={workdir}&last=1000"));
    assert!(
        project["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["project"] == workdir.as_str())
    );
    assert!(!project["events"].as_array().unwrap().is_empty());

    // The CLI shows the same events, one line each.
    let text = daemon.ok(&["feed", "--family", "plugin"]);
    let lines: Vec<&str> = text.lines().collect();
    // A header, then one line per event.
    assert!(lines[0].starts_with("TIME (UTC)"), "{text}");
    assert_eq!(lines.len(), 5, "{text}");
    let words: Vec<&str> = lines[2].split_whitespace().collect();
    assert!(
        words[2..4] == ["user", "plugin.removed"] && lines[2].contains(&noop),
        "{text}"
    );
}

/// An SSE connection to the daemon, read frame by frame.
struct Stream {
    reader: BufReader<TcpStream>,
    pending: String,
}

/// One SSE event.
#[derive(Debug)]
struct Frame {
    event: String,
    id: Option<i64>,
    data: Value,
}

impl Stream {
    fn open(daemon: &Daemon, path: &str, last_event_id: Option<i64>) -> Self {
        let mut stream = TcpStream::connect(daemon.host()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let resume = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n{resume}\r\n",
            daemon.host(),
            daemon.token()
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
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
                .contains("content-type: text/event-stream"),
            "{head}"
        );
        Self {
            reader,
            pending: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped).
    fn next(&mut self) -> Frame {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let frame: String = self.pending.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), None, String::new());
                for line in frame.lines() {
                    if let Some(name) = line.strip_prefix("event:") {
                        event = name.trim().to_string();
                    } else if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().parse().unwrap());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Frame {
                    event,
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                };
            }
            // One chunk of the chunked body.
            let mut size_line = String::new();
            self.reader.read_line(&mut size_line).unwrap();
            let size = usize::from_str_radix(size_line.trim(), 16)
                .unwrap_or_else(|_| panic!("not a chunk size: {size_line:?}"));
            assert!(size > 0, "the stream ended");
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk).unwrap();
            chunk.truncate(size);
            self.pending.push_str(&String::from_utf8(chunk).unwrap());
        }
    }

    /// The ids of the next `count` feed events.
    fn ids(&mut self, count: usize) -> Vec<i64> {
        (0..count)
            .map(|_| {
                let frame = self.next();
                assert_eq!(frame.event, "feed", "{frame:?}");
                assert_eq!(frame.id, frame.data["id"].as_i64(), "{frame:?}");
                frame.id.unwrap()
            })
            .collect()
    }
}

/// The feed's newest cursor.
fn head(daemon: &Daemon) -> i64 {
    daemon.get("/api/feed?last=0").1["head"].as_i64().unwrap()
}

#[test]
fn a_follower_resumes_after_a_reconnect_with_nothing_skipped_or_repeated() {
    let daemon = Daemon::start();
    for name in ["one", "two", "three"] {
        daemon.add_spec(name);
    }
    // From the start: the backlog, then live events.
    let mut stream = Stream::open(&daemon, "/api/feed?follow=true&since=0", None);
    let mut ids = stream.ids(usize::try_from(head(&daemon)).unwrap());
    daemon.add_spec("four");
    daemon.add_spec("five");
    ids.extend(stream.ids(2));
    drop(stream);

    // Events while nobody follows, then a reconnect that says where it left off: the URL's
    // `since` is the first connection's; the Last-Event-ID wins.
    for name in ["six", "seven", "eight"] {
        daemon.add_spec(name);
    }
    let last = *ids.last().unwrap();
    let mut stream = Stream::open(&daemon, "/api/feed?follow=true&since=0", Some(last));
    ids.extend(stream.ids(usize::try_from(head(&daemon) - last).unwrap()));
    daemon.add_spec("nine");
    ids.extend(stream.ids(1));

    let all: Vec<i64> = all_events(&daemon)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, all, "every event once, in order");
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|pair| pair[1] == pair[0] + 1), "{all:?}");

    // Filters hold for live events: a spec's event passes by, a session's is sent.
    let mut sessions = Stream::open(&daemon, "/api/feed?follow=true&family=session&last=0", None);
    daemon.add_spec("ten");
    daemon.ok(&["session", "new", "--name", "lead"]);
    let frame = sessions.next();
    assert_eq!(frame.event, "feed");
    assert_eq!(frame.data["event"], "session.created", "{frame:?}");
    assert_eq!(frame.data["target"], "lead");
    assert_eq!(frame.id, Some(head(&daemon)));
}

#[test]
fn feed_follow_reconnects_across_a_daemon_restart_and_ctrl_c_ends_it() {
    let mut daemon = Daemon::start();
    daemon.add_spec("before");
    let mut child = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(["feed", "--follow", "--json", "--since", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut printed: Vec<Value> = Vec::new();
    let mut wait_printed = |what: &str, check: &dyn Fn(&Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if printed.iter().any(check) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = received
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("`canopy feed --follow` printed no {what}"));
            printed.push(serde_json::from_str(&line).unwrap());
        }
    };
    wait_printed("spec `before`", &|e| e["payload"]["spec_name"] == "before");

    // The daemon goes away and comes back (on another port, with another token).
    daemon.stop();
    let restarted = Daemon::start_on(&daemon.data_dir);
    restarted.add_spec("after");
    wait_printed("spec `after`", &|e| e["payload"]["spec_name"] == "after");
    let ids: Vec<i64> = printed.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    let all: Vec<i64> = all_events(&restarted)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, all, "every event once, in order, across the restart");

    // Ctrl-C ends it cleanly.
    // SAFETY: signalling our own child process by pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = wait_for("feed --follow to exit", Duration::from_secs(10), || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
    reader.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("error"), "{stderr}");
    // The drop is said once, however many tries it took, and so is the return.
    assert_eq!(
        stderr
            .matches("the feed stream from the daemon ended; reconnecting")
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("reconnected to the feed stream").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_cli_call_from_a_hook_is_recorded_as_that_hook_one_level_deeper() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let body = dir.path().join("spec.md");
    std::fs::write(&body, spec_body("From a hook")).unwrap();
    // A hook whose process calls the CLI, once through the engine and once through sessions;
    // its environment claims another actor and depth, which its call token overrides.
    let canopy = format!("{CANOPY} --data-dir {}", data.display());
    std::fs::write(
        data.join("canopy.toml"),
        format!(
            "[[hooks]]\nname = \"x\"\nevent = \"spec.created\"\nmatch = {{ spec_name = \"trigger\" }}\naction = {{ command = \"CANOPY_ACTOR=cron:y CANOPY_DISPATCH_DEPTH=9 {canopy} spec add --name 'From a hook' --file {body} && {canopy} session new --name scribe\" }}\n",
            body = body.display()
        ),
    )
    .unwrap();
    let daemon = Daemon::start_on(&data);
    // One by the user, for contrast, then the spec that fires the hook.
    daemon.ok(&["session", "new", "--name", "person"]);
    daemon.add_spec("trigger");
    let events = wait_for("the hook's events", Duration::from_secs(60), || {
        let events = all_events(&daemon);
        (events.iter().filter(|e| e["family"] != "hook").count() >= 4).then_some(events)
    });
    let who: Vec<(&str, &str, i64)> = events
        .iter()
        .filter(|e| e["family"] != "hook")
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["actor"].as_str().unwrap(),
                e["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        who,
        [
            ("session.created", "user", 0),
            ("spec.created", "user", 0),
            ("spec.created", "hook:x", 1),
            ("session.created", "hook:x", 1),
        ]
    );
    // The CLI shows who.
    let text = daemon.ok(&["feed", "--event", "spec.*"]);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[2..6]
                == ["hook:x", "(depth", "1)", "spec.created"]),
        "{text}"
    );
}

#[test]
fn bad_query_values_are_refused_naming_the_parameter_and_what_it_takes() {
    let daemon = Daemon::start();
    let cases = [
        (
            "since=yesterday",
            "query parameter `since`: `yesterday` is neither a cursor",
        ),
        ("since=-4", "query parameter `since`"),
        (
            "since=9223372036854775808",
            "query parameter `since`: `9223372036854775808` is past the largest cursor there can be (9223372036854775807)",
        ),
        (
            "family=grph",
            "query parameter `family`: unknown family `grph`; did you mean `graph`? (the families are graph, spec, node, hook, session, plugin, cron, webhook, project, agent, tool)",
        ),
        (
            "event=graph.ran",
            "query parameter `event`: `graph.ran` matches no event",
        ),
        (
            "last=5000",
            "query parameter `last`: `5000` is more than 1000",
        ),
        (
            "last=many",
            "query parameter `last`: `many` is not a number from 0 to 1000",
        ),
        ("project=", "query parameter `project`: it is empty"),
        ("follow=yes", "query parameter `follow`"),
        ("evnt=spec.*", "unknown query parameter `evnt`"),
    ];
    for (query, message) in cases {
        let (status, body) = daemon.get(&format!("/api/feed?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{query}");
        let text = body["error"]["message"].as_str().unwrap();
        assert!(text.starts_with(message), "{query}: {text}");
    }
    // A resume from something that is not a cursor.
    let response = daemon.raw(
        "GET",
        "/api/feed?follow=true",
        &[
            ("Host", daemon.host()),
            ("Authorization", &format!("Bearer {}", daemon.token())),
            ("Last-Event-ID", "abc"),
        ],
        b"",
    );
    assert_eq!(response.status, 400);
    assert!(
        response.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("header `Last-Event-ID`: `abc` is not a feed cursor"),
        "{:?}",
        response.body
    );
    // The CLI names its own arguments.
    let stderr = daemon.fails(&["feed", "--family", "grph"]);
    assert!(
        stderr.contains("`--family`: unknown family `grph`"),
        "{stderr}"
    );
    let stderr = daemon.fails(&["feed", "--follow", "--since", "soon"]);
    assert!(stderr.contains("`--since`: `soon` is neither"), "{stderr}");
    // A stream from --since sends all after it: a count with it is refused, not ignored.
    let stderr = daemon.fails(&["feed", "--follow", "--since", "2h", "--last", "3"]);
    assert!(
        stderr.contains("`--last`: a stream from `since` sends every event after it, so `last` does not apply there"),
        "{stderr}"
    );
    // Over HTTP too: the daemon refuses it, it does not ignore `last`.
    let (status, answer) = daemon.get("/api/feed?follow=true&since=0&last=3");
    assert_eq!(status, 400, "{answer}");
}
