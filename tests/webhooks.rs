//! Webhook ingress end to end: a real daemon with `[webhooks]` in its canopy.toml, real HTTP
//! requests to its webhook listener, real handler processes, and the `canopy webhooks` CLI.
//! Tokens from each source (a rotated file without a restart), both header forms, GitHub's
//! HMAC signature, 401 and 413, every handler, trigger rules, `?wait=true`, redelivery, a crash
//! between accept and run, `nodes` routing, `webhooks test`, and no secret in any log or output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, NOOP_WASM, script, wait_for};

/// A response: status, headers' text, body text.
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut request = client.post(url).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    Answer {
        status,
        body: response.text().unwrap_or_default(),
    }
}

/// Sends an unauthenticated POST declaring a 1 GB body to `path` of `base`, writing it in
/// chunks (`pause` between them) until the listener closes the connection, which it must do
/// within 30 s.
fn endless_body(base: &str, path: &str, pause: Duration) {
    use std::io::Write as _;
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 1000000000\r\n\r\n"
    )
    .unwrap();
    let chunk = if pause.is_zero() {
        vec![b'a'; 64 * 1024]
    } else {
        vec![b'a'; 1]
    };
    let started = std::time::Instant::now();
    loop {
        match stream.write_all(&chunk) {
            Ok(()) => {}
            Err(err) => {
                // Closed by the listener (a reset or a broken pipe), not left open unread.
                assert!(
                    !matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "the listener stopped reading the body but kept the connection open"
                );
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the listener kept reading an endless body for 30 s"
        );
        std::thread::sleep(pause);
    }
}

/// GitHub's `X-Hub-Signature-256` of a body.
fn sign(secret: &str, body: &[u8]) -> String {
    canopy_core::webhooks::auth::sign(secret.as_bytes(), body)
}

/// One delivery, by id, once it has ended.
fn ended(daemon: &Daemon, id: &str) -> Value {
    wait_for(
        &format!("delivery {id} to end"),
        Duration::from_secs(60),
        || {
            let (_, delivery) = daemon.get(&format!("/api/webhooks/deliveries/{id}"));
            (!matches!(
                delivery["status"].as_str(),
                Some("accepted" | "running") | None
            ))
            .then_some(delivery)
        },
    )
}

