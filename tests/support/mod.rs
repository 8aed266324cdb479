//! Shared fixtures for the end-to-end tests: a real `canopy` daemon on a temp data dir, the CLI
//! run against it, temp git repos, and the test plugins built by the host's build script.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `canopy` binary under test.
pub const CANOPY: &str = env!("CARGO_BIN_EXE_canopy");

/// `PATH` for the tools that build the examples: with the Node.js `.ci/run` installs under
/// `target/node` first, when it installed one (a system Node.js older than componentize-js
/// needs).
pub fn tool_path() -> std::ffi::OsString {
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/node/node_modules/.bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !node.is_dir() {
        return path;
    }
    let mut dirs = vec![node];
    dirs.extend(std::env::split_paths(&path));
    std::env::join_paths(dirs).unwrap_or(path)
}

/// The Python the tests drive (the MCP SDK, componentize-py): the one in the venv `.ci/run`
/// makes under `target/test-venv` when there is one, else `python3` on `PATH`.
pub fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python3");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

/// The SDK example plugin (`plugins/examples/append-file`), built for wasm32-wasip2.
pub const APPEND_FILE_WASM: &str = env!("CANOPY_EXAMPLE_APPEND_FILE_WASM");
/// An executor built against `canopy:hooks@0.1.0` with plain wit-bindgen
/// (`tests/plugins/contract-v0_1`).
pub const CONTRACT_V0_1_WASM: &str = env!("CANOPY_TEST_CONTRACT_V0_1_WASM");
/// The misbehaving test plugin (`tests/plugins/hostile`).
pub const HOSTILE_WASM: &str = env!("CANOPY_TEST_HOSTILE_WASM");
/// A test plugin claiming the `command` mode (`tests/plugins/impostor`).
pub const IMPOSTOR_WASM: &str = env!("CANOPY_TEST_IMPOSTOR_WASM");
/// An executor that does nothing (`tests/plugins/noop`).
pub const NOOP_WASM: &str = env!("CANOPY_TEST_NOOP_WASM");
/// An executor whose `describe` sleeps a minute (`tests/plugins/slow-describe`).
pub const SLOW_DESCRIBE_WASM: &str = env!("CANOPY_TEST_SLOW_DESCRIBE_WASM");

/// Polls `check` until it returns `Some`, failing the test after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The backend the tests' daemons run on: `CANOPY_TEST_BACKEND=postgres` runs each on a
/// PostgreSQL database of its own (on a throwaway server, see `canopy_store::pg::cluster`);
/// otherwise SQLite in the data dir, as a user's daemon does by default.
pub fn on_postgres() -> bool {
    std::env::var("CANOPY_TEST_BACKEND").is_ok_and(|b| b == "postgres")
}

/// On PostgreSQL: the database of the daemon of `data_dir`, made on its first start and kept
/// (in `test-database` beside it) for its restarts.
fn test_database(data_dir: &Path) -> Option<String> {
    if !on_postgres() {
        return None;
    }
    let kept = data_dir.join("test-database");
    if let Ok(url) = std::fs::read_to_string(&kept) {
        return Some(url);
    }
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    std::fs::write(&kept, &url).unwrap();
    Some(url)
}

/// The store of the daemon of `data_dir`, opened beside it as a tool would: `canopy.db` there,
/// or on the PostgreSQL pass the database the daemon runs on. For what the API cannot do (a
/// record as an older canopy left it, a state no request makes).
#[allow(dead_code)]
pub fn store_of(data_dir: &Path) -> canopy_store::Store {
    match test_database(data_dir) {
        // A node name of its own: the daemon's is held by the daemon.
        Some(url) => canopy_store::Store::open_postgres(&url, "test-harness").unwrap(),
        None => canopy_store::Store::open(&data_dir.join("canopy.db")).unwrap(),
    }
}

/// A running daemon on its own temp data dir; stopped (SIGTERM) on drop.
pub struct Daemon {
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    child: Option<Child>,
    pub url: String,
    /// The API token the daemon wrote to `daemon.token`.
    token: String,
    log: PathBuf,
}

/// A response to [`Daemon::raw`].
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// The header lines, as sent.
    pub head: String,
    /// The body parsed as JSON (`Null` if it is not JSON).
    pub body: Value,
}

impl RawResponse {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

impl Daemon {
    /// A daemon on a fresh data dir.
    pub fn start() -> Self {
        Self::start_with_config("")
    }

    /// A daemon on a fresh data dir with this `canopy.toml`.
    pub fn start_with_config(config: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        if !config.is_empty() {
            std::fs::write(data_dir.join("canopy.toml"), config).unwrap();
        }
        let mut daemon = Self::start_on(&data_dir);
        daemon._tmp = Some(tmp);
        daemon
    }

    /// A daemon on a fresh data dir with this `canopy.toml` and these variables in its
    /// environment.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        std::fs::write(data_dir.join("canopy.toml"), config).unwrap();
        let mut daemon = Self::start_on_with_env(&data_dir, env);
        daemon._tmp = Some(tmp);
        daemon
    }

