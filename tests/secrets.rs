//! Secrets the daemon knows never reach a record or the feed: its API token printed by a
//! failing webhook handler (as `curl -v` prints it), a `pass_env` value echoed by a failing
//! cron, a hook's own call token; and an ignored delivery's reason quotes neither what the rule
//! expects nor a credential-named header's value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Daemon, wait_for};

const TOKEN: &str = "secrets-hook-token-1b2c3d";
const PASSED: &str = "pass-env-value-7e8f9a0b";

/// Everything a feed reader and a records reader can see, as one text.
fn everything(daemon: &Daemon) -> String {
    let (_, feed) = daemon.get("/api/feed?last=1000");
    let (_, runs) = daemon.get("/api/hook-runs?last=1000");
    let (_, deliveries) = daemon.get("/api/webhooks/global/leaky/deliveries?last=100");
    let (_, receipts) = daemon.get("/api/crons/leaky/runs?last=100");
    format!("{feed}\n{runs}\n{deliveries}\n{receipts}\n{}", daemon.log())
}

#[test]
fn known_secrets_printed_by_a_process_are_masked_everywhere_they_are_recorded() {
    let config = format!(
        r#"
[process]
pass_env = ["CANOPY_TEST_PASSED"]

[webhooks]
bind_port = 0
token = "{TOKEN}"

[webhooks.entries.leaky]
type = "command"
command = "echo \"> Authorization: Bearer $(cat $CANOPY_HOME/daemon.token)\" >&2; echo \"token {TOKEN}\" >&2; exit 3"

[webhooks.entries.gitlab]
type = "command"
command = "true"
pass_headers = ["x-gitlab-token"]
match = {{ "header.x-gitlab-token" = "gl-EXPECTED-4567" }}

[[crons]]
name = "leaky"
schedule = "@every 1s"
action = {{ command = "echo \"passed $CANOPY_TEST_PASSED\" >&2; exit 4" }}

[[hooks]]
name = "leaky"
event = "spec.created"
action = {{ command = "echo \"call $CANOPY_CALL_TOKEN\" >&2; exit 5" }}
"#
    );
    let daemon = Daemon::start_with_env(&config, &[("CANOPY_TEST_PASSED", PASSED)]);
    let url = daemon.webhooks_url();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let answer = client
        .post(format!("{url}/hooks/global/leaky?wait=true"))
        .bearer_auth(TOKEN)
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 500);
    let answered = answer.text().unwrap();
    daemon.add_spec("s");
    // A wrong GitLab token: ignored, with a reason that shows neither value.
    let ignored: Value = client
        .post(format!("{url}/hooks/global/gitlab"))
        .bearer_auth(TOKEN)
        .header("X-Gitlab-Token", "GLWRONG-0099887766")
        .body("{}")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(ignored["status"], "ignored", "{ignored}");
    let reason = ignored["reason"].as_str().unwrap();
    assert!(
        reason.contains("header.x-gitlab-token") && reason.contains("not shown"),
        "{reason}"
    );

    // Each failure is recorded and emitted, masked.
    let text = wait_for("every failure recorded", Duration::from_secs(60), || {
        let text = everything(&daemon);
        (text.contains("webhook.failed")
            && text.contains("cron.failed")
            && text.contains("hook.run.failed"))
        .then_some(text)
    });
    let (_, gitlab) = daemon.get("/api/webhooks/global/gitlab/deliveries?last=10");
    let text = format!(
        "{text}\n{gitlab}\n{answered}\n{}",
        daemon.ok(&[
            "webhooks",
            "deliveries",
            "--hook",
            "global/gitlab",
            "--json"
        ])
    );
    for secret in [
        daemon.token(),
        TOKEN,
        PASSED,
        "gl-EXPECTED-4567",
        "GLWRONG-0099887766",
    ] {
        assert!(!text.contains(secret), "`{secret}` was recorded:\n{text}");
    }
    assert!(
        !text.contains("call canopy-call-"),
        "a call token was recorded"
    );
    for shown in [
        "Bearer [masked]",
        "token [masked]",
        "passed [masked]",
        "call [masked]",
    ] {
        assert!(text.contains(shown), "`{shown}` missing:\n{text}");
    }
}