/// `KEY=value` lines (of `env`), as a map.
fn env_file(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Everything the daemon logged: its stderr and its daemon.log.
fn all_logs(daemon: &Daemon) -> String {
    let mut text = daemon.log();
    for name in ["daemon.log", "daemon.log.1", "daemon.log.2"] {
        text.push_str(&std::fs::read_to_string(daemon.data_dir.join(name)).unwrap_or_default());
    }
    text
}

const INLINE_TOKEN: &str = "inline-token-7f3c9a0e51d4";
const ENV_TOKEN: &str = "env-token-b2e84d6c1a97";
const FILE_TOKEN_1: &str = "file-token-one-4c1d8e2f";
const FILE_TOKEN_2: &str = "file-token-two-9a7b3c5d";
const HMAC_SECRET: &str = "hmac-secret-e5f1a2b3c4";

#[test]
fn tokens_from_every_source_both_headers_hmac_401_413_and_no_secret_leaks() {
    let out = tempfile::tempdir().unwrap();
    let seen = out.path().join("seen.txt");
    let config = format!(
        r#"
node = "n1"
[webhooks]
bind_port = 0
token_file = "tokens/section.token"

[webhooks.entries.inline]
type = "command"
token = "{INLINE_TOKEN}"
command = "env > {seen}"

[webhooks.entries.env]
type = "command"
token_env = "HOOK_TOKEN_B"
command = "true"

[webhooks.entries.file]
type = "command"
command = "true"

[webhooks.entries.signed]
type = "command"
token = "{INLINE_TOKEN}"
hmac_secret_file = "{hmac_file}"
command = "true"

[webhooks.entries.small]
type = "command"
token = "{INLINE_TOKEN}"
max_body_bytes = 100
command = "true"
"#,
        seen = seen.display(),
        hmac_file = out.path().join("hmac.secret").display(),
    );
    std::fs::write(out.path().join("hmac.secret"), format!("{HMAC_SECRET}\n")).unwrap();
    let daemon = Daemon::start_with_env(&config, &[("HOOK_TOKEN_B", ENV_TOKEN)]);
    // The section's token file is read per request: it need not exist at start.
    let tokens = daemon.data_dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    std::fs::write(tokens.join("section.token"), format!("{FILE_TOKEN_1}\n")).unwrap();
    let base = daemon.webhooks_url();
    let url = |id: &str| format!("{base}/hooks/global/{id}");
    let bearer = |token: &str| format!("Bearer {token}");

    // Inline token, as a bearer token and in X-Canopy-Hook-Token.
    let answer = post(
        &format!("{}?wait=true", url("inline")),
        &[("Authorization", &bearer(INLINE_TOKEN)), ("X-Test", "1")],
        b"{\"hello\": 1}",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    // A sender that also puts the token in the query string: it is not recorded there either.
    let answer = post(
        &format!("{}?token={INLINE_TOKEN}&x=1", url("inline")),
        &[("X-Canopy-Hook-Token", INLINE_TOKEN)],
        b"x",
    );
    assert_eq!(answer.status, 202, "{}", answer.body);
    let accepted = answer.json();
    assert_eq!(accepted["status"], "accepted");
    assert_eq!(accepted["delivery_id"].as_str().unwrap().len(), 32);
    // The handler's environment holds no token and no auth header.
    ended(&daemon, accepted["delivery_id"].as_str().unwrap());
    let env = std::fs::read_to_string(&seen).unwrap();
    assert!(env.contains("CANOPY_HOOK_DELIVERY_ID="), "{env}");
    assert!(
        !env.contains(INLINE_TOKEN),
        "a token reached the handler: {env}"
    );
    assert!(!env.to_ascii_lowercase().contains("authorization"), "{env}");
    assert!(!env.contains("HOOK_TOKEN"), "{env}");
    assert!(env.contains("token=%28redacted%29&x=1"), "{env}");
    let shown = daemon.ok(&[
        "webhooks",
        "delivery",
        accepted["delivery_id"].as_str().unwrap(),
    ]);
    assert!(
        shown.contains("webhook   global/inline")
            && shown.contains("request   POST /hooks/global/inline?token=%28redacted%29&x=1"),
        "{shown}"
    );

    // A token from the daemon's environment.
    assert_eq!(
        post(&url("env"), &[("Authorization", &bearer(ENV_TOKEN))], b"").status,
        202
    );
    assert_eq!(
        post(
            &url("env"),
            &[("Authorization", &bearer(INLINE_TOKEN))],
            b""
        )
        .status,
        401
    );

    // The section's token file, rotated without a restart.
    assert_eq!(
        post(
            &url("file"),
            &[("Authorization", &bearer(FILE_TOKEN_1))],
            b""
        )
        .status,
        202
    );
    std::fs::write(tokens.join("section.token"), format!("{FILE_TOKEN_2}\n")).unwrap();
    assert_eq!(
        post(
            &url("file"),
            &[("Authorization", &bearer(FILE_TOKEN_1))],
            b""
        )
        .status,
        401
    );
    assert_eq!(
        post(&url("file"), &[("X-Canopy-Hook-Token", FILE_TOKEN_2)], b"").status,
        202
    );
    // A missing token file refuses every request (and says why in the log only).
    std::fs::remove_file(tokens.join("section.token")).unwrap();
    let refused = post(
        &url("file"),
        &[("Authorization", &bearer(FILE_TOKEN_2))],
        b"",
    );
    assert_eq!((refused.status, refused.body.as_str()), (401, ""));

    // 401 carries no detail, whatever failed.
    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Authorization", "Basic abc")],
        vec![("X-Canopy-Hook-Token", "")],
    ] {
        let answer = post(&url("inline"), &headers, b"{}");
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (401, ""),
            "{headers:?}"
        );
    }

    // HMAC: a good signature passes, a bad or missing one is 401; the token is still needed.
    let body = br#"{"ref":"refs/heads/main"}"#;
    let auth = ("X-Canopy-Hook-Token", INLINE_TOKEN);
    let good = sign(HMAC_SECRET, body);
    assert_eq!(
        post(
            &url("signed"),
            &[auth, ("X-Hub-Signature-256", &good)],
            body
        )
        .status,
        202
    );
    let tampered = br#"{"ref":"refs/heads/evil"}"#;
    let bad = post(
        &url("signed"),
        &[auth, ("X-Hub-Signature-256", &good)],
        tampered,
    );
    assert_eq!((bad.status, bad.body.as_str()), (401, ""));
    assert_eq!(post(&url("signed"), &[auth], body).status, 401);
    assert_eq!(
        post(
            &url("signed"),
            &[auth, ("X-Hub-Signature-256", "sha256=zz")],
            body
        )
        .status,
        401
    );
    assert_eq!(
        post(&url("signed"), &[("X-Hub-Signature-256", &good)], body).status,
        401
    );

    // 413 past max_body_bytes (declared or streamed); unauthenticated, 401 before the body.
    assert_eq!(post(&url("small"), &[auth], &[b'a'; 100]).status, 202);
    let large = post(&url("small"), &[auth], &[b'a'; 101]);
    assert_eq!(large.status, 413, "{}", large.body);
    assert_eq!(post(&url("small"), &[], &[b'a'; 101]).status, 401);
    // A body over the default 1 MiB.
    assert_eq!(
        post(&url("inline"), &[auth], &vec![b'a'; 1024 * 1024 + 1]).status,
        413
    );
    // A client still sending a large body when it is refused reads the answer, not a broken
    // pipe: the listener reads the rest and throws it away before it answers (the old listener
    // closed at once, and about half of these posts failed with EPIPE).
    let large = vec![b'a'; 3 * 1024 * 1024];
    for _ in 0..4 {
        assert_eq!(post(&url("inline"), &[auth], &large).status, 413);
        assert_eq!(post(&url("inline"), &[], &large).status, 401);
    }
    // A client that never stops sending (fast, then a byte at a time) is cut off once the
    // listener has thrown away 8 MiB or waited 2 s, and the listener keeps answering.
    for pause in [Duration::ZERO, Duration::from_millis(50)] {
        endless_body(&base, "/hooks/global/inline", pause);
        assert_eq!(post(&url("small"), &[auth], &[b'a'; 10]).status, 202);
    }

    // Unknown hooks and methods.
    assert_eq!(
        post(&format!("{base}/hooks/global/nope"), &[auth], b"").status,
        404
    );
    let get = reqwest::blocking::get(url("inline")).unwrap();
    assert_eq!(get.status().as_u16(), 405);

    // No secret appears in the log, the CLI's output, the API's answers or the feed.
    let mut outputs = vec![all_logs(&daemon)];
    for args in [
        vec!["webhooks", "list"],
        vec!["webhooks", "list", "--json"],
        vec!["webhooks", "show", "global/inline"],
        vec!["webhooks", "show", "global/signed", "--json"],
        vec!["webhooks", "show", "global/file", "--json"],
        vec!["webhooks", "deliveries", "--last", "100"],
        vec!["webhooks", "deliveries", "--last", "100", "--json"],
        vec!["feed", "--last", "200", "--json"],
        vec!["config", "validate"],
    ] {
        outputs.push(daemon.ok(&args));
    }
    let deliveries = daemon.json(&["webhooks", "deliveries", "--last", "100"]);
    for d in deliveries["deliveries"].as_array().unwrap() {
        let id = d["id"].as_str().unwrap();
        outputs.push(daemon.ok(&["webhooks", "delivery", id, "--json"]));
        outputs.push(daemon.ok(&["webhooks", "delivery", id]));
    }
    let text = outputs.join("\n");
    for secret in [
        INLINE_TOKEN,
        ENV_TOKEN,
        FILE_TOKEN_1,
        FILE_TOKEN_2,
        HMAC_SECRET,
    ] {
        assert!(!text.contains(secret), "`{secret}` leaked");
    }
    // `show` prints one line per key, nested ones dotted.
    let shown = daemon.ok(&["webhooks", "show", "global/inline"]);
    assert!(
        shown
            .lines()
            .any(|l| l.trim_start().starts_with("respond.mode") && l.trim_end().ends_with("async")),
        "{shown}"
    );
    // The listing names each token's source instead.
    let list = daemon.json(&["webhooks", "list"]);
    let token_of = |id: &str| {
        list["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["id"] == id)
            .map(|h| h["token"].clone())
            .unwrap()
    };
    assert_eq!(token_of("inline"), "inline (redacted)");
    assert_eq!(token_of("env"), "env HOOK_TOKEN_B");
    assert_eq!(token_of("file"), "file tokens/section.token");
    // How each can be rotated: an environment variable only by a restart, a file at once.
    let shown = daemon.json(&["webhooks", "show", "env"]);
    let how = shown["rotation"]["token"].as_str().unwrap_or_default();
    assert!(
        how.contains("$HOOK_TOKEN_B") && how.contains("needs a restart"),
        "{shown}"
    );
    let shown = daemon.json(&["webhooks", "show", "file"]);
    let how = shown["rotation"]["token"].as_str().unwrap_or_default();
    assert!(how.contains("rotates it at once"), "{shown}");
    // Refusals are in the log, with what failed but not the secret.
    let log = all_logs(&daemon);
    assert!(log.contains("webhook request refused (401)"), "{log}");
    assert!(log.contains("wrong token"), "{log}");
    // Recorded headers never include the credentials.
    assert!(
        !text.to_ascii_lowercase().contains("x-canopy-hook-token\""),
        "{text}"
    );
}

#[test]
fn each_handler_runs_spec_command_action_agent_and_any_mode() {
    let out = tempfile::tempdir().unwrap();
    let agent_log = out.path().join("agent.txt");
    let agent = script(
        out.path(),
        "standin-agent.sh",
        &format!(
            "printf '%s\\n' \"$1\" >> '{}'\nprintf '{{\"type\":\"result\",\"session_id\":\"s1\",\"result\":\"triaged\"}}\\n'",
            agent_log.display()
        ),
    );
    let stdin_copy = out.path().join("stdin.txt");
    let env_copy = out.path().join("env.txt");
    let action_log = out.path().join("action.txt");
    let mode_log = out.path().join("mode.txt");
    let config = format!(
        r#"
node = "n1"
[platforms.standin]
command = ["{agent}", "{{prompt}}"]

[actions.note]
command = "cat >> {action_log}; echo >> {action_log}"

[webhooks]
bind_port = 0
token = "handler-token-0123456789"

[webhooks.entries.file-spec]
type = "spec"
title_from = "issue.title"
body_from = "issue.body"
queue = "inbox"

[webhooks.entries.raw-spec]
type = "spec"

[webhooks.entries.run]
type = "command"
command = "cat > {stdin_copy}; env | grep -E '^CANOPY_' > {env_copy}"
pass_env = {{ SHA = "after", NUMBER = "number" }}
pass_headers = ["X-Custom"]

[webhooks.entries.act]
type = "action"
action = "note"

[webhooks.entries.triage]
type = "agent"
config = {{ platform = "standin", prompt = "Triage {{{{body}}}}" }}

[webhooks.entries.noop]
type = "noop"
config = {{}}

[webhooks.entries.mode]
type = "command"
command = "echo mode $CANOPY_HOOK_ID >> {mode_log}; exit 3"

[webhooks.entries.nowhere]
type = "command"
command = "echo ran >> {mode_log}"
cwd = "/nonexistent/canopy-webhook-cwd"
"#,
        agent = agent.display(),
        action_log = action_log.display(),
        stdin_copy = stdin_copy.display(),
        env_copy = env_copy.display(),
        mode_log = mode_log.display(),
    );
    let daemon = Daemon::start_with_config(&config);
    daemon.ok(&["queue", "create", "inbox"]);
    let base = daemon.webhooks_url();
    let call = |id: &str, body: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("Authorization", "Bearer handler-token-0123456789")];
        headers.extend_from_slice(extra);
        post(
            &format!("{base}/hooks/global/{id}?wait=true"),
            &headers,
            body.as_bytes(),
        )
    };

    // spec: title and body from JSON fields, added to a queue.
    let answer = call(
        "file-spec",
        r#"{"issue": {"title": "Login is broken\nsecond line", "body": "The login form 500s."}}"#,
        &[("Content-Type", "application/json")],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let outcome = answer.json();
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let spec_id = outcome["result"]["spec_id"].as_str().unwrap().to_string();
    let spec = daemon.json(&["spec", "show", &spec_id]);
    assert_eq!(spec["name"], "Login is broken");
    assert!(
        spec["body"]
            .as_str()
            .unwrap()
            .contains("The login form 500s."),
        "{spec}"
    );
    let queue = daemon.json(&["queue", "show", "inbox"]);
    assert!(queue.to_string().contains(&spec_id), "{queue}");
    // A body without the field fails the delivery, saying which field.
    let answer = call("file-spec", r#"{"issue": {}}"#, &[]);
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap()
            .contains("issue.title"),
        "{}",
        answer.body
    );
    // The whole body, tags and all, as the objective of a spec.
    let answer = call("raw-spec", "Please add <b>dark mode</b>.", &[]);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    let id = answer.json()["result"]["spec_id"]
        .as_str()
        .unwrap()
        .to_string();
    let spec = daemon.json(&["spec", "show", &id]);
    assert!(
        spec["body"].as_str().unwrap().contains("dark mode"),
        "{spec}"
    );

    // command: the body on stdin and in $CANOPY_HOOK_BODY, bounded metadata, pass_env, and
    // selected headers; never the auth header.
    let body = r#"{"after": "abc123", "number": 7}"#;
    let answer = call(
        "run",
        body,
        &[
            ("Content-Type", "application/json"),
            ("X-Custom", "yes"),
            ("X-Other", "no"),
        ],
    );
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    assert_eq!(std::fs::read_to_string(&stdin_copy).unwrap(), body);
    let env = env_file(&env_copy);
    assert_eq!(env["CANOPY_HOOK_BODY"], body);
    assert_eq!(env["CANOPY_HOOK_METHOD"], "POST");
    assert_eq!(env["CANOPY_HOOK_PATH"], "/hooks/global/run");
    assert_eq!(env["CANOPY_HOOK_CONTENT_TYPE"], "application/json");
    assert_eq!(env["CANOPY_HOOK_ARG_SHA"], "abc123");
    assert_eq!(env["CANOPY_HOOK_ARG_NUMBER"], "7");
    assert_eq!(env["CANOPY_HOOK_HEADER_X_CUSTOM"], "yes");
    assert_eq!(env["CANOPY_ACTOR"], "webhook:global/run");
    assert_eq!(
        env["CANOPY_HOOK_DELIVERY_ID"],
        answer.json()["delivery_id"].as_str().unwrap()
    );
    assert!(!env.contains_key("CANOPY_HOOK_HEADER_X_OTHER"), "{env:?}");
    assert!(
        !env.contains_key("CANOPY_HOOK_HEADER_AUTHORIZATION"),
        "{env:?}"
    );
    assert!(
        !env.values().any(|v| v.contains("handler-token")),
        "{env:?}"
    );

    // action: a named [actions.NAME], with the body on its stdin.
    let answer = call("act", "from the action", &[]);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    assert_eq!(
        std::fs::read_to_string(&action_log).unwrap(),
        "from the action\n"
    );

    // agent: the configured platform runs with the body in its prompt.
    let answer = call("triage", "disk full on build-2", &[]);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    assert_eq!(
        std::fs::read_to_string(&agent_log).unwrap().trim(),
        "Triage disk full on build-2"
    );

    // Any installed executor mode, by its name.
    daemon.ok(&["plugin", "install", NOOP_WASM]);
    let answer = call("noop", "anything", &[]);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    assert_eq!(answer.json()["result"]["mode"], "noop", "{}", answer.body);

    // A failing handler: 500 with its status and output; recorded failed, with webhook.failed.
    let answer = call("mode", "", &[]);
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert_eq!(answer.json()["status"], "failed");
    let failed = daemon.ok(&["feed", "--event", "webhook.failed", "--json"]);
    assert!(failed.contains("global/mode"), "{failed}");
    let handled = daemon.ok(&["feed", "--event", "webhook.handled", "--json"]);
    assert!(handled.contains("global/triage"), "{handled}");

    // A cwd that is not there fails the run naming it; the command does not run elsewhere.
    let answer = call("nowhere", "", &[]);
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .contains(
                "the hook's cwd `/nonexistent/canopy-webhook-cwd` is not an existing directory"
            ),
        "{}",
        answer.body
    );
    assert!(
        !std::fs::read_to_string(&mode_log)
            .unwrap_or_default()
            .contains("ran"),
        "the command ran somewhere else"
    );

    // Removing the plugin a webhook runs warns, naming the webhook.
    let removed = daemon.cli(&["plugin", "remove", "noop"]);
    let warned = String::from_utf8_lossy(&removed.stderr);
    assert!(
        removed.status.success() && warned.contains("webhook global/noop still uses mode `noop`"),
        "{removed:?}"
    );
}