    /// A daemon on an existing data dir (a restart).
    pub fn start_on(data_dir: &Path) -> Self {
        Self::start_on_with_env(data_dir, &[])
    }

    /// A daemon on an existing data dir with these variables in its environment.
    pub fn start_on_with_env(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        let address = data_dir.join("daemon.addr");
        let _ = std::fs::remove_file(&address);
        let log = data_dir.join(format!("daemon-{}.log", std::process::id()));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut command = Command::new(CANOPY);
        command
            .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("CANOPY_LOG", "info");
        if let Some(url) = test_database(data_dir) {
            command.env("CANOPY_DATABASE_URL", url);
        }
        let child = command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let mut daemon = Self {
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
            child: Some(child),
            url: String::new(),
            token: String::new(),
            log,
        };
        daemon.url = wait_for(
            "the daemon to write its address",
            Duration::from_secs(60),
            || {
                if let Some(Ok(Some(status))) = daemon.child.as_mut().map(Child::try_wait) {
                    panic!(
                        "the daemon exited with {status} before listening:\n{}",
                        daemon.log()
                    );
                }
                std::fs::read_to_string(&address)
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            },
        );
        // Written before the address.
        daemon.token = std::fs::read_to_string(data_dir.join("daemon.token"))
            .unwrap()
            .trim()
            .to_string();
        assert!(!daemon.token.is_empty(), "the daemon wrote an empty token");
        daemon
    }

    /// The API token (`Authorization: Bearer <token>`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Reads the token again from the data dir (after `daemon rotate-token`).
    pub fn reread_token(&mut self) {
        self.token = std::fs::read_to_string(self.data_dir.join("daemon.token"))
            .unwrap()
            .trim()
            .to_string();
    }

