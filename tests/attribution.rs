//! Attribution the daemon decides: a hook's process acts as its hook through the call token the
//! daemon hands it, whatever its environment or headers claim; claims made with the daemon's
//! own token are ignored; a call token dies with its call; and a loop that goes around the
//! token (the daemon's token read from the data dir) trips the hook's firing breaker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{CANOPY, Daemon, wait_for};

/// The feed's events of `event`, oldest first.
fn feed(daemon: &Daemon, event: &str) -> Vec<Value> {
    let (_, answer) = daemon.get(&format!("/api/feed?event={event}&last=1000"));
    answer["events"].as_array().cloned().unwrap_or_default()
}

fn actors(events: &[Value]) -> Vec<(String, i64)> {
    events
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_string(),
                e["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn claims_made_with_the_daemon_token_are_ignored_and_bad_ones_refused() {
    let daemon = Daemon::start();
    let auth = format!("Bearer {}", daemon.token());
    let host = daemon.host().to_string();
    let post_spec = |name: &str, extra: &[(&str, &str)]| {
        let body = json!({ "name": name, "body": support::spec_body(name) }).to_string();
        let mut headers = vec![
            ("Host", host.as_str()),
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        daemon.raw("POST", "/api/specs", &headers, body.as_bytes())
    };
    for (value, expected) in [
        ("root", "is not one of user, agent"),
        ("hook:a b", "is not one of user, agent"),
        ("hook:", "is not one of user, agent"),
    ] {
        let answer = post_spec("s", &[("X-Canopy-Actor", value)]);
        assert_eq!(answer.status, 400, "{value}: {}", answer.body);
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("header `x-canopy-actor`") && message.contains(expected),
            "{value}: {message}"
        );
    }
    let (_, specs) = daemon.get("/api/specs");
    assert_eq!(specs["specs"].as_array().unwrap().len(), 0, "{specs}");

    // Automation actors and depths claimed with the daemon's token are the user's, at depth 0;
    // an agent (an MCP client) may still say it is one.
    for (actor, depth) in [
        ("webhook:global/github-push", "3"),
        ("hook:web.on_completed[0]", "9223372036854775808"),
        ("cron:nightly-backup", "1"),
    ] {
        let answer = post_spec(
            "claimed",
            &[
                ("X-Canopy-Actor", actor),
                ("X-Canopy-Dispatch-Depth", depth),
            ],
        );
        assert_eq!(answer.status, 201, "{}", answer.body);
    }
    assert_eq!(
        post_spec("agent", &[("X-Canopy-Actor", "agent")]).status,
        201
    );
    // The CLI's environment claims nothing either.
    let out = Command::new(CANOPY)
        .args(["--data-dir", daemon.data_dir.to_str().unwrap()])
        .args([
            "spec",
            "add",
            "--name",
            "from-env",
            "--body",
            &support::spec_body("e"),
        ])
        .env("CANOPY_ACTOR", "cron:nightly-backup")
        .env("CANOPY_DISPATCH_DEPTH", "7")
        .env("CANOPY_CALL_TOKEN", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        actors(&feed(&daemon, "spec.created")),
        [
            ("user".to_string(), 0),
            ("user".to_string(), 0),
            ("user".to_string(), 0),
            ("agent".to_string(), 0),
            ("user".to_string(), 0),
        ]
    );
}

#[test]
fn a_call_token_is_refused_once_its_call_has_ended() {
    let out = tempfile::tempdir().unwrap();
    let saved = out.path().join("token");
    let config = format!(
        "[[hooks]]\nname = \"keep\"\nevent = \"spec.created\"\naction = {{ command = \"printf %s \\\"$CANOPY_CALL_TOKEN\\\" > {}\" }}\n",
        saved.display()
    );
    let daemon = Daemon::start_with_config(&config);
    daemon.add_spec("s");
    daemon.ended_hook_runs("config", 1);
    let token = std::fs::read_to_string(&saved).unwrap();
    assert!(token.starts_with("canopy-call-"), "{token}");
    let answer = daemon.raw(
        "GET",
        "/api/specs",
        &[
            ("Host", daemon.host()),
            ("Authorization", &format!("Bearer {token}")),
        ],
        b"",
    );
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call has ended"),
        "{}",
        answer.body
    );
    // The token is never recorded: not in the hook run, not in the feed, not in the log.
    let (_, runs) = daemon.get("/api/hook-runs?last=10");
    let (_, events) = daemon.get("/api/feed?last=100");
    for text in [runs.to_string(), events.to_string(), daemon.log()] {
        assert!(!text.contains(&token), "the call token was recorded");
    }
}