#[test]
fn rules_ignore_with_a_reason_and_respond_shapes_the_answer() {
    let out = tempfile::tempdir().unwrap();
    let pushed = out.path().join("pushed.txt");
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "rules-token-abcdef123"
hmac_secret = "rules-hmac-fedcba321"

[webhooks.entries.push]
type = "command"
command = "echo $CANOPY_HOOK_ARG_SHA >> {pushed}"
match = {{ ref = "refs/heads/main", "header.x-github-event" = "push", not = {{ "sender.login" = "bot-*" }} }}
pass_env = {{ SHA = "after" }}

[webhooks.entries.deploy]
type = "command"
command = "echo deployed $CANOPY_HOOK_QUERY"
match = {{ any = [{{ "query.env" = "prod" }}, {{ "query.env" = "re:^stage-[0-9]+$" }}] }}
respond = {{ mode = "sync", status = 201, output = false }}

[webhooks.entries.quiet]
type = "command"
command = "echo secret-output"
respond = {{ status = 200 }}
"#,
        pushed = pushed.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let base = daemon.webhooks_url();
    let send = |id: &str, query: &str, event: &str, body: &str| {
        post(
            &format!("{base}/hooks/global/{id}{query}"),
            &[
                ("Authorization", "Bearer rules-token-abcdef123"),
                ("X-GitHub-Event", event),
                (
                    "X-Hub-Signature-256",
                    &sign("rules-hmac-fedcba321", body.as_bytes()),
                ),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    };
    // A push to another branch: recorded ignored, 202 with the reason; nothing runs.
    let dev = send(
        "push",
        "",
        "push",
        r#"{"ref": "refs/heads/dev", "after": "d1"}"#,
    );
    assert_eq!(dev.status, 202);
    assert_eq!(dev.json()["status"], "ignored");
    assert_eq!(
        dev.json()["reason"],
        "`ref` is `refs/heads/dev`, which does not match this hook's rule"
    );
    let ping = send("push", "", "ping", r#"{"ref": "refs/heads/main"}"#);
    assert_eq!(ping.json()["status"], "ignored");
    assert!(
        ping.json()["reason"]
            .as_str()
            .unwrap()
            .contains("x-github-event")
    );
    let bot = send(
        "push",
        "",
        "push",
        r#"{"ref": "refs/heads/main", "sender": {"login": "bot-7"}}"#,
    );
    assert_eq!(bot.json()["status"], "ignored", "{}", bot.body);
    // A push to main runs, with ?wait=true answering the outcome.
    let main = send(
        "push",
        "?wait=true",
        "push",
        r#"{"ref": "refs/heads/main", "after": "m1", "sender": {"login": "ann"}}"#,
    );
    assert_eq!(main.status, 200, "{}", main.body);
    assert_eq!(main.json()["status"], "completed");
    assert_eq!(std::fs::read_to_string(&pushed).unwrap(), "m1\n");
    let ignored = daemon.json(&["webhooks", "deliveries", "--status", "ignored"]);
    assert_eq!(
        ignored["deliveries"].as_array().unwrap().len(),
        3,
        "{ignored}"
    );
    let received = daemon.ok(&["feed", "--event", "webhook.received", "--json"]);
    assert!(received.contains("\"ignored\""), "{received}");

    // Query rules with any; respond = sync with its status and without the output.
    let prod = send("deploy", "?env=prod", "push", "{}");
    assert_eq!(prod.status, 201, "{}", prod.body);
    assert_eq!(prod.json()["status"], "completed");
    assert!(prod.json().get("output").is_none(), "{}", prod.body);
    assert_eq!(send("deploy", "?env=stage-2", "push", "{}").status, 201);
    let other = send("deploy", "?env=dev", "push", "{}");
    assert_eq!(
        (other.status, other.json()["status"].clone()),
        (202, json!("ignored"))
    );
    // An async hook's own status.
    let quiet = send("quiet", "", "push", "{}");
    assert_eq!(
        (quiet.status, quiet.json()["status"].clone()),
        (200, json!("accepted"))
    );

    // A header the rules read, sent twice, could pass the rule as one value and run as the
    // other: refused before anything is recorded, by the listener and by `webhooks test` alike.
    let body = r#"{"ref": "refs/heads/main", "after": "twice"}"#;
    let twice = post(
        &format!("{base}/hooks/global/push"),
        &[
            ("Authorization", "Bearer rules-token-abcdef123"),
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Event", "ping"),
            (
                "X-Hub-Signature-256",
                &sign("rules-hmac-fedcba321", body.as_bytes()),
            ),
        ],
        body.as_bytes(),
    );
    assert_eq!(twice.status, 400, "{}", twice.body);
    assert!(
        twice
            .body
            .contains("header `x-github-event` is sent more than once"),
        "{}",
        twice.body
    );
    let text = daemon.fails(&[
        "webhooks",
        "test",
        "global/push",
        "--header",
        "X-GitHub-Event: push",
        "--header",
        "X-GitHub-Event: ping",
    ]);
    assert!(
        text.contains("header `x-github-event` is sent more than once"),
        "{text}"
    );
    let all = daemon.json(&["webhooks", "deliveries", "--hook", "global/push"]);
    assert_eq!(
        all["deliveries"].as_array().unwrap().len(),
        4,
        "nothing of the refused requests is recorded: {all}"
    );
    assert_eq!(std::fs::read_to_string(&pushed).unwrap(), "m1\n");
}

#[test]
fn a_crash_between_accept_and_run_runs_the_queued_and_never_replays_the_started() {
    let out = tempfile::tempdir().unwrap();
    let ran = out.path().join("ran.txt");
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "crash-token-1234567890"

[webhooks.entries.slow]
type = "command"
concurrency = 1
command = "read what; echo \"start $what\" >> {ran}; if [ \"$what\" = slow ]; then sleep 60; fi; echo \"end $what\" >> {ran}"
"#,
        ran = ran.display()
    );
    let mut daemon = Daemon::start_with_config(&config);
    let url = format!("{}/hooks/global/slow", daemon.webhooks_url());
    let auth = [("X-Canopy-Hook-Token", "crash-token-1234567890")];
    let first = post(&url, &auth, b"slow\n").json()["delivery_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("the slow handler to start", Duration::from_secs(60), || {
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .contains("start slow")
            .then_some(())
    });
    // Queued behind it (concurrency 1): accepted, durable, not started.
    let queued: Vec<String> = ["a", "b"]
        .iter()
        .map(|w| {
            let answer = post(&url, &auth, format!("{w}\n").as_bytes());
            assert_eq!(answer.status, 202);
            answer.json()["delivery_id"].as_str().unwrap().to_string()
        })
        .collect();
    let (_, running) = daemon.get(&format!("/api/webhooks/deliveries/{first}"));
    assert_eq!(running["status"], "running");
    for id in &queued {
        let (_, delivery) = daemon.get(&format!("/api/webhooks/deliveries/{id}"));
        assert_eq!(delivery["status"], "accepted", "{delivery}");
    }

    daemon.kill();
    let daemon = Daemon::start_on(&daemon.data_dir.clone());
    // The queued ones run after the restart; the started one is interrupted_unknown.
    for id in &queued {
        assert_eq!(ended(&daemon, id)["status"], "completed");
    }
    let first = ended(&daemon, &first);
    assert_eq!(first["status"], "interrupted_unknown", "{first}");
    assert!(
        first["error"].as_str().unwrap().contains("not run again"),
        "{first}"
    );
    let text = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(
        text.matches("start slow").count(),
        1,
        "never replayed: {text}"
    );
    assert!(!text.contains("end slow"), "{text}");
    assert_eq!(text.matches("end a").count(), 1, "{text}");
    assert_eq!(text.matches("end b").count(), 1, "{text}");
    let failed = daemon.ok(&["feed", "--event", "webhook.failed", "--json"]);
    assert!(failed.contains("interrupted_unknown"), "{failed}");
}

#[test]
fn nodes_routing_projects_redelivery_webhooks_test_and_config_validate() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("count.txt");
    let checkout = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
node = "n1"
[webhooks]
bind_port = 0
token = "route-token-1234567890"

[webhooks.entries.here]
type = "command"
command = "echo \"$(cat)\" >> {count}"
nodes = ["n1"]

[webhooks.entries.elsewhere]
type = "command"
command = "true"
nodes = ["n2"]
token_file = "/no/such/token/file"

[projects.web]
checkout = "{checkout}"

[projects.web.webhooks]
token = "project-token-0987654321"

[projects.web.webhooks.entries.build]
type = "command"
command = "pwd"
"#,
        count = count.display(),
        checkout = checkout.path().display(),
    );
    let daemon = Daemon::start_with_config(&config);
    let base = daemon.webhooks_url();
    // Another node's hook is not served here (404), and its token file is never read.
    let answer = post(
        &format!("{base}/hooks/global/elsewhere"),
        &[("X-Canopy-Hook-Token", "route-token-1234567890")],
        b"",
    );
    assert_eq!(answer.status, 404);
    let list = daemon.json(&["webhooks", "list"]);
    let served: BTreeMap<String, bool> = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["key"].as_str().unwrap().to_string(),
                h["served"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        served,
        BTreeMap::from([
            ("global/elsewhere".to_string(), false),
            ("global/here".to_string(), true),
            ("web/build".to_string(), true),
        ])
    );
    // Narrowed to a project; one without webhooks (a typo) is said, naming those that have some.
    let web = daemon.json(&["webhooks", "list", "--project", "web"]);
    assert_eq!(web["hooks"].as_array().map(Vec::len), Some(1), "{web}");
    let err = daemon.fails(&["webhooks", "list", "--project", "wbe"]);
    assert!(
        err.contains("project `wbe` has no webhooks; projects with webhooks: web"),
        "{err}"
    );

    // A project's hook, under /hooks/<project>/, with the project's token, in its checkout.
    let answer = post(
        &format!("{base}/hooks/web/build?wait=1"),
        &[("Authorization", "Bearer project-token-0987654321")],
        b"",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        std::fs::canonicalize(answer.json()["output"].as_str().unwrap().trim()).unwrap(),
        std::fs::canonicalize(checkout.path()).unwrap()
    );
    let wrong_scope = post(
        &format!("{base}/hooks/web/build"),
        &[("Authorization", "Bearer route-token-1234567890")],
        b"",
    );
    assert_eq!(wrong_scope.status, 401);

    // Redelivery: the same request, a new delivery, run again.
    let first = post(
        &format!("{base}/hooks/global/here?wait=true"),
        &[("X-Canopy-Hook-Token", "route-token-1234567890")],
        b"one",
    );
    assert_eq!(first.json()["status"], "completed", "{}", first.body);
    let first_id = first.json()["delivery_id"].as_str().unwrap().to_string();
    // By the short id `webhooks deliveries` shows (12 digits: delivery ids are time-ordered,
    // so fewer may match several).
    let again = daemon.json(&["webhooks", "redeliver", &first_id[..12], "--wait"]);
    assert_eq!(again["status"], "completed", "{again}");
    assert_ne!(again["delivery_id"], first_id);
    let (_, shown) = daemon.get(&format!(
        "/api/webhooks/deliveries/{}",
        again["delivery_id"].as_str().unwrap()
    ));
    assert_eq!(shown["redelivery_of"], first_id);
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "one\none\n");
    // An unknown delivery is named.
    let text = daemon.fails(&["webhooks", "redeliver", "ffffffff"]);
    assert!(text.contains("no delivery matches"), "{text}");

    // `webhooks test`: locally, without HTTP; body from a file or stdin, headers given.
    let body_file = out.path().join("body.txt");
    std::fs::write(&body_file, "from a file").unwrap();
    let tested = daemon.json(&[
        "webhooks",
        "test",
        "global/here",
        "--body",
        body_file.to_str().unwrap(),
        "--header",
        "X-GitHub-Event: push",
    ]);
    assert_eq!(tested["status"], "completed", "{tested}");
    assert!(
        std::fs::read_to_string(&count)
            .unwrap()
            .ends_with("from a file\n")
    );
    let (_, recorded) = daemon.get(&format!(
        "/api/webhooks/deliveries/{}",
        tested["delivery_id"].as_str().unwrap()
    ));
    assert_eq!(recorded["test"], true);
    assert_eq!(recorded["headers"], json!([["x-github-event", "push"]]));
    // A hook of another node can be tested here too; an unknown one is named.
    let tested = daemon.json(&["webhooks", "test", "global/elsewhere"]);
    assert_eq!(tested["status"], "completed", "{tested}");
    let text = daemon.fails(&["webhooks", "test", "global/nope"]);
    assert!(
        text.contains("no webhook `global/nope`") && text.contains("global/here"),
        "{text}"
    );
    // An id alone is a top-level webhook's.
    let text = daemon.fails(&["webhooks", "test", "nope"]);
    assert!(text.contains("no webhook `global/nope`"), "{text}");
    let text = daemon.fails(&["webhooks", "test", "web/"]);
    assert!(text.contains("is not <scope>/<id> or <id>"), "{text}");

    // config validate: a token only where the hook is served; problems name the TOML path.
    let check = |text: &str| {
        let file = out.path().join("check.toml");
        std::fs::write(&file, text).unwrap();
        daemon.cli(&["config", "validate", file.to_str().unwrap()])
    };
    let other_node = "node = \"n1\"\n[webhooks]\nbind_port = 0\n[webhooks.entries.x]\ntype = \"command\"\ncommand = \"true\"\nnodes = [\"n2\"]\n";
    assert!(check(other_node).status.success());
    let served = other_node.replace("nodes = [\"n2\"]", "nodes = [\"n1\"]");
    let output = check(&served);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "webhooks.entries.x: no token: set exactly one of token, token_env or token_file"
        ),
        "{stderr}"
    );
    let both = other_node.replace(
        "nodes = [\"n2\"]",
        "token = \"a\"\ntoken_file = \"b\"\nrespond = \"later\"\nmax_body_bytes = 0",
    );
    let stderr = String::from_utf8_lossy(&check(&both).stderr).into_owned();
    for expected in [
        "webhooks.entries.x: set exactly one of token, token_env or token_file",
        "webhooks.entries.x.respond: `later` is not async or sync",
        "webhooks.entries.x.max_body_bytes: must be from 1",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in {stderr}"
        );
    }
    let unknown = "[webhooks.entries.x]\ntype = \"command\"\ncomand = \"true\"\n";
    let stderr = String::from_utf8_lossy(&check(unknown).stderr).into_owned();
    assert!(
        stderr.contains("webhooks.entries.x") && stderr.contains("comand"),
        "{stderr}"
    );
}

