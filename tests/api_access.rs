//! Who may use the API, and how it answers what it cannot take: the real `canopy` binary,
//! hostile requests replayed byte for byte (a web page's, a DNS-rebinding page's), the data dir's
//! permissions, query-string errors, the CLI writing into a closed pipe, and a client that
//! connects and sends nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

/// The names of the installed plugins.
fn plugin_names(daemon: &Daemon) -> Vec<String> {
    let list = daemon.json(&["plugin", "list"]);
    list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// The error code and message of an API error body.
fn error_of(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an API error: {body}")),
        body["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("not an API error: {body}")),
    )
}

fn bearer(daemon: &Daemon) -> String {
    format!("Bearer {}", daemon.token())
}

#[test]
fn a_web_page_cannot_install_a_plugin() {
    let daemon = Daemon::start();
    let before = plugin_names(&daemon);
    let wasm = std::fs::read(APPEND_FILE_WASM).unwrap();
    let host = daemon.host().to_string();
    let path = "/api/plugins?grant=fs-write:.&replace=true";

    // What a page on https://evil.example sends with `fetch(url, {method: "POST", body})`: a
    // "simple" request (text/plain, no preflight), its Origin, no token.
    let browser = daemon.raw(
        "POST",
        path,
        &[
            ("Host", &host),
            ("Origin", "https://evil.example"),
            ("Content-Type", "text/plain;charset=UTF-8"),
        ],
        &wasm,
    );
    assert_eq!(browser.status, 403, "{:?}", browser);
    assert_eq!(error_of(&browser.body).0, "forbidden_origin");

    // The same page after rebinding evil.example to 127.0.0.1: same-origin, so its own Host.
    let port = daemon.port();
    let rebound_host = format!("evil.example:{port}");
    let rebound_origin = format!("http://evil.example:{port}");
    let rebound = daemon.raw(
        "POST",
        path,
        &[
            ("Host", &rebound_host),
            ("Origin", &rebound_origin),
            ("Content-Type", "text/plain"),
        ],
        &wasm,
    );
    assert_eq!(rebound.status, 403, "{:?}", rebound);
    assert_eq!(error_of(&rebound.body).0, "forbidden_host");

    // No Origin, right Host, still no token.
    let anonymous = daemon.raw(
        "POST",
        path,
        &[("Host", &host), ("Content-Type", "application/wasm")],
        &wasm,
    );
    assert_eq!(anonymous.status, 401, "{:?}", anonymous);

    assert_eq!(plugin_names(&daemon), before);
    assert!(!before.contains(&"append-file".to_string()));

    // The CLI, with the token, installs it (the positive control).
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    assert!(plugin_names(&daemon).contains(&"append-file".to_string()));
}

#[test]
fn only_requests_addressed_to_the_daemon_are_answered() {
    let daemon = Daemon::start();
    let token = bearer(&daemon);
    let port = daemon.port();
    let host = daemon.host().to_string();

    let evil = daemon.raw(
        "GET",
        "/api/health",
        &[("Host", "evil.example"), ("Authorization", &token)],
        b"",
    );
    assert_eq!(evil.status, 403, "{:?}", evil);
    let (code, message) = error_of(&evil.body);
    assert_eq!(code, "forbidden_host");
    assert!(message.contains("`evil.example`"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");

    let other_port = format!("127.0.0.1:{}", port.wrapping_add(1));
    for bad in ["evil.example", &format!("evil.example:{port}"), &other_port] {
        let answer = daemon.raw(
            "GET",
            "/api/health",
            &[("Host", bad), ("Authorization", &token)],
            b"",
        );
        assert_eq!(answer.status, 403, "Host {bad}: {:?}", answer);
    }
    let missing = daemon.raw("GET", "/api/health", &[("Authorization", &token)], b"");
    assert_eq!(missing.status, 403, "{:?}", missing);
    assert_eq!(error_of(&missing.body).0, "forbidden_host");
    // An absolute-form target naming another host.
    let absolute = daemon.raw(
        "GET",
        "http://evil.example/api/health",
        &[("Host", &host), ("Authorization", &token)],
        b"",
    );
    assert_eq!(absolute.status, 403, "{:?}", absolute);

    for good in [
        host.clone(),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
    ] {
        let answer = daemon.raw(
            "GET",
            "/api/health",
            &[("Host", &good), ("Authorization", &token)],
            b"",
        );
        assert_eq!(answer.status, 200, "Host {good}: {:?}", answer);
        assert_eq!(answer.body["status"], "ok");
    }
}

#[test]
fn every_request_needs_the_token() {
    let daemon = Daemon::start();
    let host = daemon.host().to_string();
    let token_file = daemon.data_dir.canonicalize().unwrap().join("daemon.token");

    let none = daemon.raw("GET", "/api/plugins", &[("Host", &host)], b"");
    assert_eq!(none.status, 401, "{:?}", none);
    let (code, message) = error_of(&none.body);
    assert_eq!(code, "unauthorized");
    assert!(message.contains("Authorization: Bearer"), "{message}");
    assert!(message.contains("the CLI reads it from there"), "{message}");
    assert!(
        message.contains(&token_file.display().to_string()),
        "{message}"
    );
    assert_eq!(
        none.header("www-authenticate"),
        Some("Bearer realm=\"canopy\"")
    );

    let wrong = daemon.raw(
        "GET",
        "/api/plugins",
        &[("Host", &host), ("Authorization", "Bearer 00")],
        b"",
    );
    assert_eq!(wrong.status, 401, "{:?}", wrong);
    assert!(error_of(&wrong.body).1.starts_with("wrong API token"));

    // The right length but not the token; another scheme carrying the token.
    let almost = format!("Bearer {}", "0".repeat(daemon.token().len()));
    let basic = format!("Basic {}", daemon.token());
    for header in [almost.as_str(), basic.as_str()] {
        let answer = daemon.raw(
            "GET",
            "/api/plugins",
            &[("Host", &host), ("Authorization", header)],
            b"",
        );
        assert_eq!(answer.status, 401, "{header}: {:?}", answer);
    }
    // An MCP client without the token gets a JSON-RPC error it can show, saying what is missing
    // and where the token is.
    let mcp = daemon.raw(
        "POST",
        "/mcp",
        &[("Host", &host), ("Content-Type", "application/json")],
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    );
    assert_eq!(mcp.status, 401, "{:?}", mcp);
    assert_eq!(mcp.body["jsonrpc"], "2.0", "{:?}", mcp);
    let said = mcp.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("missing API token") && said.contains("daemon.token"),
        "{said}"
    );
    // Unknown routes are behind the token too.
    let unknown = daemon.raw("GET", "/api/nope", &[("Host", &host)], b"");
    assert_eq!(unknown.status, 401, "{:?}", unknown);

    let right = daemon.raw(
        "GET",
        "/api/health",
        &[("Host", &host), ("Authorization", &bearer(&daemon))],
        b"",
    );
    assert_eq!(right.status, 200, "{:?}", right);
    assert_eq!(
        right.body["version"],
        env!("CARGO_PKG_VERSION"),
        "{:?}",
        right
    );

    // The one exception: a liveness probe without a token learns that the daemon is up, and
    // nothing else; a wrong token there is still refused, and so is a foreign Host.
    let live = daemon.raw("GET", "/api/health", &[("Host", &host)], b"");
    assert_eq!(live.status, 200, "{:?}", live);
    assert_eq!(live.body, json!({ "status": "ok" }));
    let wrong_live = daemon.raw(
        "GET",
        "/api/health",
        &[("Host", &host), ("Authorization", "Bearer 00")],
        b"",
    );
    assert_eq!(wrong_live.status, 401, "{:?}", wrong_live);
    let rebound = daemon.raw("GET", "/api/health", &[("Host", "evil.example")], b"");
    assert_eq!(rebound.status, 403, "{:?}", rebound);
}

#[test]
fn the_token_is_private_kept_across_restarts_and_replaced_only_when_asked() {
    // A hook whose process tries to rotate the token (with its call token).
    let mut daemon = Daemon::start_with_config(&format!(
        "[[hooks]]\nname = \"rotator\"\nevent = \"spec.created\"\naction = {{ command = \"{} daemon rotate-token 2>&1\" }}\n",
        support::CANOPY
    ));
    let token_file = daemon.data_dir.join("daemon.token");
    let first = daemon.token().to_string();
    assert_eq!(first.len(), 64, "{first}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    // The positive control: the CLI reads the token and works.
    let list = daemon.ok(&["plugin", "list"]);
    assert!(list.contains("command"), "{list}");

    // A restart keeps it: a configured HTTP client (MCP) goes on working.
    daemon.stop();
    let data_dir = daemon.data_dir.clone();
    let mut restarted = Daemon::start_on(&data_dir);
    assert_eq!(restarted.token(), first);
    let with = |daemon: &Daemon, token: &str| {
        daemon
            .raw(
                "GET",
                "/api/status",
                &[
                    ("Host", daemon.host()),
                    ("Authorization", &format!("Bearer {token}")),
                ],
                b"",
            )
            .status
    };
    assert_eq!(with(&restarted, &first), 200);

    // Rotated through the running daemon: the old token is refused at once, the CLI reads the
    // new one.
    let said = restarted.ok(&["daemon", "rotate-token"]);
    assert!(said.contains("a new API token is in force"), "{said}");
    let second = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert_ne!(second, first);
    restarted.reread_token();
    assert_eq!(with(&restarted, &first), 401);
    assert_eq!(with(&restarted, &second), 200);
    restarted.ok(&["plugin", "list"]);
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert!(
        !restarted.log().contains(&second),
        "the token reached the log"
    );

    // A hook's process, with its call token, may not lock its user out.
    restarted.add_spec("rotate");
    let hook = &restarted.ended_hook_runs("config", 1)[0];
    assert_eq!(hook["status"], "failed", "{hook}");
    assert!(
        hook.to_string()
            .contains("may not rotate the daemon's token; only its user may"),
        "{hook}"
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), second);

    // With no daemon running, a rotation writes the file the next start uses.
    restarted.stop();
    let said = restarted.ok(&["daemon", "rotate-token"]);
    assert!(said.contains("which its next start uses"), "{said}");
    let third = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert_ne!(third, second);
    let mut again = Daemon::start_on(&data_dir);
    assert_eq!(again.token(), third);

    // A token file others could read is not reused, even though the start tightens its mode.
    again.stop();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut loosened = Daemon::start_on(&data_dir);
    assert_ne!(loosened.token(), third);
    assert!(
        loosened
            .log()
            .contains("readable or writable by other users"),
        "{}",
        loosened.log()
    );

    // A symlink planted in its place, to a file holding a token the planter knows: neither
    // reused nor written through.
    loosened.stop();
    let planted = tempfile::tempdir().unwrap();
    let known = planted.path().join("known");
    std::fs::write(&known, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&known, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(&token_file).unwrap();
    std::os::unix::fs::symlink(&known, &token_file).unwrap();
    let fresh = Daemon::start_on(&data_dir);
    assert_ne!(fresh.token(), "ab".repeat(32));
    assert_eq!(
        std::fs::read_to_string(&known).unwrap().trim(),
        "ab".repeat(32)
    );
    assert!(
        !std::fs::symlink_metadata(&token_file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fresh.ok(&["plugin", "list"]);

    // Without the token file the CLI says where it looked and what to do.
    std::fs::remove_file(&token_file).unwrap();
    let err = fresh.fails(&["plugin", "list"]);
    assert!(err.contains("cannot read the daemon's API token"), "{err}");
    assert!(err.contains("daemon.token"), "{err}");
    assert!(err.contains("restart the daemon"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_foreign_origin_is_refused_even_with_the_token() {
    let daemon = Daemon::start();
    let host = daemon.host().to_string();
    let token = bearer(&daemon);
    let body = serde_json::to_vec(&json!({ "name": "evil", "body": spec_body("evil") })).unwrap();

    for origin in ["https://evil.example", "null", "http://127.0.0.1:1"] {
        let answer = daemon.raw(
            "POST",
            "/api/specs",
            &[
                ("Host", &host),
                ("Origin", origin),
                ("Authorization", &token),
                ("Content-Type", "application/json"),
            ],
            &body,
        );
        assert_eq!(answer.status, 403, "Origin {origin}: {:?}", answer);
        let (code, message) = error_of(&answer.body);
        assert_eq!(code, "forbidden_origin");
        assert!(message.contains(&format!("`{origin}`")), "{message}");
    }
    let (_, specs) = daemon.get("/api/specs");
    assert_eq!(specs["specs"], json!([]));

    // The daemon's own origin is fine.
    let own = format!("http://{host}");
    let answer = daemon.raw(
        "POST",
        "/api/specs",
        &[
            ("Host", &host),
            ("Origin", &own),
            ("Authorization", &token),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    assert_eq!(answer.status, 201, "{:?}", answer);
}

#[test]
fn bodies_must_be_json_except_the_component_of_an_install() {
    let daemon = Daemon::start();
    let host = daemon.host().to_string();
    let token = bearer(&daemon);
    let body = serde_json::to_vec(&json!({ "name": "plain", "body": spec_body("plain") })).unwrap();

    let plain = daemon.raw(
        "POST",
        "/api/specs",
        &[
            ("Host", &host),
            ("Authorization", &token),
            ("Content-Type", "text/plain"),
        ],
        &body,
    );
    assert_eq!(plain.status, 415, "{:?}", plain);
    let (code, message) = error_of(&plain.body);
    assert_eq!(code, "unsupported_media_type");
    assert!(
        message.contains("Content-Type: application/json"),
        "{message}"
    );
    assert!(message.contains("`text/plain`"), "{message}");

    let untyped = daemon.raw(
        "PATCH",
        "/api/specs/x",
        &[("Host", &host), ("Authorization", &token)],
        &body,
    );
    assert_eq!(untyped.status, 415, "{:?}", untyped);
    assert!(error_of(&untyped.body).1.contains("no Content-Type"));

    // A DELETE with a form body.
    let form = daemon.raw(
        "DELETE",
        "/api/specs/x",
        &[
            ("Host", &host),
            ("Authorization", &token),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        b"a=b",
    );
    assert_eq!(form.status, 415, "{:?}", form);

    // The install route takes the component as application/wasm, and only that.
    let wasm = std::fs::read(APPEND_FILE_WASM).unwrap();
    let json_install = daemon.raw(
        "POST",
        "/api/plugins?grant=fs-write:.",
        &[
            ("Host", &host),
            ("Authorization", &token),
            ("Content-Type", "application/json"),
        ],
        &wasm,
    );
    assert_eq!(json_install.status, 415, "{:?}", json_install);
    assert!(
        error_of(&json_install.body)
            .1
            .contains("Content-Type: application/wasm"),
        "{:?}",
        json_install
    );

    // JSON with a charset is JSON; a request without a body needs no type.
    let charset = daemon.raw(
        "POST",
        "/api/specs",
        &[
            ("Host", &host),
            ("Authorization", &token),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        &body,
    );
    assert_eq!(charset.status, 201, "{:?}", charset);
    let id = charset.body["id"].as_str().unwrap().to_string();
    let bodiless = daemon.raw(
        "DELETE",
        &format!("/api/specs/{id}"),
        &[("Host", &host), ("Authorization", &token)],
        b"",
    );
    assert_eq!(bodiless.status, 200, "{:?}", bodiless);
}

/// Every file and folder under `dir` whose mode gives anything to group or others.
fn open_to_others(dir: &Path) -> Vec<String> {
    let mut open = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{} {mode:o}", path.display()));
        }
        if meta.is_dir() {
            open.extend(open_to_others(&path));
        }
    }
    open
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_data_dir_is_private() {
    let mut daemon = Daemon::start();
    daemon.ok(&[
        "plugin",
        "install",
        APPEND_FILE_WASM,
        "--grant",
        "fs-write:.",
    ]);
    let data_dir = daemon.data_dir.clone();
    // A call: its result file goes through tmp/.
    let workdir = tempfile::tempdir().unwrap();
    daemon.ok(&[
        "plugin",
        "run",
        "command",
        "--config",
        r#"{"command": "echo done > out.txt"}"#,
        "--workdir",
        workdir.path().to_str().unwrap(),
    ]);
    assert_eq!(mode_of(&data_dir), 0o700);
    // On the PostgreSQL pass the records are on the server: no canopy.db to look at.
    let database: &[&str] = if support::on_postgres() {
        &[]
    } else {
        &["canopy.db"]
    };
    for name in ["daemon.addr", "daemon.lock", "daemon.token"]
        .iter()
        .chain(database)
    {
        assert_eq!(mode_of(&data_dir.join(name)), 0o600, "{name}");
    }
    let wasm: Vec<_> = std::fs::read_dir(data_dir.join("plugins"))
        .unwrap()
        .collect();
    assert!(!wasm.is_empty());
    assert_eq!(open_to_others(&data_dir), Vec::<String>::new());

    // An older install's data dir, open to everyone, is tightened at the next start.
    daemon.stop();
    let status = Command::new("chmod")
        .args(["-R", "go+rwX"])
        .arg(&data_dir)
        .status()
        .unwrap();
    assert!(status.success());
    for name in database {
        assert_eq!(mode_of(&data_dir.join(name)), 0o666, "{name}");
    }
    let daemon = Daemon::start_on(&data_dir);
    daemon.ok(&[
        "plugin",
        "install",
        HOSTILE_WASM,
        "--grant",
        "process,fs-read,fs-write:.,network,sessions",
    ]);
    assert_eq!(mode_of(&data_dir), 0o700);
    for name in database {
        assert_eq!(mode_of(&data_dir.join(name)), 0o600, "{name}");
    }
    assert_eq!(open_to_others(&data_dir), Vec::<String>::new());
}

#[test]
fn query_string_errors_are_json_naming_the_parameter() {
    let daemon = Daemon::start();
    daemon.create_graph(
        json!({ "name": "g", "workdir": "/tmp", "nodes": [{ "name": "n", "command": "true" }] }),
    );
    let (status, session) = daemon.send("POST", "/api/sessions", &json!({ "name": "lead" }));
    assert_eq!(status, 201, "{session}");
    let session_id = session["id"].as_str().unwrap().to_string();

    let cases: Vec<(String, &str, &str)> = vec![
        (
            "/api/hook-runs?last=many".into(),
            "query parameter `last`",
            "`many`",
        ),
        (
            "/api/hook-runs?last=-1".into(),
            "query parameter `last`",
            "`-1`",
        ),
        (
            "/api/runs?last=many".into(),
            "query parameter `last`",
            "`many`",
        ),
        (
            "/api/graphs/g/node-runs?last=-1".into(),
            "query parameter `last`",
            "`-1`",
        ),
        (
            "/api/sessions?all=maybe".into(),
            "query parameter `all`",
            "`maybe`",
        ),
        (
            format!("/api/sessions/{session_id}/inbox?follow=maybe"),
            "query parameter `follow`",
            "`maybe`",
        ),
        (
            "/api/hook-runs?bogus=1".into(),
            "unknown query parameter `bogus`",
            "expected one of",
        ),
        (
            "/api/hooks/catalog?grph=g".into(),
            "unknown query parameter `grph`",
            "`graph`",
        ),
        (
            "/api/specs?work_dir=/tmp".into(),
            "unknown query parameter `work_dir`",
            "`workdir`",
        ),
        (
            "/api/messages?state=pending".into(),
            "unknown query parameter `state`",
            "`status`",
        ),
        (
            "/api/graphs/g/node-runs?graph=g".into(),
            "unknown query parameter `graph`",
            "`last`",
        ),
        (
            "/api/sessions?all=true&all=false".into(),
            "repeated query parameter `all`",
            "",
        ),
    ];
    for (path, names, detail) in &cases {
        let (status, body) = daemon.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        let (code, message) = error_of(&body);
        assert_eq!(code, "bad_request", "{path}");
        assert!(message.contains(names), "{path}: {message}");
        assert!(message.contains(detail), "{path}: {message}");
    }

    // The install query too (the body is the component).
    let answer = daemon.raw(
        "POST",
        "/api/plugins?replace=maybe",
        &[
            ("Host", daemon.host()),
            ("Authorization", &bearer(&daemon)),
            ("Content-Type", "application/wasm"),
        ],
        &std::fs::read(NOOP_WASM).unwrap(),
    );
    assert_eq!(answer.status, 400, "{:?}", answer);
    assert!(
        error_of(&answer.body)
            .1
            .contains("query parameter `replace`")
    );

    // A NUL character is in no name, id or value Canopy keeps (PostgreSQL's text cannot hold
    // one): refused at the door, naming where it was, never a server error.
    for (path, place) in [
        ("/api/runs?graph=a%00b&last=1", "the query string"),
        ("/api/graphs/a%00b", "the path"),
        ("/api/hook-runs?hook=h%00", "the query string"),
    ] {
        let (status, body) = daemon.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        let (code, message) = error_of(&body);
        assert_eq!(code, "bad_request", "{path}");
        assert!(
            message.starts_with(place) && message.contains("NUL"),
            "{path}: {message}"
        );
    }

    // Valid queries still work.
    for path in [
        "/api/hook-runs?last=5&graph=g",
        "/api/runs?graph=g&last=1",
        "/api/sessions?all=true",
        "/api/hooks/catalog?graph=g",
        "/api/messages?status=pending",
    ] {
        let (status, body) = daemon.get(path);
        assert_eq!(status, 200, "{path}: {body}");
    }
}

/// POSTs `size` bytes of `content_type` (a JSON string body for JSON) on a raw connection,
/// writing from a thread that stops at the first error (the daemon may answer and close before
/// it has read everything); returns the status and the JSON answer.
fn send_big(daemon: &Daemon, path: &str, content_type: &str, size: usize) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(daemon.host()).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nContent-Type: {content_type}\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n",
        daemon.host(),
        bearer(daemon)
    );
    let mut writer = stream.try_clone().unwrap();
    let body_start = if content_type == "application/json" {
        b"\"".to_vec()
    } else {
        Vec::new()
    };
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes());
        let _ = writer.write_all(&body_start);
        let chunk = vec![b'a'; 64 * 1024];
        let mut left = size - body_start.len();
        while left > 0 {
            let n = left.min(chunk.len());
            if writer.write_all(&chunk[..n]).is_err() {
                return;
            }
            left -= n;
        }
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
    let _ = sender.join();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no answer: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    (status, body)
}

#[test]
fn errors_axum_writes_itself_answer_in_the_apis_json_too() {
    let daemon = Daemon::start();
    let auth = bearer(&daemon);
    // A path that does not decode.
    let answer = daemon.raw(
        "GET",
        "/api/specs/%ff%fe",
        &[("Host", daemon.host()), ("Authorization", &auth)],
        b"",
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(error_of(&answer.body).0, "bad_request", "{answer:?}");
    // A JSON body over the limit: 413, not 400; a component over the plugin limit too.
    let (status, body) = send_big(&daemon, "/api/specs", "application/json", 3_600_000);
    assert_eq!(status, 413, "{body}");
    let (code, message) = error_of(&body);
    assert_eq!(code, "payload_too_large");
    assert!(message.contains("larger than the API takes"), "{message}");
    let (status, body) = send_big(&daemon, "/api/plugins", "application/wasm", 65 << 20);
    assert_eq!(status, 413, "{body}");
    assert_eq!(error_of(&body).0, "payload_too_large");
    let (status, _) = daemon.get("/api/health");
    assert_eq!(status, 200);
}

#[test]
fn unknown_routes_and_methods_answer_json() {
    let daemon = Daemon::start();
    for path in [
        "/api/nope",
        "/",
        "/api/plugins/command/nope",
        "/api/plugins/",
    ] {
        let (status, body) = daemon.get(path);
        assert_eq!(status, 404, "{path}: {body}");
        let (code, message) = error_of(&body);
        assert_eq!(code, "not_found");
        assert!(message.contains(&format!("GET {path}")), "{message}");
    }
    let (status, body) = daemon.send("DELETE", "/api/health", &json!({}));
    assert_eq!(status, 405, "{body}");
    let (code, message) = error_of(&body);
    assert_eq!(code, "method_not_allowed");
    assert!(
        message.contains("/api/health does not take DELETE"),
        "{message}"
    );

    let put = daemon.raw(
        "PUT",
        "/api/hook-runs",
        &[("Host", daemon.host()), ("Authorization", &bearer(&daemon))],
        b"",
    );
    assert_eq!(put.status, 405, "{:?}", put);
    assert_eq!(error_of(&put.body).0, "method_not_allowed");
    assert!(put.header("allow").unwrap().contains("GET"), "{:?}", put);
    assert!(
        put.header("content-type")
            .unwrap()
            .starts_with("application/json"),
        "{:?}",
        put
    );
}

#[test]
fn since_out_of_range_is_a_bad_request_not_a_dropped_connection() {
    let daemon = Daemon::start();
    // 60y reaches back before 1970 until 2030.
    let sixty_years = std::time::Duration::from_secs(60 * 31_557_600);
    let before_epoch = std::time::SystemTime::now()
        .checked_sub(sixty_years)
        .is_none_or(|t| t < std::time::UNIX_EPOCH);
    let mut inputs = vec!["100y", "18446744073709551615s"];
    if before_epoch {
        inputs.push("60y");
    }
    for since in inputs {
        let (status, body) = daemon.get(&format!("/api/hook-runs?since={since}"));
        assert_eq!(status, 400, "since={since}: {body}");
        let (code, message) = error_of(&body);
        assert_eq!(code, "bad_request");
        assert!(
            message.starts_with(&format!("query parameter `since`: `{since}` reaches back before 1970-01-01T00:00:00Z; give a duration of at most ")),
            "{message}"
        );
        assert!(message.contains("or a time from 1970 on"), "{message}");
    }
    let (status, body) = daemon.get("/api/hook-runs?since=1969-12-31T23:59:59Z");
    assert_eq!(status, 400, "{body}");
    let (status, body) = daemon.get("/api/hook-runs?since=soon");
    assert_eq!(status, 400, "{body}");
    assert!(error_of(&body).1.contains("`since`"));

    // The daemon still answers, and sensible values work.
    let (status, _) = daemon.get("/api/health");
    assert_eq!(status, 200);
    for since in ["10y", "2h", "1970-01-01T00:00:00Z"] {
        let (status, body) = daemon.get(&format!("/api/hook-runs?since={since}"));
        assert_eq!(status, 200, "since={since}: {body}");
    }
    // The CLI shows the message, naming the flag the user typed.
    let err = daemon.fails(&["hooks", "runs", "--since", "100y"]);
    assert!(
        err.contains("`--since`: `100y` reaches back before 1970"),
        "{err}"
    );
}

/// Runs the CLI with stdout a pipe whose reader goes away after `read` bytes; returns stderr.
fn cli_into_closed_pipe(daemon: &Daemon, args: &[&str], read: usize) -> String {
    use std::io::Read as _;
    let mut child = Command::new(CANOPY)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    if read > 0 {
        let mut buf = vec![0; read];
        let _ = stdout.read(&mut buf);
    }
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_ne!(output.status.code(), Some(101), "{stderr}");
    stderr
}

#[test]
fn the_cli_ends_quietly_when_its_output_pipe_closes() {
    let daemon = Daemon::start();
    for args in [
        &["plugin", "list", "--json"][..],
        &["plugin", "list"],
        &["hooks", "events"],
        &["hooks", "events", "--json"],
    ] {
        for read in [0, 16] {
            let stderr = cli_into_closed_pipe(&daemon, args, read);
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn a_client_that_connects_and_sends_nothing_is_cut_off_while_the_api_answers() {
    use std::io::{Read, Write};
    let daemon = Daemon::start();
    // Any local user can connect to the loopback API: one sends nothing, one stops halfway
    // through its headers (without the token they would not get past anyway).
    let mut silent = std::net::TcpStream::connect(daemon.host()).unwrap();
    let mut slow = std::net::TcpStream::connect(daemon.host()).unwrap();
    slow.write_all(b"GET /api/graphs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow")
        .unwrap();
    // Meanwhile the API answers.
    let (status, _) = daemon.get("/api/graphs");
    assert_eq!(status, 200);
    // Both are closed once their headers are overdue (30 s), well within the minute.
    for stream in [&mut silent, &mut slow] {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let mut buf = [0u8; 256];
        match stream.read(&mut buf) {
            Ok(n) => assert!(
                n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
                "the daemon answered a request it never got: {}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(err) => assert!(
                !matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "the daemon kept a silent connection open for a minute"
            ),
        }
    }
    let (status, _) = daemon.get("/api/graphs");
    assert_eq!(status, 200);
}
