//! MCP round trips: `cargo bench --bench mcp`.
//!
//! A real daemon on a temp data dir holds a graph that ran over a queue of 100 specs (one
//! `command` node, `true`). `canopy mcp` is launched as an agent CLI launches it, the MCP
//! handshake is done by hand on its stdin/stdout (JSON-RPC, one message a line), then
//! `tools/call graph_get` is timed, one call at a time, from writing the request line to
//! reading the answer's line. For comparison, the same view straight from the API
//! (`GET /api/graphs/web` on a kept-alive connection): the difference is what MCP adds.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{CANOPY, Daemon, git_repo};

const SPECS: usize = 100;
const CALLS: usize = 2000;
const WARM_UP: usize = 200;

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: {} calls, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(at(1.0))
    );
}

/// `canopy mcp` after the handshake: one JSON-RPC line in, one out.
struct McpChild {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl McpChild {
    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "canopy mcp ended"
            );
            let answer: Value = serde_json::from_str(&line).unwrap();
            // Notifications (none are subscribed here) would come in between.
            if answer["id"] == id {
                return answer;
            }
        }
    }
}

fn main() {
    let daemon = Daemon::start();
    let repo = git_repo();
    println!(
        "canopy MCP benchmark: a real daemon, a graph that ran over a queue of {SPECS} specs\n"
    );

    let specs: Vec<String> = (0..SPECS)
        .map(|i| daemon.add_spec(&format!("Spec {i}")))
        .collect();
    let (status, queue) = daemon.send(
        "POST",
        "/api/queues",
        &json!({ "name": "backlog", "specs": specs }),
    );
    assert_eq!(status, 201, "{queue}");
    daemon.create_graph(json!({
        "name": "web", "workdir": repo.path(), "specs": [],
        "nodes": [{ "name": "build", "command": "true" }],
    }));
    daemon.control_ok("web", json!({ "action": "run", "queue_id": "backlog" }));
    let view = daemon.settled("web");
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["progress_summary"]["completed"], SPECS, "{view}");

    let mut child = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut mcp = McpChild {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        child,
        next_id: 0,
    };
    let init = mcp.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "bench", "version": "1" }
        }),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "canopy", "{init}");
    mcp.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));

    let call = json!({ "name": "graph_get", "arguments": { "graph": "web" } });
    let first = mcp.request("tools/call", call.clone());
    assert_eq!(first["result"]["isError"], false, "{first}");
    let text = first["result"]["content"][0]["text"].as_str().unwrap();
    println!("graph_get answer: {} bytes of JSON", text.len());
    for _ in 0..WARM_UP {
        mcp.request("tools/call", call.clone());
    }
    let samples: Vec<Duration> = (0..CALLS)
        .map(|_| {
            let started = Instant::now();
            let answer = mcp.request("tools/call", call.clone());
            let took = started.elapsed();
            assert!(answer["result"]["content"].is_array(), "{answer}");
            took
        })
        .collect();
    report("MCP tools/call graph_get over stdio (canopy mcp)", samples);

    let http = reqwest::blocking::Client::new();
    let url = format!("{}/api/graphs/web", daemon.url);
    let get = || {
        let response = http.get(&url).bearer_auth(daemon.token()).send().unwrap();
        assert_eq!(response.status(), 200);
        response.bytes().unwrap()
    };
    for _ in 0..WARM_UP {
        get();
    }
    let samples: Vec<Duration> = (0..CALLS)
        .map(|_| {
            let started = Instant::now();
            get();
            started.elapsed()
        })
        .collect();
    report("the API's GET /api/graphs/web (kept-alive HTTP)", samples);

    drop(mcp.stdin);
    let _ = mcp.child.wait();
}