/// A daemon with hook `global/c` (`concurrency = 2`, `token`) and that hook's URL. Its command
/// notes in `dir` how many of the hook's runs were running as it started (`peaks`) and each
/// run's delivery id once it ends (`done`), and prints `ran`.
fn counting_daemon(dir: &Path, token: &str) -> (Daemon, String) {
    std::fs::create_dir_all(dir.join("running")).unwrap();
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "{token}"

[webhooks.entries.c]
type = "command"
concurrency = 2
command = "n=$(ls {dir}/running | wc -l); echo $n >> {dir}/peaks; touch {dir}/running/$CANOPY_HOOK_DELIVERY_ID; sleep 0.2; rm {dir}/running/$CANOPY_HOOK_DELIVERY_ID; echo $CANOPY_HOOK_DELIVERY_ID >> {dir}/done; echo ran"
"#,
        dir = dir.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let url = format!("{}/hooks/global/c", daemon.webhooks_url());
    (daemon, url)
}

/// What [`counting_daemon`]'s command noted: each of `ids` ran once, and never more than two at once.
fn assert_ran_once_two_at_most(dir: &Path, ids: &[String]) {
    let done = std::fs::read_to_string(dir.join("done")).unwrap();
    let mut ran: Vec<&str> = done.lines().collect();
    ran.sort_unstable();
    let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(ran, expected, "every delivery ran exactly once");
    let peaks = std::fs::read_to_string(dir.join("peaks")).unwrap();
    let peak = peaks
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max();
    assert!(peak.is_some_and(|p| p <= 1), "at most 2 at once: {peaks}");
}

