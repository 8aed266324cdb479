//! Untrusted values never run as shell: a spec's name in a graph hook and a daemon hook, a git
//! tag in a project hook, a webhook's body in its command handler. Each surface runs the command
//! shapes users write, with values built to break out (`$(…)`, backticks, `;`, newlines, quotes,
//! `#`, `${IFS}`), through a real daemon and real processes; every value must arrive as data and
//! nothing may run. The shapes that walked around the old quoting check are refused at edit time,
//! naming the field and the marker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, wait_for};

/// Values that would create `PWN` in the process's directory if a shell parsed them. `{pwn}` is
/// replaced by the path to create.
const HOSTILE: &[&str] = &[
    "$(touch {pwn})",
    "`touch {pwn}`",
    "x; touch {pwn}",
    "x && touch {pwn} #",
    "'; touch {pwn}; '",
    "\"; touch {pwn}; \"",
    "$(touch${IFS}{pwn})",
    "x #\"$(touch {pwn})\"",
    "\\'$(touch {pwn})",
];

/// The hostile values, aimed at `pwn`.
fn hostile(pwn: &Path) -> Vec<String> {
    HOSTILE
        .iter()
        .map(|v| v.replace("{pwn}", &pwn.display().to_string()))
        .collect()
}

/// The command shapes a user writes around a marker (`{X}`), each writing what it got,
/// NUL-terminated, to a file of `out`: a shell line, a command substitution, and a line that
/// needs no shell (run directly; the value becomes a file name).
fn shapes(out: &Path, marker: &str) -> Vec<(&'static str, String)> {
    let out = out.display();
    vec![
        (
            "shell",
            format!("printf '%s\\0' {marker} >> {out}/shell.txt"),
        ),
        (
            "subst",
            format!("v=$(printf %s {marker}); printf '%s\\0' \"$v\" >> {out}/subst.txt"),
        ),
        ("direct", format!("/usr/bin/touch {out}/direct/{marker}")),
    ]
}

/// The shapes that walked around the old quoting check. Each must be refused at edit time.
fn walkarounds(out: &Path, marker: &str) -> Vec<String> {
    let out = out.display();
    vec![
        format!("echo g\\ #\"{marker}\" > {out}/f"),
        format!("echo ${{x:-a #}} \"{marker}\""),
        format!("\"$(case a in a) echo \"{marker}\";; esac)\""),
        format!("echo note\\ #\"{marker}\" > {out}/f"),
    ]
}

/// What every shape wrote, as a set per shape; asserts each got exactly `values` and that no
/// `PWN` exists anywhere it could have been made.
fn assert_values_arrived_as_data(out: &Path, values: &[String], pwns: &[&Path]) {
    let want: BTreeSet<String> = values.iter().cloned().collect();
    for file in ["shell.txt", "subst.txt"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap_or_default();
        let got: BTreeSet<String> = text.split_terminator('\0').map(str::to_string).collect();
        assert_eq!(got, want, "{file}");
    }
    let direct: BTreeSet<String> = std::fs::read_dir(out.join("direct"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(direct, want, "direct");
    for pwn in pwns {
        assert!(
            !pwn.exists(),
            "a value ran as shell: {} exists",
            pwn.display()
        );
    }
}

fn assert_all_completed(runs: &[Value]) {
    for run in runs {
        assert_eq!(run["status"], "completed", "{run:#}");
    }
}

#[test]
fn a_spec_name_in_a_graph_hook_is_data_in_every_shape() {
    let daemon = Daemon::start();
    let repo = git_repo();
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("direct")).unwrap();
    let pwn = repo.path().join("PWN");
    let names = hostile(Path::new("PWN"));
    let specs: Vec<String> = names.iter().map(|name| daemon.add_spec(name)).collect();

    // The walk-arounds are refused, naming the event, the field and the marker.
    for command in walkarounds(out.path(), "{{spec_name}}") {
        let (status, answer) = daemon.send(
            "POST",
            "/api/graphs",
            &json!({ "name": "refused", "workdir": repo.path(), "nodes": [{ "name": "n", "command": "true" }],
                     "hooks": { "on_spec_completed": [{ "command": command }] } }),
        );
        assert_eq!(status, 400, "{command}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("field `command`: marker `{{spec_name}}` sits"),
            "{command}: {message}"
        );
    }

    let hooks: Vec<Value> = shapes(out.path(), "{{spec_name}}")
        .into_iter()
        .map(|(_, command)| json!({ "command": command }))
        .collect();
    daemon.create_graph(json!({
        "name": "g", "workdir": repo.path(), "specs": specs,
        "nodes": [{ "name": "n", "command": "true" }],
        "hooks": { "on_spec_completed": hooks },
    }));
    daemon.control_ok("g", json!({ "action": "run" }));
    let view = daemon.settled("g");
    assert_eq!(view["status"], "completed", "{view:#}");
    let runs = daemon.ended_hook_runs("graph", names.len() * 3);
    assert_all_completed(&runs);
    assert_values_arrived_as_data(out.path(), &names, &[&pwn, &out.path().join("PWN")]);
}

#[test]
fn a_spec_name_in_a_daemon_hook_is_data_in_every_shape() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("direct")).unwrap();
    let mut config = String::new();
    for (name, command) in shapes(out.path(), "{{spec_name}}") {
        config.push_str(&format!(
            "[[hooks]]\nname = \"{name}\"\nevent = \"spec.created\"\ncwd = {cwd}\naction = {{ command = {command} }}\n",
            cwd = toml_string(&out.path().display().to_string()),
            command = toml_string(&command),
        ));
    }
    let daemon = Daemon::start_with_config(&config);
    let names = hostile(Path::new("PWN"));
    for name in &names {
        daemon.add_spec(name);
    }
    let runs = daemon.ended_hook_runs("config", names.len() * 3);
    assert_all_completed(&runs);
    assert_values_arrived_as_data(out.path(), &names, &[&out.path().join("PWN")]);

    // The walk-arounds are refused by `config validate`, naming the hook, field and marker.
    for command in walkarounds(out.path(), "{{spec_name}}") {
        std::fs::write(
            daemon.data_dir.join("canopy.toml"),
            format!(
                "[[hooks]]\nname = \"w\"\nevent = \"spec.created\"\naction = {{ command = {} }}\n",
                toml_string(&command)
            ),
        )
        .unwrap();
        let err = daemon.fails(&["config", "validate"]);
        assert!(
            err.contains("field `command`: marker `{{spec_name}}` sits"),
            "{command}: {err}"
        );
    }
}

