//! The MCP server, driven by a real MCP client (the official Python SDK, `tests/mcp/drive.py`)
//! over stdio (`canopy mcp`, launched by the SDK) and over streamable HTTP (`/mcp` on the
//! daemon): tools listed, specs, a queue and a graph with a hook made through tools, a run over
//! the queue followed with graph_get to the end, a tool error naming its field, a resource read
//! and its change notification. Plus `/mcp`'s front door: the token and the Origin are checked
//! as on every route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::{CANOPY, Daemon, git_repo, wait_for};

use std::io::Read as _;

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/mcp/drive.py");

/// Runs the driver with `args`; its JSON report. Fails the test with its stderr when it fails.
fn drive(args: &[&str]) -> Value {
    let mut child = Command::new(support::python())
        .arg(DRIVER)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (with the MCP SDK: .ci/run installs it in target/test-venv)");
    // Read both pipes while it runs, so a full pipe never stalls it.
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).unwrap();
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let output = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("drive.py {args:?} did not finish in 180 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(
        output.success(),
        "drive.py {args:?} failed ({output}):\n{stderr}\n{stdout}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}"))
}

/// What both transports must show: the run went through both queued specs, the hook fired,
/// the bad queue was named, and the feed records the run as the agent's.
fn check(seen: &Value, daemon: &Daemon, hook_file: &Path) {
    assert_eq!(seen["server"], "canopy");
    assert_eq!(seen["tools"].as_array().unwrap().len(), 18, "{seen}");
    let error = seen["error"].as_str().unwrap();
    assert!(
        error.contains("field `queue_id`") && error.contains("no-such-queue"),
        "the error names the field and the value: {error}"
    );
    assert_eq!(seen["status"], "completed", "{}", seen["view"]);
    assert_eq!(
        seen["view"]["progress_summary"]["completed"], 2,
        "{}",
        seen["view"]
    );
    assert_eq!(seen["updates"], json!(["canopy://graphs/web"]));
    assert_eq!(seen["run_started_actors"], json!(["agent"]));
    assert_eq!(seen["sessions"], json!(["lead"]));
    let inbox = wait_for(
        "the message session_send queued to be delivered",
        Duration::from_secs(30),
        || {
            let inbox = daemon.json(&["session", "inbox", "lead"]);
            (inbox["messages"][0]["status"] == "delivered").then_some(inbox)
        },
    );
    assert_eq!(inbox["messages"][0]["id"], seen["message_id"], "{inbox}");
    assert_eq!(inbox["messages"][0]["text"], "review the login form");
    let fired = wait_for(
        "the on_completed hook to write",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(hook_file)
                .ok()
                .filter(|t| !t.is_empty())
        },
    );
    assert_eq!(fired, "completed web\n");
    assert_eq!(seen["hook_runs"], json!(["completed"]), "{seen}");
    // What the tools made is what the CLI sees.
    let queue = daemon.json(&["queue", "show", "sprint-1"]);
    assert_eq!(queue["members"].as_array().unwrap().len(), 2, "{queue}");
}

#[test]
fn an_agent_drives_a_graph_over_a_queue_through_canopy_mcp_on_stdio() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let hook_file = repo.path().join("hook.log");
    daemon.ok(&["session", "new", "--name", "lead"]);
    let data_dir = daemon.data_dir.to_str().unwrap().to_string();
    let seen = drive(&[
        "stdio",
        CANOPY,
        &data_dir,
        repo.path().to_str().unwrap(),
        hook_file.to_str().unwrap(),
    ]);
    check(&seen, &daemon, &hook_file);

    // A client of protocol 2026-07-28 (the SDK's default `Client`): no session, changes on a
    // `subscriptions/listen` stream.
    let modern = drive(&["modern", CANOPY, &data_dir]);
    assert_eq!(modern["protocol"], "2026-07-28", "{modern}");
    let error = modern["error"].as_str().unwrap();
    assert!(
        error.contains("field `nodes`") && error.contains("sideways"),
        "{error}"
    );
    assert_eq!(modern["honored"], json!(["canopy://graphs/web"]));
    assert_eq!(modern["event"], "canopy://graphs/web");
}

#[test]
fn an_agent_drives_a_graph_over_a_queue_through_the_daemons_mcp_endpoint() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let hook_file = repo.path().join("hook.log");
    daemon.ok(&["session", "new", "--name", "lead"]);
    let url = format!("{}/mcp", daemon.url);
    let seen = drive(&[
        "http",
        &url,
        daemon.token(),
        repo.path().to_str().unwrap(),
        hook_file.to_str().unwrap(),
    ]);
    check(&seen, &daemon, &hook_file);
    // A client that ends its session as clients do leaves no error in the daemon's log (which
    // `canopy status` would list as a recent problem).
    let log = daemon.log();
    assert!(
        !log.lines().any(|l| l.contains("ERROR")),
        "an error logged for a normal MCP session:\n{log}"
    );
}