#[test]
fn a_hooks_queue_bounds_its_concurrency_and_runs_every_delivery_once() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path();
    let (daemon, url) = counting_daemon(dir, "queue-token-1234567890");
    let ids: Vec<String> = (0..10)
        .map(|_| {
            let answer = post(
                &url,
                &[("X-Canopy-Hook-Token", "queue-token-1234567890")],
                b"",
            );
            assert_eq!(answer.status, 202);
            answer.json()["delivery_id"].as_str().unwrap().to_string()
        })
        .collect();
    for id in &ids {
        assert_eq!(ended(&daemon, id)["status"], "completed");
    }
    assert_ran_once_two_at_most(dir, &ids);
}

#[test]
fn waited_deliveries_run_at_once_within_the_hooks_concurrency_beside_queued_ones() {
    // A waited delivery that finds a slot free runs at once, outside the hook's workers: the
    // hook's `concurrency` must still bound waited and queued runs together, and every
    // delivery must run once.
    let out = tempfile::tempdir().unwrap();
    let dir = out.path();
    let (daemon, url) = counting_daemon(dir, "mixed-token-1234567890");
    let headers = [("X-Canopy-Hook-Token", "mixed-token-1234567890")];
    let (waited, queued): (Vec<Answer>, Vec<Answer>) = std::thread::scope(|scope| {
        let waited: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| post(&format!("{url}?wait=true"), &headers, b"")))
            .collect();
        let queued: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| post(&url, &headers, b"")))
            .collect();
        (
            waited.into_iter().map(|t| t.join().unwrap()).collect(),
            queued.into_iter().map(|t| t.join().unwrap()).collect(),
        )
    });
    let mut ids = Vec::new();
    for answer in &waited {
        let json = answer.json();
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(json["status"], "completed", "{json:#}");
        assert_eq!(
            json["output"].as_str().map(str::trim),
            Some("ran"),
            "{json:#}"
        );
        ids.push(json["delivery_id"].as_str().unwrap().to_string());
    }
    for answer in &queued {
        assert_eq!(answer.status, 202, "{}", answer.body);
        let id = answer.json()["delivery_id"].as_str().unwrap().to_string();
        assert_eq!(ended(&daemon, &id)["status"], "completed");
        ids.push(id);
    }
    for id in &ids[..6] {
        let delivery = ended(&daemon, id);
        assert_eq!(delivery["status"], "completed", "{delivery:#}");
        assert!(delivery["started_at"].is_string(), "{delivery:#}");
    }
    assert_ran_once_two_at_most(dir, &ids);
}

#[test]
fn a_waiting_client_that_goes_away_does_not_stop_its_delivery() {
    use std::io::Write as _;
    let out = tempfile::tempdir().unwrap();
    let marker = out.path().join("finished");
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "gone-token-1234567890"

[webhooks.entries.slow]
type = "command"
command = "sleep 0.5; touch {}; echo finished"
"#,
        marker.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let base = daemon.webhooks_url();
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /hooks/global/slow?wait=true HTTP/1.1\r\nHost: {address}\r\nX-Canopy-Hook-Token: gone-token-1234567890\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    .unwrap();
    // The handler has started (or at least the delivery is recorded) once it is listed.
    let id = wait_for(
        "the waited delivery to be recorded",
        Duration::from_secs(30),
        || {
            let (_, list) = daemon.get("/api/webhooks/deliveries?hook=global/slow");
            list["deliveries"]
                .as_array()
                .and_then(|l| l.first())
                .and_then(|d| d["id"].as_str())
                .map(str::to_string)
        },
    );
    // The client goes away before the handler ends.
    drop(stream);
    let delivery = ended(&daemon, &id);
    assert_eq!(delivery["status"], "completed", "{delivery:#}");
    assert_eq!(
        delivery["output"].as_str().map(str::trim),
        Some("finished"),
        "{delivery:#}"
    );
    assert!(marker.exists(), "the handler was cut short");
}

/// One handler run as the flood test's command notes it: when it started (ns since the
/// epoch), how many of the hook's handlers were running then, and how many 0.2 s later.
struct Started {
    at: u128,
    others: usize,
    others_later: usize,
}

fn starts(path: &Path) -> Vec<Started> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::parse::<u128>);
            let (Some(Ok(at)), Some(Ok(others)), Some(Ok(later))) =
                (fields.next(), fields.next(), fields.next())
            else {
                return None;
            };
            Some(Started {
                at,
                others: usize::try_from(others).unwrap(),
                // The count 0.2 s on includes this handler itself.
                others_later: usize::try_from(later).unwrap().saturating_sub(1),
            })
        })
        .collect()
}

fn epoch_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn during_a_flood_each_hook_runs_one_handler_at_a_time_and_all_of_them_after() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path();
    // A flood here is more than one request answered at once within 100 ms.
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "flood-token-1234567890"
flood_rate = 10

[webhooks.entries.f]
type = "command"
concurrency = 4
command = "at=$(date +%s%N); n=$(ls {dir}/running | wc -l); touch {dir}/running/$CANOPY_HOOK_DELIVERY_ID; sleep 0.2; m=$(ls {dir}/running | wc -l); echo \"$at $n $m\" >> {dir}/starts; rm {dir}/running/$CANOPY_HOOK_DELIVERY_ID; echo $CANOPY_HOOK_DELIVERY_ID >> {dir}/done"
"#,
        dir = dir.display()
    );
    std::fs::create_dir_all(dir.join("running")).unwrap();
    let daemon = Daemon::start_with_config(&config);
    let url = format!("{}/hooks/global/f", daemon.webhooks_url());
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let send = |url: &str| {
        let sent = epoch_ns();
        let answer = client
            .post(url)
            .header("X-Canopy-Hook-Token", "flood-token-1234567890")
            .body("{}")
            .send()
            .unwrap();
        assert_eq!(answer.status().as_u16(), 202);
        let id = answer.json::<Value>().unwrap()["delivery_id"]
            .as_str()
            .unwrap()
            .to_string();
        (sent, epoch_ns(), id)
    };
    // A request every 25 ms for two seconds: a flood throughout, unless the client stalls
    // (the flood's spans are worked out from what it did, below).
    let began = std::time::Instant::now();
    let mut posts = Vec::new();
    let mut seen_on = 0;
    while began.elapsed() < Duration::from_secs(2) && posts.len() < 80 {
        posts.push(send(&url));
        if posts.len() % 10 == 0 && daemon.get("/api/webhooks").1["flood"] == true {
            seen_on += 1;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(posts.len() >= 12, "only {} requests sent", posts.len());
    assert!(seen_on > 0, "the API never reported the flood");
    for (_, _, id) in &posts {
        assert_eq!(ended(&daemon, id)["status"], "completed");
    }
    let listed = daemon.ok(&["webhooks", "list"]);
    assert!(
        listed.contains("in a flood (past 10 req/s) each hook runs one handler at a time"),
        "{listed}"
    );
    // Three requests within 100 ms make a flood from the third one's answer until 200 ms past
    // its sending, whatever the windows' alignment; overlapping spans are one flood.
    let mut flooded: Vec<(u128, u128)> = Vec::new();
    for w in posts.windows(3).filter(|w| w[2].1 - w[0].0 < 100_000_000) {
        let (from, to) = (w[2].1, w[2].0 + 200_000_000);
        match flooded.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => flooded.push((from, to)),
        }
    }
    let runs = starts(&dir.join("starts"));
    assert_eq!(runs.len(), posts.len(), "every delivery ran once");
    // A worker that took its turn just before a flood began may start its handler in it, and
    // a handler counts the others a moment after its start: only the handlers that started
    // well inside a flood count.
    let in_flood: Vec<&Started> = runs
        .iter()
        .filter(|r| {
            flooded
                .iter()
                .any(|(from, to)| (from + 300_000_000..to - 100_000_000).contains(&r.at))
        })
        .collect();
    assert!(
        in_flood.len() >= 2,
        "only {} handlers started during the flood",
        in_flood.len()
    );
    for run in &in_flood {
        assert_eq!(
            run.others, 0,
            "a handler started during the flood while another ran"
        );
    }
    // Once the flood was over, the backlog ran four at a time.
    let last_post = posts.last().unwrap().1;
    let peak_after = runs
        .iter()
        .filter(|r| r.at > last_post + 200_000_000)
        .map(|r| r.others.max(r.others_later))
        .max();
    assert!(
        peak_after.is_some_and(|p| p >= 2),
        "the hook's concurrency came back after the flood: {peak_after:?}"
    );
}