#[test]
fn a_loop_around_the_call_token_trips_the_hooks_breaker_until_reset() {
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let body = data_dir.path().join("spec.txt");
    std::fs::write(&body, support::spec_body("again")).unwrap();
    // A hook that adds a spec for every spec added, with the daemon's own token (its call token
    // removed): every spec is the user's, at depth 0, so the depth limit never sees the loop.
    let config = format!(
        r#"
[limits]
breaker_firings = 5
breaker_window_secs = 600

[[hooks]]
name = "breed"
event = "spec.created"
timeout_secs = 30
action = {{ command = "env -u CANOPY_CALL_TOKEN {canopy} --data-dir {data} spec add --name again --file {body}" }}

[[hooks]]
name = "notice"
event = "hook.tripped"
action = {{ command = "true" }}
"#,
        canopy = CANOPY,
        data = data.display(),
        body = body.display()
    );
    std::fs::write(data.join("canopy.toml"), config).unwrap();
    let daemon = Daemon::start_on(&data);
    daemon.add_spec("first");

    // Five firings run; the sixth trips the hook and is dropped; nothing more is added.
    let tripped = wait_for("hook.tripped", Duration::from_secs(90), || {
        let events = feed(&daemon, "hook.tripped");
        (!events.is_empty()).then_some(events)
    });
    assert_eq!(tripped.len(), 1, "{tripped:#?}");
    let payload = &tripped[0]["payload"];
    assert_eq!(payload["hook_name"], "breed");
    assert_eq!(payload["source"], "config");
    assert_eq!(payload["fired_by"], "spec.created");
    assert_eq!(payload["firings"], 5);
    let runs: Vec<Value> = daemon
        .ended_hook_runs("config", 7)
        .into_iter()
        .filter(|r| r["hook_name"] == "breed")
        .collect();
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        [
            "completed",
            "completed",
            "completed",
            "completed",
            "completed",
            "dropped"
        ],
        "{runs:#?}"
    );
    assert!(
        runs[5]["error"]
            .as_str()
            .unwrap()
            .contains("fired more than 5 times in 600s and is tripped"),
        "{}",
        runs[5]
    );
    let (_, specs) = daemon.get("/api/specs");
    assert_eq!(specs["specs"].as_array().unwrap().len(), 6, "{specs}");
    // A hook on hook.tripped hears of it, once.
    let notice: Vec<Value> = daemon
        .ended_hook_runs("config", 7)
        .into_iter()
        .filter(|r| r["hook_name"] == "notice")
        .collect();
    assert_eq!(notice.len(), 1, "{notice:#?}");

    // A spec added while tripped fires nothing that runs.
    daemon.add_spec("while tripped");
    let listed = daemon.ok(&["hooks", "tripped"]);
    assert!(
        listed.contains("breed") && listed.contains("config"),
        "{listed}"
    );
    let err = daemon.fails(&["hooks", "reset", "nope"]);
    assert!(
        err.contains("hook `nope` is not tripped; tripped now: breed"),
        "{err}"
    );
    let reset = daemon.ok(&["hooks", "reset", "breed"]);
    assert!(reset.contains("breed (config) is back"), "{reset}");
    // Back, it runs again (and, looping still, trips again).
    daemon.add_spec("after reset");
    wait_for("a run after the reset", Duration::from_secs(90), || {
        let (_, answer) =
            daemon.get("/api/hook-runs?source=config&hook=breed&status=completed&last=1000");
        (answer["runs"].as_array().unwrap().len() > 5).then_some(())
    });
}