/// The headers of an MCP client's POST to `host`, and `extra`.
fn headers<'a>(host: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    headers
}

/// An MCP `initialize`, as a client POSTs it.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[test]
fn the_mcp_endpoint_wants_the_token_and_no_foreign_origin() {
    let daemon = Daemon::start();
    let host = daemon.host().to_string();
    let bearer = format!("Bearer {}", daemon.token());
    let mcp_headers = |extra: &[(&'static str, &'static str)]| headers(&host, extra);
    let refused = daemon.raw("POST", "/mcp", &mcp_headers(&[]), INITIALIZE.as_bytes());
    assert_eq!(refused.status, 401, "{:?}", refused.body);
    // A JSON-RPC error, which MCP clients display; the API's code is in its data.
    assert_eq!(refused.body["jsonrpc"], "2.0");
    assert_eq!(refused.body["error"]["code"], -32001);
    assert_eq!(refused.body["error"]["data"]["code"], "unauthorized");

    let foreign = daemon.raw(
        "POST",
        "/mcp",
        &headers(
            &host,
            &[
                ("Authorization", &bearer),
                ("Origin", "http://evil.example"),
            ],
        ),
        INITIALIZE.as_bytes(),
    );
    assert_eq!(foreign.status, 403, "{:?}", foreign.body);
    assert_eq!(foreign.body["error"]["data"]["code"], "forbidden_origin");

    let get = daemon.raw(
        "GET",
        "/mcp",
        &[("Host", host.as_str()), ("Accept", "text/event-stream")],
        b"",
    );
    assert_eq!(get.status, 401, "the event stream is guarded too");

    let welcome = daemon.raw(
        "POST",
        "/mcp",
        &headers(&host, &[("Authorization", &bearer)]),
        INITIALIZE.as_bytes(),
    );
    assert_eq!(welcome.status, 200, "{}", welcome.head);
    assert!(
        welcome.head.to_ascii_lowercase().contains("mcp-session-id"),
        "{}",
        welcome.head
    );
}

/// `canopy mcp` as an agent CLI runs it: JSON-RPC lines on its stdin and stdout.
struct StdioClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl StdioClient {
    /// Launches `canopy --data-dir D mcp` and does the MCP handshake.
    fn start(data_dir: &Path) -> Self {
        let mut child = Command::new(CANOPY)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines() {
                if send.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut client = Self {
            stdin: child.stdin.take().unwrap(),
            child,
            lines,
            next_id: 0,
        };
        let init = client.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "test", "version": "1" }
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "canopy", "{init}");
        client.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        client
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write as _;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("canopy mcp answers within a minute");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Calls a tool: (isError, the text it answered).
    fn call(&mut self, tool: &str, arguments: Value) -> (bool, String) {
        let answer = self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        );
        let result = &answer["result"];
        (
            result["isError"] == true,
            result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn canopy_mcp_starts_before_the_daemon_and_outlives_its_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut mcp = StdioClient::start(&data_dir);

    let (failed, text) = mcp.call("graph_list", json!({}));
    assert!(failed, "{text}");
    assert!(
        text.contains("no canopy daemon is running")
            && text.contains("canopy daemon start --data-dir"),
        "{text}"
    );

    let mut daemon = Daemon::start_on(&data_dir);
    let (failed, text) = mcp.call("spec_list", json!({}));
    assert!(!failed, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({ "specs": [] })
    );
    daemon.add_spec("Login form");

    // A new daemon writes a new address and token: the next call finds them.
    daemon.stop();
    let _restarted = Daemon::start_on(&data_dir);
    let (failed, text) = mcp.call("spec_list", json!({}));
    assert!(!failed, "{text}");
    let specs: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(specs["specs"][0]["name"], "Login form", "{specs}");
}

#[test]
fn one_token_holds_a_bounded_number_of_mcp_sessions() {
    let daemon = Daemon::start();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "cap-test", "version": "1" } }
    });
    let open = || {
        client
            .post(format!("{}/mcp", daemon.url))
            .bearer_auth(daemon.token())
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .unwrap()
    };
    let mut ids = Vec::new();
    for _ in 0..64 {
        let answer = open();
        assert_eq!(answer.status().as_u16(), 200);
        ids.push(
            answer.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    let refused = open();
    assert_eq!(refused.status().as_u16(), 429);
    let body: Value = refused.json().unwrap();
    assert_eq!(body["error"]["code"], "too_many_sessions", "{body}");
    // Closing one makes room.
    let closed = client
        .delete(format!("{}/mcp", daemon.url))
        .bearer_auth(daemon.token())
        .header("mcp-session-id", &ids[0])
        .send()
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert_eq!(open().status().as_u16(), 200);
    let (status, _) = daemon.get("/api/health");
    assert_eq!(status, 200);
}