#[test]
fn a_planned_stop_interrupts_a_running_handler_and_the_queued_run_after_the_restart() {
    let out = tempfile::tempdir().unwrap();
    let ran = out.path().join("ran.txt");
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "stop-token-1234567890"

[webhooks.entries.slow]
type = "command"
concurrency = 1
command = "read what; echo \"start $what\" >> {ran}; if [ \"$what\" = slow ]; then sleep 60; fi; echo \"end $what\" >> {ran}"
"#,
        ran = ran.display()
    );
    let mut daemon = Daemon::start_with_config(&config);
    let url = format!("{}/hooks/global/slow", daemon.webhooks_url());
    let auth = [("X-Canopy-Hook-Token", "stop-token-1234567890")];
    let first = post(&url, &auth, b"slow\n").json()["delivery_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("the slow handler to start", Duration::from_secs(60), || {
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .contains("start slow")
            .then_some(())
    });
    let queued = post(&url, &auth, b"after\n").json()["delivery_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A planned stop with no drain budget: the running handler is killed and recorded
    // interrupted; the queued delivery is not admitted and stays accepted.
    daemon.stop();
    let data_dir = daemon.data_dir.clone();
    let daemon = Daemon::start_on(&data_dir);
    let first = ended(&daemon, &first);
    assert_eq!(first["status"], "interrupted", "{first}");
    assert_eq!(ended(&daemon, &queued)["status"], "completed");
    let text = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(text.matches("start slow").count(), 1, "{text}");
    assert!(!text.contains("end slow"), "{text}");
    assert_eq!(text.matches("end after").count(), 1, "{text}");
}

/// Sockets the process `pid` holds open.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn clients_that_send_nothing_are_cut_off_and_never_hold_more_than_max_connections() {
    use std::io::{Read, Write};
    const TOKEN: &str = "slow-client-token-5d2e";
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "{TOKEN}"
max_connections = 4
# One peer may take every slot (as a proxy does), so the global cap is what is tested: with
# the default per-peer cap of half, one client's connections would displace each other.
max_connections_per_peer = 4
header_timeout_secs = 3

[webhooks.entries.x]
type = "command"
command = "true"
"#
    );
    let daemon = Daemon::start_with_config(&config);
    let url = daemon.webhooks_url();
    let pid = daemon.pid().unwrap();
    let before = sockets_of(pid);
    // Twelve clients: half send nothing, half stop in the middle of their headers (slowloris).
    let connect = |i: usize| {
        let mut stream = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
        if i % 2 == 1 {
            stream
                .write_all(b"POST /hooks/global/x HTTP/1.1\r\nHost: a\r\nX-Canopy-Hook-")
                .unwrap();
        }
        stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        Some(stream)
    };
    // The first four take every slot, and the listener says so, before the rest arrive.
    let mut silent: Vec<Option<std::net::TcpStream>> = (0..4).map(connect).collect();
    support::wait_for(
        "the saturated listener to say so in the log",
        Duration::from_secs(20),
        || {
            all_logs(&daemon)
                .contains("every webhook connection is in use")
                .then_some(())
        },
    );
    silent.extend((4..12).map(connect));
    // Each is closed by the daemon once its headers are overdue (the later ones wait to be
    // accepted first); meanwhile the daemon never holds more than four of them.
    let mut most = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while silent.iter().any(Option::is_some) {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon kept {} silent connections open past a minute",
            silent.iter().filter(|s| s.is_some()).count()
        );
        most = most.max(sockets_of(pid).saturating_sub(before));
        for slot in &mut silent {
            let Some(stream) = slot else { continue };
            let mut byte = [0u8; 64];
            match stream.read(&mut byte) {
                Ok(0) => *slot = None,
                Ok(_) => {}
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => *slot = None,
            }
        }
    }
    assert!(most >= 1, "the daemon accepted the silent connections");
    assert!(
        most <= 4,
        "the daemon held {most} webhook connections at once (max_connections = 4)"
    );
    // The listener serves again, and the API answered all along.
    let answer = post(
        &format!("{url}/hooks/global/x?wait=true"),
        &[("X-Canopy-Hook-Token", TOKEN)],
        b"{}",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["status"], "completed");
    let (status, _) = daemon.get("/api/webhooks");
    assert_eq!(status, 200);
    let list = daemon.ok(&["webhooks", "list"]);
    assert!(
        list.contains("at most 4 connections, headers within 3 s"),
        "{list}"
    );
}

#[test]
fn listener_limits_out_of_range_are_refused_naming_the_field() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("canopy.toml");
    std::fs::write(
        &file,
        "[webhooks]\nbind_port = 0\nmax_connections = 0\nheader_timeout_secs = 86400\nflood_rate = 20000000\n",
    )
    .unwrap();
    let out = daemon.fails(&["config", "validate", file.to_str().unwrap()]);
    assert!(
        out.contains("webhooks.max_connections: must be from 1 to 65536"),
        "{out}"
    );
    assert!(
        out.contains("webhooks.header_timeout_secs: must be from 1 to 3600"),
        "{out}"
    );
    assert!(
        out.contains("webhooks.flood_rate: must be from 0 (never) to 10000000 requests a second"),
        "{out}"
    );
    std::fs::write(
        &file,
        "[webhooks]\nbind_port = 0\nflood_rate = 9223372036854775808\n",
    )
    .unwrap();
    let out = daemon.fails(&["config", "validate", file.to_str().unwrap()]);
    assert!(out.contains("flood_rate"), "{out}");
}

/// The spec a waited `spec` handler's delivery filed.
fn filed_spec(daemon: &Daemon, answer: &Answer) -> Value {
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    let id = answer.json()["result"]["spec_id"]
        .as_str()
        .unwrap()
        .to_string();
    daemon.get(&format!("/api/specs/{id}")).1
}

