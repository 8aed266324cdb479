//! Project hooks end to end: a real git checkout watched by a real daemon. A commit fires
//! `checkout_updated` once with its sha and a new tag fires `tag_pushed` once with its name
//! (hook runs, the feed, the catalog, and what the hook's command was handed); the first
//! observation fires nothing; a restart fires for what changed while the daemon was down and
//! for nothing it had seen; a reload starts a watcher; a bad `[projects]` section names its
//! path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, git_repo, real, wait_for};

/// How long a change may take to fire through filesystem notifications, the watcher's path:
/// well under its 30 s fallback re-check, so a test waiting this long shows notifications work.
const NOTICED: Duration = Duration::from_secs(20);

/// How long anything else may take (a loaded machine).
const SETTLED: Duration = Duration::from_secs(60);

/// Runs git in `dir`, as a person at the checkout would; returns stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Canopy Test")
        .env("GIT_AUTHOR_EMAIL", "test@canopy.invalid")
        .env("GIT_COMMITTER_NAME", "Canopy Test")
        .env("GIT_COMMITTER_EMAIL", "test@canopy.invalid")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Commits an empty change; returns the new HEAD.
fn commit(dir: &Path, message: &str) -> String {
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// The project hooks' runs of one event (`project.checkout_updated`), oldest first, once there
/// are `count` and every one has ended; waiting at most `limit`.
fn project_runs(daemon: &Daemon, event: &str, count: usize, limit: Duration) -> Vec<Value> {
    wait_for(
        &format!("{count} finished {event} hook runs"),
        limit,
        || {
            let (status, answer) = daemon.get(&format!(
                "/api/hook-runs?source=project&event={event}&last=1000"
            ));
            assert_eq!(status, 200, "{answer}");
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

/// The feed's events named `event`, oldest first.
fn feed_events(daemon: &Daemon, event: &str) -> Vec<Value> {
    let (status, answer) = daemon.get(&format!("/api/feed?event={event}&last=1000"));
    assert_eq!(status, 200, "{answer}");
    answer["events"].as_array().unwrap().clone()
}

/// Waits until the daemon has recorded its first look at project `name`'s checkout.
fn wait_baseline(daemon: &Daemon, name: &str) {
    wait_for(&format!("the baseline of project {name}"), SETTLED, || {
        daemon
            .log()
            .lines()
            .any(|line| {
                line.contains("project checkout baseline recorded")
                    && line.contains(&format!("project={name}"))
            })
            .then_some(())
    });
}

/// `KEY=value` lines a hook wrote, one block per run, split at `--`.
fn env_blocks(path: &Path) -> Vec<BTreeMap<String, String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split("--\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            block
                .lines()
                .filter_map(|line| line.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn config(repo: &Path, out: &Path) -> String {
    format!(
        r#"
[projects.web]
checkout = "{repo}"

[[projects.web.hooks.checkout_updated]]
command = "{{ env | grep -E '^CANOPY_'; echo PWD=$(pwd -P); echo MARKER={{{{commit_sha}}}}; echo --; }} >> {out}/checkouts.txt"
timeout_secs = 30

[[projects.web.hooks.tag_pushed]]
command = "echo {{{{tag}}}} $CANOPY_HOOK_TAG $CANOPY_HOOK_COMMIT_SHA >> {out}/tags.txt"
timeout_secs = 30
"#,
        repo = repo.display(),
        out = out.display()
    )
}

#[test]
fn a_commit_and_a_tag_fire_once_each_and_a_restart_fires_only_what_it_missed() {
    let repo = git_repo();
    let initial = git(repo.path(), &["rev-parse", "HEAD"]);
    // Seen at the first observation: never fires.
    git(repo.path(), &["tag", "v0"]);
    let out = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("canopy.toml"), config(repo.path(), out.path())).unwrap();
    let mut daemon = Daemon::start_on(&data);
    wait_baseline(&daemon, "web");

    // A commit fires checkout_updated once, with its sha, in the checkout.
    let first = commit(repo.path(), "second");
    let runs = project_runs(&daemon, "project.checkout_updated", 1, NOTICED);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let run = &runs[0];
    assert_eq!(run["source"], "project");
    assert_eq!(run["hook_name"], "web/checkout_updated[0]");
    assert_eq!(run["event"], "project.checkout_updated");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["dispatch_depth"], 0);
    assert_eq!(run["project"], real(repo.path()));
    let seen = env_blocks(&out.path().join("checkouts.txt"));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["CANOPY_HOOK_COMMIT_SHA"], first);
    assert_eq!(seen[0]["MARKER"], first);
    assert_eq!(seen[0]["CANOPY_HOOK_PREVIOUS_SHA"], initial);
    assert_eq!(seen[0]["CANOPY_HOOK_BRANCH"], "main");
    assert_eq!(seen[0]["CANOPY_HOOK_EVENT"], "project.checkout_updated");
    assert_eq!(seen[0]["CANOPY_HOOK_PROJECT"], real(repo.path()));
    assert_eq!(seen[0]["PWD"], real(repo.path()));
    assert_eq!(seen[0]["CANOPY_ACTOR"], "hook:web/checkout_updated[0]");
    assert_eq!(seen[0]["CANOPY_DISPATCH_DEPTH"], "1");

    // The feed has the event once, about the project and its checkout; the hook run's end is
    // the hook's.
    let updates = feed_events(&daemon, "project.checkout_updated");
    assert_eq!(updates.len(), 1, "{updates:#?}");
    assert_eq!(updates[0]["payload"]["commit_sha"], first.as_str());
    assert_eq!(updates[0]["payload"]["project_name"], "web");
    assert_eq!(updates[0]["project"], real(repo.path()));
    assert_eq!(updates[0]["target"], "web");
    assert_eq!(updates[0]["actor"], "user");
    // `feed --project` takes the project's name; an unknown one is refused, naming those known.
    let by_name = daemon.json(&[
        "feed",
        "--project",
        "web",
        "--event",
        "project.checkout_updated",
    ]);
    assert_eq!(by_name["events"], Value::Array(updates.clone()));
    let err = daemon.fails(&["feed", "--project", "nosuch"]);
    assert!(
        err.contains("no project is named `nosuch` (projects: web)"),
        "{err}"
    );
    let ended = feed_events(&daemon, "hook.run.completed");
    assert!(
        ended
            .iter()
            .any(|e| e["actor"] == "hook:web/checkout_updated[0]"
                && e["payload"]["source"] == "project"
                && e["project"] == real(repo.path())),
        "{ended:#?}"
    );

    // A new tag fires tag_pushed once with its name; the commit does not fire again.
    git(repo.path(), &["tag", "v1"]);
    let tags = project_runs(&daemon, "project.tag_pushed", 1, NOTICED);
    assert_eq!(tags.len(), 1, "{tags:#?}");
    assert_eq!(tags[0]["hook_name"], "web/tag_pushed[0]");
    assert_eq!(tags[0]["status"], "completed", "{}", tags[0]);
    assert_eq!(
        std::fs::read_to_string(out.path().join("tags.txt")).unwrap(),
        format!("v1 v1 {first}\n")
    );
    assert_eq!(
        project_runs(&daemon, "project.checkout_updated", 1, SETTLED).len(),
        1
    );

    // `canopy hooks runs --source project` shows both, newest first.
    let listed = daemon.json(&["hooks", "runs", "--source", "project"]);
    let names: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hook_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web/tag_pushed[0]", "web/checkout_updated[0]"]);
    let table = daemon.ok(&["hooks", "runs", "--source", "project"]);
    assert!(
        table.contains("project") && table.contains("web/tag_pushed[0]"),
        "{table}"
    );

    // The catalog lists both hooks as the project's.
    let (status, catalog) = daemon.get("/api/hooks/catalog?source=project");
    assert_eq!(status, 200, "{catalog}");
    let names: Vec<&str> = catalog["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web/checkout_updated[0]", "web/tag_pushed[0]"]);
    assert_eq!(catalog["hooks"][1]["source"], "project");
    assert_eq!(catalog["hooks"][1]["event"], "project.tag_pushed");
    assert_eq!(catalog["hooks"][1]["timeout_ms"], 30_000);
    let checkout_path = real(repo.path());
    let (_, in_checkout) = daemon.get(&format!(
        "/api/hooks/catalog?source=project&workspace={checkout_path}"
    ));
    assert_eq!(
        in_checkout["hooks"].as_array().unwrap().len(),
        2,
        "{in_checkout}"
    );
    // The checkout's hook runs in the hook API's terms (seed 004): source `project`.
    let (status, seed) = daemon.get(&format!(
        "/api/workspaces/{}/hooks/runs",
        checkout_path.replace('/', "%2F")
    ));
    assert_eq!(status, 200, "{seed}");
    let seen: Vec<(&str, &str, &str)> = seed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["source"].as_str().unwrap(),
                r["hook_name"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("project", "web/tag_pushed[0]", "applied"),
            ("project", "web/checkout_updated[0]", "applied")
        ]
    );
    let (_, tagged) = daemon.get("/api/hooks/catalog?event=project.tag_pushed");
    let names: Vec<&str> = tagged["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web/tag_pushed[0]"]);

    // A commit made while the daemon is down fires once at the next start; nothing seen
    // before fires again.
    daemon.stop();
    let missed = commit(repo.path(), "while down");
    let daemon = Daemon::start_on(&data);
    let runs = project_runs(&daemon, "project.checkout_updated", 2, SETTLED);
    // A later tag: once it has fired, the watcher has looked at the checkout since the start,
    // and anything it would fire again would be on record.
    // Annotated: it fires with the commit it points at.
    git(repo.path(), &["tag", "-a", "v2", "-m", "release 2"]);
    let tags = project_runs(&daemon, "project.tag_pushed", 2, SETTLED);
    let runs_after = project_runs(&daemon, "project.checkout_updated", 2, SETTLED);
    assert_eq!(runs_after.len(), 2, "{runs_after:#?}");
    assert_eq!(runs.len(), 2);
    let shas: Vec<String> = env_blocks(&out.path().join("checkouts.txt"))
        .iter()
        .map(|b| b["CANOPY_HOOK_COMMIT_SHA"].clone())
        .collect();
    assert_eq!(shas, [first.clone(), missed.clone()]);
    assert_eq!(tags.len(), 2, "{tags:#?}");
    assert_eq!(
        std::fs::read_to_string(out.path().join("tags.txt")).unwrap(),
        format!("v1 v1 {first}\nv2 v2 {missed}\n")
    );
    let updates = feed_events(&daemon, "project.checkout_updated");
    let feed_shas: Vec<&str> = updates
        .iter()
        .map(|e| e["payload"]["commit_sha"].as_str().unwrap())
        .collect();
    assert_eq!(feed_shas, [first.as_str(), missed.as_str()]);
    assert_eq!(updates[1]["payload"]["previous_sha"], first.as_str());
    let pushed: Vec<String> = feed_events(&daemon, "project.tag_pushed")
        .iter()
        .map(|e| e["payload"]["tag"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(pushed, ["v1", "v2"], "v0 was there at the first look");
}

#[test]
fn a_reload_starts_watching_a_new_project_and_bad_sections_name_their_path() {
    let repo = git_repo();
    let out = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let file = data.join("canopy.toml");
    let daemon = Daemon::start_on(&data);

    // Mistakes, each named with its path; nothing changes.
    std::fs::write(
        &file,
        r#"
[projects.web]
checkout = "relative/web"
poll_secs = 0

[[projects.web.hooks.checkout_updated]]
comand = "true"

[[projects.web.hooks.tag_pushed]]
command = "echo {{no_such_marker}}"
"#,
    )
    .unwrap();
    let err = daemon.fails(&["config", "reload"]);
    for expected in [
        "projects.web.checkout: `relative/web` is not an absolute path",
        "projects.web.poll_secs: must be from 1 to 3600",
        "projects.web.hooks.checkout_updated[0]: unknown field `comand`; did you mean `command`?",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    // The executor's own check, with the daemon: a marker the event does not offer.
    std::fs::write(
        &file,
        format!(
            "[projects.web]\ncheckout = \"{}\"\n[[projects.web.hooks.tag_pushed]]\ncommand = \"echo {{{{no_such_marker}}}}\"\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let err = daemon.fails(&["config", "reload"]);
    assert!(
        err.contains("projects.web.hooks.tag_pushed[0]") && err.contains("no_such_marker"),
        "{err}"
    );
    // An unknown event is refused, listing the events.
    std::fs::write(
        &file,
        format!(
            "[projects.web]\ncheckout = \"{}\"\n[[projects.web.hooks.tag_push]]\ncommand = \"true\"\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let validate = daemon.cli(&["config", "validate"]);
    assert!(!validate.status.success());
    let text = String::from_utf8_lossy(&validate.stderr);
    assert!(
        text.contains("projects.web.hooks")
            && text.contains("tag_push")
            && text.contains("checkout_updated")
            && text.contains("tag_pushed"),
        "{text}"
    );
    // Nothing is watched.
    let (_, catalog) = daemon.get("/api/hooks/catalog?source=project");
    assert_eq!(catalog["hooks"], json!([]));
    // The taxonomy names the project-hook keys and their markers.
    let (_, events) = daemon.get("/api/hooks/events?family=project");
    let keys: Vec<(&str, &str)> = events["project_hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["event"].as_str().unwrap(),
                k["taxonomy_event"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("checkout_updated", "project.checkout_updated"),
            ("tag_pushed", "project.tag_pushed")
        ]
    );
    assert!(
        events["project_hooks"][1]["markers"]
            .as_array()
            .unwrap()
            .contains(&json!("tag")),
        "{events}"
    );

    // A good file: the project is watched from now on, its first look a baseline.
    std::fs::write(&file, config(repo.path(), out.path())).unwrap();
    let answer = daemon.json(&["config", "reload"]);
    assert_eq!(answer["report"]["applied"], json!(["projects"]), "{answer}");
    // A project without webhooks changes nothing that needs a restart.
    assert_eq!(answer["report"]["needs_restart"], json!([]), "{answer}");
    wait_baseline(&daemon, "web");
    let sha = commit(repo.path(), "after reload");
    let runs = project_runs(&daemon, "project.checkout_updated", 1, SETTLED);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["status"], "completed", "{}", runs[0]);
    let seen = env_blocks(&out.path().join("checkouts.txt"));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["CANOPY_HOOK_COMMIT_SHA"], sha);
    assert!(
        feed_events(&daemon, "project.tag_pushed").is_empty(),
        "no tag was made"
    );
}

#[test]
fn a_hook_that_commits_to_its_own_checkout_stops_at_the_dispatch_depth_limit() {
    let repo = git_repo();
    let config = format!(
        r#"
[limits]
max_dispatch_depth = 2

[projects.web]
checkout = "{repo}"

[[projects.web.hooks.checkout_updated]]
command = "git -c user.name=Hook -c user.email=hook@canopy.invalid commit -q --allow-empty -m again"
timeout_secs = 30
"#,
        repo = repo.path().display()
    );
    let daemon = Daemon::start_with_config(&config);
    wait_baseline(&daemon, "web");
    commit(repo.path(), "by hand");

    // Each commit the hook makes is seen while it runs: it is the hook's, one level deeper.
    // Depths 0, 1 and 2 run the hook; the commit at depth 3 records its run dropped.
    let runs = project_runs(&daemon, "project.checkout_updated", 4, SETTLED);
    let statuses: Vec<(&str, i64)> = runs
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap(),
                r["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("completed", 0),
            ("completed", 1),
            ("completed", 2),
            ("dropped", 3)
        ],
        "{runs:#?}"
    );
    let actors: Vec<(String, i64)> = feed_events(&daemon, "project.checkout_updated")
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_string(),
                e["dispatch_depth"].as_i64().unwrap(),
            )
        })
        .collect();
    let hook = "hook:web/checkout_updated[0]".to_string();
    assert_eq!(
        actors,
        [
            ("user".to_string(), 0),
            (hook.clone(), 1),
            (hook.clone(), 2),
            (hook, 3)
        ]
    );
    // The initial commit, the one by hand and the hook's three.
    assert_eq!(git(repo.path(), &["rev-list", "--count", "HEAD"]), "5");
}

#[test]
fn a_checkout_that_is_not_there_yet_is_watched_once_it_appears() {
    let place = tempfile::tempdir().unwrap();
    let checkout = place.path().join("web");
    let out = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[projects.web]
checkout = "{checkout}"
poll_secs = 1

[[projects.web.hooks.checkout_updated]]
command = "echo $CANOPY_HOOK_COMMIT_SHA >> {out}/shas.txt"
"#,
        checkout = checkout.display(),
        out = out.path().display()
    );
    // The daemon starts all the same, and says why it cannot read the checkout.
    let daemon = Daemon::start_with_config(&config);
    wait_for("the missing checkout in the log", SETTLED, || {
        daemon
            .log()
            .contains("cannot read the project's checkout")
            .then_some(())
    });

    // Cloned later (made aside, then moved into place whole): its first look is a baseline,
    // then a commit fires.
    let staging = place.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    git(&staging, &["init", "-q", "-b", "main"]);
    commit(&staging, "first");
    std::fs::rename(&staging, &checkout).unwrap();
    wait_baseline(&daemon, "web");
    let sha = commit(&checkout, "second");
    let runs = project_runs(&daemon, "project.checkout_updated", 1, SETTLED);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["status"], "completed", "{}", runs[0]);
    assert_eq!(
        std::fs::read_to_string(out.path().join("shas.txt")).unwrap(),
        format!("{sha}\n")
    );
}