    /// `host:port` of the daemon, as in its URL (`127.0.0.1:PORT`).
    pub fn host(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// The daemon's process id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The daemon's port.
    pub fn port(&self) -> u16 {
        self.host().rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Sends exactly this request over a fresh connection: `METHOD path HTTP/1.1`, these header
    /// lines and nothing else (no Host, no token unless given; `Content-Length` when there is a
    /// body, and `Connection: close`), then the body. For requests a well-behaved client would not
    /// send: a browser's, a rebinding page's.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.host()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP answer: {}", String::from_utf8_lossy(&answer)));
        let head = String::from_utf8_lossy(&answer[..split]).into_owned();
        let mut payload = answer[split + 4..].to_vec();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head}"));
        let mut response = RawResponse {
            status,
            head,
            body: Value::Null,
        };
        if response
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        {
            payload = dechunk(&payload);
        }
        response.body = serde_json::from_slice(&payload).unwrap_or(Value::Null);
        response
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `canopy --data-dir D <args>`.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(CANOPY)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Starts `canopy --data-dir D <args>` in the background, its stdout and stderr piped.
    pub fn spawn_cli(&self, args: &[&str]) -> Child {
        Command::new(CANOPY)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Runs the CLI and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.cli(args);
        assert!(
            output.status.success(),
            "canopy {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs the CLI and expects failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let output = self.cli(args);
        assert!(
            !output.status.success(),
            "canopy {args:?} unexpectedly succeeded:\nstdout: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).unwrap()
    }

    /// Runs the CLI with `--json` appended and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// GET a JSON resource; returns (status, body).
    pub fn get(&self, path: &str) -> (u16, Value) {
        let response = reqwest::blocking::Client::new()
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Sends JSON with `method`; returns (status, body).
    pub fn send(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let client = reqwest::blocking::Client::new();
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Adds a spec (tagged body around `name`) over the API; returns its id.
    pub fn add_spec(&self, name: &str) -> String {
        let (status, spec) = self.send(
            "POST",
            "/api/specs",
            &serde_json::json!({ "name": name, "body": spec_body(name) }),
        );
        assert_eq!(status, 201, "{spec}");
        spec["id"].as_str().unwrap().to_string()
    }

    /// Creates a graph over the API; returns `graph get`.
    pub fn create_graph(&self, graph: Value) -> Value {
        let (status, body) = self.send("POST", "/api/graphs", &graph);
        assert_eq!(status, 201, "{body}");
        body
    }

    /// `graph_control`; returns (status, body).
    pub fn control(&self, graph: &str, request: Value) -> (u16, Value) {
        self.send("POST", &format!("/api/graphs/{graph}/control"), &request)
    }

    /// `graph_control` that must succeed; returns `graph get`.
    pub fn control_ok(&self, graph: &str, request: Value) -> Value {
        let (status, view) = self.control(graph, request);
        assert_eq!(status, 200, "{view}");
        view
    }

    /// The hook runs of `source` (`graph`, `config`, `project`), oldest first, once `count` of
    /// them have ended (none queued or running); waits at most 90 s.
    pub fn ended_hook_runs(&self, source: &str, count: usize) -> Vec<Value> {
        self.ended_hook_runs_where(&format!("source={source}"), count)
    }

    /// The hook runs `query` selects (`event=tool.pre_call`), oldest first, once `count` of
    /// them have ended (none queued or running); waits at most 90 s.
    pub fn ended_hook_runs_where(&self, query: &str, count: usize) -> Vec<Value> {
        wait_for(
            &format!("{count} ended hook runs of {query}"),
            Duration::from_secs(90),
            || {
                let (_, answer) = self.get(&format!("/api/hook-runs?{query}&last=1000"));
                let mut runs = answer["runs"].as_array().cloned().unwrap_or_default();
                let done = runs.len() >= count
                    && runs
                        .iter()
                        .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running")));
                runs.reverse();
                done.then_some(runs)
            },
        )
    }

    /// The webhook listener's base URL, once it has written it to `webhooks.addr`.
    pub fn webhooks_url(&self) -> String {
        wait_for(
            "the webhook listener's address",
            Duration::from_secs(60),
            || {
                std::fs::read_to_string(self.data_dir.join("webhooks.addr"))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            },
        )
    }

    /// Waits until the graph is no longer running; returns `graph get`.
    pub fn settled(&self, graph: &str) -> Value {
        wait_for(
            &format!("graph {graph} to stop running"),
            Duration::from_secs(60),
            || {
                let (_, view) = self.get(&format!("/api/graphs/{graph}"));
                (view["status"] != "running").then_some(view)
            },
        )
    }

    /// Stops the daemon as planned, with no drain budget (`POST /api/shutdown` with
    /// `timeout_secs = 0`: what still runs is forced at once and recorded interrupted), and
    /// waits for it. Falls back to SIGTERM when the API does not answer.
    pub fn stop(&mut self) {
        if self.child.is_none() {
            return;
        }
        let asked = reqwest::blocking::Client::new()
            .post(format!("{}/api/shutdown", self.url))
            .bearer_auth(&self.token)
            .json(&serde_json::json!({ "timeout_secs": 0 }))
            .timeout(Duration::from_secs(10))
            .send()
            .is_ok_and(|r| r.status().is_success());
        if asked {
            self.wait_exit(Duration::from_secs(30));
        } else {
            self.sigterm();
        }
    }

    /// Stops the daemon with SIGTERM (a planned stop with the default 30 s drain budget) and
    /// waits for it.
    pub fn sigterm(&mut self) {
        if let Some(child) = &self.child {
            // SAFETY: signalling our own child process by pid.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
        }
        self.wait_exit(Duration::from_secs(60));
    }

    /// Waits for the daemon's process to exit; kills it and fails the test after `limit`.
    fn wait_exit(&mut self, limit: Duration) {
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + limit;
            loop {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("the daemon did not stop within {limit:?}:\n{}", self.log());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Kills the daemon with SIGKILL (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

/// Decodes a chunked HTTP body.
fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
    out
}

/// `canopy plugin run NAME [--mode MODE] --config CONFIG [--marker k=v]... --workdir DIR --json`:
/// Ok(report) when the call ran (also when its outcome is a failure), else Err(stderr).
pub fn plugin_run(
    daemon: &Daemon,
    name: &str,
    mode: Option<&str>,
    config: &Value,
    markers: &[(&str, &str)],
    workdir: &Path,
) -> Result<Value, String> {
    let config = config.to_string();
    let workdir = workdir.to_string_lossy().into_owned();
    let marker_args: Vec<String> = markers.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec![
        "plugin",
        "run",
        name,
        "--config",
        &config,
        "--workdir",
        &workdir,
        "--json",
    ];
    if let Some(mode) = mode {
        args.extend(["--mode", mode]);
    }
    for marker in &marker_args {
        args.extend(["--marker", marker.as_str()]);
    }
    let output = daemon.cli(&args);
    serde_json::from_slice(&output.stdout)
        .map_err(|_| String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A spec body in the tagged format, with `objective` as its objective.
pub fn spec_body(objective: &str) -> String {
    let mut body = format!("<spec>\n<objective>\n{objective}\n</objective>\n");
    for tag in &canopy_model::spec_format::SECTIONS[1..] {
        body.push_str(&format!("<{tag}>\n- {tag}\n</{tag}>\n"));
    }
    body + "</spec>\n"
}

/// A temp dir holding a git repo with one commit.
pub fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .env("GIT_AUTHOR_NAME", "Canopy Test")
            .env("GIT_AUTHOR_EMAIL", "test@canopy.invalid")
            .env("GIT_COMMITTER_NAME", "Canopy Test")
            .env("GIT_COMMITTER_EMAIL", "test@canopy.invalid")
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("README.md"), "# demo\n").unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "pub fn demo() {}\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "initial"]);
    dir
}

/// Writes an executable script.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `canonicalize` as a string.
pub fn real(path: &Path) -> String {
    path.canonicalize().unwrap().to_string_lossy().into_owned()
}