#[test]
fn a_body_with_nul_bytes_reaches_the_command_whole_on_stdin_and_cut_in_its_environment() {
    const TOKEN: &str = "nul-body-token-8c1f";
    let out = tempfile::tempdir().unwrap();
    let seen = out.path().join("seen.env");
    let stdin = out.path().join("stdin.bin");
    let config = format!(
        r#"
[webhooks]
bind_port = 0
token = "{TOKEN}"

[webhooks.entries.x]
type = "command"
command = "env > {seen}; cat > {stdin}"
pass_env = {{ V = "v" }}

[webhooks.entries.s]
type = "spec"

[webhooks.entries.t]
type = "spec"
title_from = "t"
"#,
        seen = seen.display(),
        stdin = stdin.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let url = format!("{}/hooks/global/x?wait=true", daemon.webhooks_url());
    // A JSON string holding a NUL (`\u0000`), and a raw binary body.
    let json_body = br#"{"v":"before\u0000after"}"#;
    let answer = post(
        &url,
        &[
            ("X-Canopy-Hook-Token", TOKEN),
            ("Content-Type", "application/json"),
        ],
        json_body,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    let env = env_file(&seen);
    assert_eq!(env["CANOPY_HOOK_ARG_V"], "before");
    assert_eq!(std::fs::read(&stdin).unwrap(), json_body);

    let binary = b"head\0tail\xff\x00end".to_vec();
    let answer = post(&url, &[("X-Canopy-Hook-Token", TOKEN)], &binary);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["status"], "completed", "{}", answer.body);
    let env = env_file(&seen);
    assert_eq!(env["CANOPY_HOOK_BODY"], "head");
    assert_eq!(env["CANOPY_HOOK_BODY_TRUNCATED"], "1");
    assert_eq!(env["CANOPY_HOOK_BODY_SIZE"], binary.len().to_string());
    assert_eq!(
        std::fs::read(&stdin).unwrap(),
        binary,
        "stdin holds the whole body"
    );

    // A spec handler files a binary body as text, and a title with control characters as a
    // name without them.
    let spec_url = url.replace("/hooks/global/x?", "/hooks/global/s?");
    let answer = post(&spec_url, &[("X-Canopy-Hook-Token", TOKEN)], &binary);
    let spec = filed_spec(&daemon, &answer);
    assert!(
        spec["body"].as_str().unwrap().contains("head\u{FFFD}tail"),
        "{spec}"
    );
    let title_url = url.replace("/hooks/global/x?", "/hooks/global/t?");
    let answer = post(
        &title_url,
        &[
            ("X-Canopy-Hook-Token", TOKEN),
            ("Content-Type", "application/json"),
        ],
        br#"{"t":"Fix\tthe\u001b build\u0000"}"#,
    );
    let spec = filed_spec(&daemon, &answer);
    assert_eq!(spec["name"], "Fix the build", "{spec}");
}

/// A GitHub push exactly as GitHub sends it: its headers, its signature, no token.
fn github_push(url: &str, secret: &str, delivery: &str, body: &[u8]) -> Answer {
    let signature = sign(secret, body);
    post(
        &format!("{url}/hooks/global/push"),
        &[
            ("Content-Type", "application/json"),
            ("User-Agent", "GitHub-Hookshot/044aadd"),
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Delivery", delivery),
            ("X-GitHub-Hook-ID", "292430182"),
            ("X-GitHub-Hook-Installation-Target-Type", "repository"),
            ("X-Hub-Signature-256", &signature),
        ],
        body,
    )
}

#[test]
fn github_calls_a_signature_hook_directly_and_a_replayed_delivery_does_not_run_again() {
    const SECRET: &str = "It's a Secret to Everybody";
    let out = tempfile::tempdir().unwrap();
    let ran = out.path().join("ran.txt");
    let config = format!(
        r#"
[webhooks]
bind_port = 0

[webhooks.entries.push]
type = "command"
command = "cat >> {ran}; echo >> {ran}"
provider = "github"
auth = "signature"
hmac_secret = "{SECRET}"
"#,
        ran = ran.display()
    );
    let daemon = Daemon::start_with_config(&config);
    let url = daemon.webhooks_url();
    let first_body = br#"{"ref":"refs/heads/main","after":"aaa111"}"#;
    let first = github_push(
        &url,
        SECRET,
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        first_body,
    );
    assert_eq!(first.status, 202, "{}", first.body);
    let first_id = first.json()["delivery_id"].as_str().unwrap().to_string();
    assert_eq!(ended(&daemon, &first_id)["status"], "completed");

    // GitHub's "Redeliver" (and a replay by whoever captured the request) sends the same
    // delivery again: it is answered with the first, and does not run.
    let replay = github_push(
        &url,
        SECRET,
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        first_body,
    );
    assert_eq!(replay.status, 200, "{}", replay.body);
    let answer = replay.json();
    assert_eq!(answer["delivery_id"], first_id.as_str(), "{answer}");
    assert_eq!(answer["status"], "completed");
    assert_eq!(answer["duplicate"], true);

    // A new delivery runs.
    let second_body = br#"{"ref":"refs/heads/main","after":"bbb222"}"#;
    let second = github_push(
        &url,
        SECRET,
        "8a3c5f2e-cc78-11e3-81ab-4c9367dc0958",
        second_body,
    );
    assert_eq!(second.status, 202, "{}", second.body);
    let second_id = second.json()["delivery_id"].as_str().unwrap().to_string();
    assert_eq!(ended(&daemon, &second_id)["status"], "completed");
    let deliveries = daemon.json(&["webhooks", "deliveries", "--last", "10"]);
    assert_eq!(deliveries["deliveries"].as_array().unwrap().len(), 2);

    // Eight copies of one delivery at once (a sender retrying over a flaky link): one is taken,
    // seven are answered as its duplicates.
    let third_body = br#"{"ref":"refs/heads/main","after":"ccc333"}"#;
    let copies: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                github_push(
                    &url,
                    SECRET,
                    "9c4d6e3f-cc78-11e3-81ab-4c9367dc0958",
                    third_body,
                )
                .status
            })
        })
        .collect();
    let mut statuses: Vec<u16> = copies.into_iter().map(|c| c.join().unwrap()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 202]);
    let deliveries = daemon.json(&["webhooks", "deliveries", "--last", "10"]);
    assert_eq!(deliveries["deliveries"].as_array().unwrap().len(), 3);
    wait_for("the third delivery to run", Duration::from_secs(30), || {
        let ran = std::fs::read_to_string(&ran).unwrap_or_default();
        // Its whole line: the handler may not have written the newline yet.
        (ran.lines().count() >= 3 && ran.ends_with('\n')).then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        format!(
            "{}\n{}\n{}\n",
            String::from_utf8_lossy(first_body),
            String::from_utf8_lossy(second_body),
            String::from_utf8_lossy(third_body)
        ),
        "each delivery ran once, its copies never"
    );

    // Without a valid signature there is no way in: 401, and the log says which check failed.
    let forged = github_push(
        &url,
        "not the secret",
        "0b1c5f2e-cc78-11e3-81ab-4c9367dc0958",
        second_body,
    );
    assert_eq!(forged.status, 401);
    assert!(forged.body.is_empty(), "{}", forged.body);
    let unsigned = post(
        &format!("{url}/hooks/global/push"),
        &[("X-GitHub-Delivery", "1b1c5f2e-cc78-11e3-81ab-4c9367dc0958")],
        second_body,
    );
    assert_eq!(unsigned.status, 401);
    wait_for("the refusals in the log", Duration::from_secs(10), || {
        let log = all_logs(&daemon);
        (log.contains("the x-hub-signature-256 does not match the body")
            && log.contains("no x-hub-signature-256"))
        .then_some(())
    });
    assert!(!all_logs(&daemon).contains(SECRET), "the secret was logged");
    // The listing says how the hook is let in.
    let list = daemon.ok(&["webhooks", "list"]);
    assert!(
        list.contains("none: signature only  inline (redacted) (github)"),
        "{list}"
    );
    let shown = daemon.json(&["webhooks", "show", "push"]);
    assert_eq!(shown["auth"], "signature", "{shown}");
    assert!(
        shown["rotation"]["hmac"]
            .as_str()
            .is_some_and(|how| how.contains("needs a restart")),
        "{shown}"
    );
    assert_eq!(shown["dedup"]["header"], "x-github-delivery", "{shown}");
}

#[test]
fn gitlab_and_slack_senders_are_presets_and_a_stale_slack_signature_is_refused() {
    let config = r#"
[webhooks]
bind_port = 0

[webhooks.entries.gl]
type = "command"
command = "true"
provider = "gitlab"
auth = "signature"
hmac_secret = "gitlab-secret-3f9a"

[webhooks.entries.slack]
type = "command"
command = "true"
provider = "slack"
auth = "signature"
hmac_secret = "slack-signing-secret-77c1"

# The shell handler by its other name.
[webhooks.entries.sh]
type = "bash"
command = "echo from bash"
token = "bash-token-51e0"
"#;
    let daemon = Daemon::start_with_config(config);
    let url = daemon.webhooks_url();
    let body = br#"{"object_kind":"push","ref":"refs/heads/main"}"#;
    let gitlab = |token: &str, uuid: &str| {
        post(
            &format!("{url}/hooks/global/gl?wait=true"),
            &[
                ("Content-Type", "application/json"),
                ("X-Gitlab-Event", "Push Hook"),
                ("X-Gitlab-Token", token),
                ("X-Gitlab-Event-UUID", uuid),
            ],
            body,
        )
    };
    let ok = gitlab("gitlab-secret-3f9a", "5f3b7e2a-0001");
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["status"], "completed");
    assert_eq!(gitlab("wrong", "5f3b7e2a-0002").status, 401);
    let again = gitlab("gitlab-secret-3f9a", "5f3b7e2a-0001");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["duplicate"], true);

    let slack = |age_secs: u64, secret: &str| {
        let stamp = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            - age_secs)
            .to_string();
        let signed = format!(
            "v0={}",
            canopy_core::webhooks::auth::hmac_hex(
                secret.as_bytes(),
                &[format!("v0:{stamp}:").as_bytes(), body]
            )
        );
        post(
            &format!("{url}/hooks/global/slack?wait=true"),
            &[
                ("Content-Type", "application/json"),
                ("X-Slack-Request-Timestamp", &stamp),
                ("X-Slack-Signature", &signed),
            ],
            body,
        )
    };
    let shell = post(
        &format!("{url}/hooks/global/sh?wait=true"),
        &[("X-Canopy-Hook-Token", "bash-token-51e0")],
        b"{}",
    );
    assert_eq!(shell.status, 200, "{}", shell.body);
    assert_eq!(shell.json()["output"], "from bash\n");

    let fresh = slack(0, "slack-signing-secret-77c1");
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(slack(0, "another secret").status, 401);
    // Signed ten minutes ago: a captured request replayed later.
    assert_eq!(slack(600, "slack-signing-secret-77c1").status, 401);
    wait_for(
        "the stale signature in the log",
        Duration::from_secs(10),
        || {
            all_logs(&daemon)
                .contains("the x-slack-signature is signed more than 300 s from now")
                .then_some(())
        },
    );
}