#[test]
fn a_git_tag_in_a_project_hook_is_data_in_every_shape() {
    let repo = git_repo();
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("direct")).unwrap();
    let mut config = format!(
        "[projects.web]\ncheckout = {}\n",
        toml_string(&repo.path().display().to_string())
    );
    for (_, command) in shapes(out.path(), "{{tag}}") {
        config.push_str(&format!(
            "[[projects.web.hooks.tag_pushed]]\ncommand = {}\ntimeout_secs = 30\n",
            toml_string(&command)
        ));
    }
    let daemon = Daemon::start_with_config(&config);
    wait_for("the project's baseline", Duration::from_secs(60), || {
        daemon
            .log()
            .contains("project checkout baseline recorded")
            .then_some(())
    });
    // Tag names git accepts (no blanks, no `\`), each trying to run `touch PWN` in the checkout.
    let tags = [
        "$(touch${IFS}PWN)",
        "`touch${IFS}PWN`",
        "x;touch${IFS}PWN",
        "x&&touch${IFS}PWN#",
        "'$(touch${IFS}PWN)'",
        "\"$(touch${IFS}PWN)\"",
        "x#\"$(touch${IFS}PWN)\"",
    ];
    for tag in tags {
        let status = Command::new("git")
            .args(["tag", tag])
            .current_dir(repo.path())
            .status()
            .unwrap();
        assert!(status.success(), "git tag {tag}");
    }
    let runs = daemon.ended_hook_runs("project", tags.len() * 3);
    assert_all_completed(&runs);
    let tags: Vec<String> = tags.iter().map(|t| (*t).to_string()).collect();
    assert_values_arrived_as_data(out.path(), &tags, &[&repo.path().join("PWN")]);

    for command in walkarounds(out.path(), "{{tag}}") {
        std::fs::write(
            daemon.data_dir.join("canopy.toml"),
            format!(
                "[projects.web]\ncheckout = {}\n[[projects.web.hooks.tag_pushed]]\ncommand = {}\n",
                toml_string(&repo.path().display().to_string()),
                toml_string(&command)
            ),
        )
        .unwrap();
        let err = daemon.fails(&["config", "validate"]);
        assert!(
            err.contains("field `command`: marker `{{tag}}` sits"),
            "{command}: {err}"
        );
    }
}

#[test]
fn a_webhook_body_in_a_command_handler_is_data_in_every_shape() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("direct")).unwrap();
    let token = "untrusted-values-token-0123";
    let mut config = format!("[webhooks]\nbind_port = 0\ntoken = \"{token}\"\n");
    for (name, command) in shapes(out.path(), "{{body}}") {
        config.push_str(&format!(
            "[webhooks.entries.{name}]\ntype = \"command\"\ncwd = {}\ncommand = {}\n",
            toml_string(&out.path().display().to_string()),
            toml_string(&command)
        ));
    }
    let daemon = Daemon::start_with_config(&config);
    let base = daemon.webhooks_url();
    let mut bodies = hostile(Path::new("PWN"));
    bodies.push("x\ntouch PWN".to_string());
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    for body in &bodies {
        for (name, _) in shapes(out.path(), "") {
            let answer = client
                .post(format!("{base}/hooks/global/{name}?wait=true"))
                .bearer_auth(token)
                .body(body.clone())
                .send()
                .unwrap();
            let status = answer.status().as_u16();
            let text = answer.text().unwrap_or_default();
            assert_eq!(status, 200, "{name} with {body:?}: {text}");
        }
    }
    assert_values_arrived_as_data(out.path(), &bodies, &[&out.path().join("PWN")]);

    for command in walkarounds(out.path(), "{{body}}") {
        std::fs::write(
            daemon.data_dir.join("canopy.toml"),
            format!(
                "[webhooks]\nbind_port = 0\ntoken = \"{token}\"\n[webhooks.entries.w]\ntype = \"command\"\ncommand = {}\n",
                toml_string(&command)
            ),
        )
        .unwrap();
        let err = daemon.fails(&["config", "validate"]);
        assert!(err.contains("marker `{{body}}` sits"), "{command}: {err}");
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}