#[test]
fn a_hook_no_executor_serves_is_flagged_in_the_listing() {
    let config = r#"
[webhooks]
bind_port = 0

[webhooks.entries.orphan]
type = "nosuchmode"
token = "orphan-token-2b7e"
config = { prompt = "{{body}}" }
"#;
    let daemon = Daemon::start_with_config(config);
    let list = daemon.ok(&["webhooks", "list"]);
    assert!(
        list.contains("warning: global/orphan: its handler does not validate, so every delivery fails: unknown mode `nosuchmode`"),
        "{list}"
    );
    let shown = daemon.json(&["webhooks", "show", "orphan"]);
    assert!(
        shown["problem"]
            .as_str()
            .is_some_and(|p| p.contains("installed modes")),
        "{shown}"
    );
}

#[test]
fn a_reload_puts_webhook_entries_in_force_and_names_listener_changes_to_restart_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b.txt");
    let config = |entries: &str, port: &str| {
        format!("[webhooks]\nbind_port = {port}\ntoken = \"reload-token-5f3c9a\"\n{entries}")
    };
    let entry_a = |says: &str| {
        format!(
            "\n[webhooks.entries.a]\ntype = \"command\"\ncommand = \"echo {says}\"\nrespond = \"sync\"\n"
        )
    };
    // An async hook: its deliveries run on the queue's workers, which a reload starts.
    let entry_b = format!(
        "\n[webhooks.entries.b]\ntype = \"command\"\ncommand = \"cat >> {}\"\n",
        out.display()
    );
    let mut daemon = Daemon::start_with_config(&config(&entry_a("first"), "0"));
    let url = daemon.webhooks_url();
    let auth = [("Authorization", "Bearer reload-token-5f3c9a")];
    let answer = post(&format!("{url}/hooks/global/a"), &auth, b"{}");
    assert_eq!(answer.json()["output"], "first\n", "{}", answer.body);
    assert_eq!(
        post(&format!("{url}/hooks/global/b"), &auth, b"{}").status,
        404
    );

    // Added and changed: in force at once, no restart.
    let file = daemon.data_dir.join("canopy.toml");
    std::fs::write(&file, config(&(entry_a("second") + &entry_b), "0")).unwrap();
    let report = daemon.json(&["config", "reload"]);
    assert_eq!(report["report"]["applied"], json!(["webhooks"]), "{report}");
    assert_eq!(report["report"]["needs_restart"], json!([]), "{report}");
    let answer = post(&format!("{url}/hooks/global/a"), &auth, b"{}");
    assert_eq!(answer.json()["output"], "second\n", "{}", answer.body);
    let answer = post(&format!("{url}/hooks/global/b"), &auth, b"queued body\n");
    assert_eq!(answer.status, 202, "{}", answer.body);
    let id = answer.json()["delivery_id"].as_str().unwrap().to_string();
    assert_eq!(ended(&daemon, &id)["status"], "completed");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "queued body\n");

    // Taken out: no longer served, no longer listed.
    std::fs::write(&file, config(&entry_b, "0")).unwrap();
    daemon.ok(&["config", "reload"]);
    assert_eq!(
        post(&format!("{url}/hooks/global/a"), &auth, b"{}").status,
        404
    );
    let list = daemon.json(&["webhooks", "list"]);
    let keys: Vec<&str> = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["global/b"], "{list}");
    // The one that stays still runs on its workers.
    let answer = post(&format!("{url}/hooks/global/b"), &auth, b"again\n");
    let id = answer.json()["delivery_id"].as_str().unwrap().to_string();
    assert_eq!(ended(&daemon, &id)["status"], "completed");

    // The listener's own settings are read at start: the reload says to restart for them, and
    // the listing goes on showing the ones the listener runs with.
    let before = daemon.json(&["webhooks", "list"]);
    std::fs::write(&file, config(&format!("flood_rate = 7\n{entry_b}"), "1")).unwrap();
    let report = daemon.json(&["config", "reload"]);
    assert_eq!(
        report["report"]["needs_restart"],
        json!(["webhooks listener (its address, connection limits, flood_rate)"]),
        "{report}"
    );
    let after = daemon.json(&["webhooks", "list"]);
    assert_eq!(after["flood_rate"], before["flood_rate"], "{after}");
    assert_ne!(after["flood_rate"], 7, "{after}");
    daemon.stop();
}

#[test]
fn a_waited_delivery_is_recorded_once_when_it_ends_and_a_crash_mid_run_leaves_no_record() {
    const SECRET: &str = "waited-secret-8d1e";
    let out = tempfile::tempdir().unwrap();
    let gate = out.path().join("go");
    let pid_file = out.path().join("handler.pid");
    let config = format!(
        r#"
[webhooks]
bind_port = 0

[webhooks.entries.push]
auth = "signature"
hmac_secret = "{SECRET}"
provider = "github"
type = "command"
respond = "sync"
concurrency = 1
command = "echo $$ > {pid}; while [ ! -e {gate} ]; do sleep 0.05; done; echo handled"
"#,
        pid = pid_file.display(),
        gate = gate.display(),
    );
    let mut daemon = Daemon::start_with_config(&config);
    let url = daemon.webhooks_url();
    let waiting = {
        let url = url.clone();
        std::thread::spawn(move || github_push(&url, SECRET, "d-1", b"{\"ref\":\"main\"}"))
    };
    // While its handler runs, it is listed (from memory) as running; nothing is recorded yet.
    let listed = wait_for(
        "the waited delivery to be listed",
        Duration::from_secs(30),
        || {
            let (_, list) = daemon.get("/api/webhooks/deliveries?hook=global/push");
            list["deliveries"].as_array()?.first().cloned()
        },
    );
    assert_eq!(listed["status"], "running", "{listed}");
    let id = listed["id"].as_str().unwrap().to_string();
    let (status, shown) = daemon.get(&format!("/api/webhooks/deliveries/{}", &id[..12]));
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["body"], "{\"ref\":\"main\"}", "{shown}");
    let (_, feed) = daemon.get("/api/feed?event=webhook.*&last=10");
    assert_eq!(
        feed["events"],
        json!([]),
        "an event was recorded before the end: {feed}"
    );
    // A copy sent while it runs is answered with it, and does not run: the hook's one slot is
    // taken, so the copy comes the queued way, and is still found running.
    let copy = github_push(&url, SECRET, "d-1", b"{\"ref\":\"main\"}");
    assert_eq!(copy.json()["delivery_id"], id.as_str(), "{}", copy.body);
    assert_eq!(copy.json()["duplicate"], true, "{}", copy.body);
    assert_eq!(copy.json()["status"], "running", "{}", copy.body);

    std::fs::write(&gate, "").unwrap();
    let answer = waiting.join().unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["output"], "handled\n", "{}", answer.body);
    // One write, at the end: the delivery as it ended, with both its events.
    let delivery = ended(&daemon, &id);
    assert_eq!(delivery["status"], "completed", "{delivery}");
    let (_, feed) = daemon.get("/api/feed?event=webhook.*&last=10");
    let events: Vec<&str> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["webhook.received", "webhook.handled"], "{feed}");

    // A crash mid-run: the sender sees its request fail (and retries); nothing was recorded,
    // and the restarted daemon kills what the handler left running.
    std::fs::remove_file(&gate).unwrap();
    std::fs::remove_file(&pid_file).unwrap();
    let crashing = {
        let url = url.clone();
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            let body = b"{\"ref\":\"crash\"}".to_vec();
            client
                .post(format!("{url}/hooks/global/push"))
                .header("X-GitHub-Delivery", "d-2")
                .header("X-Hub-Signature-256", sign(SECRET, &body))
                .body(body)
                .send()
                .map(|r| r.status().as_u16())
        })
    };
    let handler: i32 = wait_for("the handler to start", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    daemon.kill();
    assert!(
        crashing.join().unwrap().is_err(),
        "the sender got an answer from a daemon killed mid-run"
    );
    let data = daemon.data_dir.clone();
    let restarted = Daemon::start_on(&data);
    let (_, list) = restarted.get("/api/webhooks/deliveries?hook=global/push");
    let ids: Vec<&str> = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [id.as_str()],
        "only the delivery that ended is recorded: {list}"
    );
    wait_for(
        "the dead daemon's handler to be killed",
        Duration::from_secs(30),
        || (!Path::new(&format!("/proc/{handler}")).exists()).then_some(()),
    );
    // GitHub redelivers it: it runs now.
    std::fs::write(&gate, "").unwrap();
    let again = github_push(
        &restarted.webhooks_url(),
        SECRET,
        "d-2",
        b"{\"ref\":\"crash\"}",
    );
    assert_eq!(again.json()["status"], "completed", "{}", again.body);
    assert_ne!(again.json()["duplicate"], true, "{}", again.body);
}
