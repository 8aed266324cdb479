//! Crons end to end: a real daemon with `[[crons]]` in its canopy.toml, real processes, the
//! receipts read back over the API and the CLI; a planned stop that drains, a crash, misses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{CANOPY, Daemon, wait_for};

/// A data dir with this canopy.toml, for daemons started on it (and restarted).
fn data_dir(config: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("canopy.toml"), config).unwrap();
    (tmp, data)
}

fn receipts(daemon: &Daemon, cron: &str) -> Vec<Value> {
    let (status, answer) = daemon.get(&format!("/api/crons/{cron}/runs?last=1000"));
    assert_eq!(status, 200, "{answer}");
    answer["runs"].as_array().unwrap().clone()
}

/// Waits for a receipt of `cron` that `pick` accepts.
fn receipt_where(daemon: &Daemon, cron: &str, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, Duration::from_secs(30), || {
        receipts(daemon, cron).into_iter().find(|r| pick(r))
    })
}

fn status_of(receipt: &Value) -> &str {
    receipt["status"].as_str().unwrap()
}

#[test]
fn a_cron_fires_on_schedule_with_a_receipt_its_identity_and_its_actor_on_nested_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let out = tmp.path().join("env.txt");
    let body = tmp.path().join("spec.md");
    std::fs::write(&body, support::spec_body("made by a cron")).unwrap();
    let config = format!(
        r#"
[[crons]]
name = "tick"
schedule = "@every 1s"
timeout_secs = 30
action = {{ command = "echo \"$CANOPY_CRON_NAME $CANOPY_CRON_RUN_ID $CANOPY_ACTOR $CANOPY_AUTOMATION_KIND $CANOPY_AUTOMATION_ID\" >> {out}; {canopy} spec add --name from-cron --file {body} > /dev/null && echo fired" }}
"#,
        out = out.display(),
        body = body.display(),
        canopy = CANOPY,
    );
    std::fs::write(data.join("canopy.toml"), config).unwrap();
    let daemon = Daemon::start_on(&data);
    let done = receipt_where(&daemon, "tick", "a completed firing", |r| {
        status_of(r) == "completed"
    });
    assert_eq!(done["trigger"], "schedule");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["actor"], "cron:tick");
    assert!(done["output"].as_str().unwrap().contains("fired"), "{done}");
    let scheduled: String = done["scheduled_at"].as_str().unwrap().to_string();
    assert!(
        scheduled.ends_with('Z'),
        "a whole scheduled second: {scheduled}"
    );
    // Prepared ahead of its second, it starts on it: its receipt says so.
    let at = |field: &str| humantime::parse_rfc3339(done[field].as_str().unwrap()).unwrap();
    assert!(at("started_at") >= at("scheduled_at"), "{done}");
    // The process saw who it runs as, and its own receipt's run id.
    let run_id = done["run_id"].as_str().unwrap();
    let lines = std::fs::read_to_string(&out).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l == format!("tick {run_id} cron:tick cron cron:tick")),
        "{lines}"
    );
    // The spec its nested `canopy` call added (it finds this daemon through the CANOPY_HOME
    // the daemon sets) is on the feed as the cron's doing.
    let (_, feed) = daemon.get("/api/feed?event=spec.created&last=10");
    let event = &feed["events"][0];
    assert_eq!(event["actor"], "cron:tick", "{feed:#}");
    // Each firing is on the feed too.
    let (_, feed) = daemon.get("/api/feed?event=cron.*&last=100");
    let names: Vec<&str> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"cron.fired") && names.contains(&"cron.completed"),
        "{names:?}"
    );

    // What an operator reads: the list, with its next firing and last execution, and the logs.
    let list = daemon.ok(&["cron", "list"]);
    assert!(
        list.contains("tick") && list.contains("@every 1s") && list.contains("completed, exit 0"),
        "{list}"
    );
    // ... and what it runs.
    assert!(list.lines().next().unwrap().ends_with("RUNS"), "{list}");
    assert!(list.contains("command: echo \"$CANOPY_CRON_NAME"), "{list}");
    // The name is taken first, as `cron run NAME` takes it, or with --name.
    let logs = daemon.ok(&["cron", "logs", "tick", "--last", "50", "--output"]);
    assert!(
        logs.contains(&run_id[..8]) && logs.contains("completed") && logs.contains("| fired"),
        "{logs}"
    );
    let json = daemon.json(&["cron", "list"]);
    assert_eq!(json["crons"][0]["served"], true);
    assert!(json["crons"][0]["next_at"].as_str().is_some(), "{json}");

    // Taken out of the config, its receipts can still be read.
    std::fs::write(data.join("canopy.toml"), "").unwrap();
    daemon.ok(&["config", "reload"]);
    let logs = daemon.ok(&["cron", "logs", "--name", "tick", "--last", "50"]);
    assert!(logs.contains(&run_id[..8]), "{logs}");
    let err = daemon.fails(&["cron", "logs", "--name", "never-was"]);
    assert!(err.contains("no cron named `never-was`"), "{err}");
}

#[test]
fn overlap_forbid_skips_replace_stops_the_last_and_a_manual_run_waits_for_its_end() {
    let daemon = Daemon::start_with_config(
        r#"
[[crons]]
name = "slow"
schedule = "@every 1s"
timeout_secs = 30
action = { command = "sleep 3" }

[[crons]]
name = "hand"
schedule = "@yearly"
action = { command = "echo by hand; exit 3" }

[[crons]]
name = "newest"
schedule = "@every 1s"
overlap = "replace"
action = { command = "echo started; sleep 5" }
"#,
    );
    // `replace`: the next firing stops the one still running, whose receipt says so.
    let replaced = receipt_where(&daemon, "newest", "a replaced firing", |r| {
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("replaced by the next firing"))
    });
    assert_eq!(status_of(&replaced), "failed", "{replaced}");
    assert!(
        replaced["output"].as_str().unwrap().contains("started"),
        "{replaced}"
    );
    let skipped = receipt_where(&daemon, "slow", "a skipped firing", |r| {
        status_of(r) == "skipped"
    });
    assert!(
        skipped["error"]
            .as_str()
            .unwrap()
            .contains("still runs (overlap = \"forbid\")"),
        "{skipped}"
    );
    // A manual firing of another cron: `--wait` prints how it ended and fails with it.
    let output = daemon.cli(&["cron", "run", "hand", "--wait"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success());
    assert!(
        stdout.contains("failed") && stdout.contains("exit 3") && stdout.contains("| by hand"),
        "{stdout}"
    );
    let manual = &receipts(&daemon, "hand")[0];
    assert_eq!(
        (manual["trigger"].as_str(), manual["exit_code"].as_i64()),
        (Some("manual"), Some(3))
    );

    // Unknown names are refused, listing the crons there are.
    let err = daemon.fails(&["cron", "run", "nope"]);
    assert!(
        err.contains("no cron named `nope`; configured crons: slow, hand, newest"),
        "{err}"
    );
}

#[test]
fn a_cron_for_other_nodes_does_not_run_here() {
    let daemon = Daemon::start_with_config(
        r#"
node = "build-1"

[[crons]]
name = "elsewhere"
schedule = "@every 1s"
nodes = ["build-2"]
action = { command = "true" }

[[crons]]
name = "here"
schedule = "@every 1s"
nodes = ["build-1"]
action = { command = "true" }
"#,
    );
    // `here` firing twice shows the schedulers ran for a while.
    wait_for("two firings of `here`", Duration::from_secs(30), || {
        (receipts(&daemon, "here").len() >= 2).then_some(())
    });
    assert!(receipts(&daemon, "elsewhere").is_empty());
    let list = daemon.json(&["cron", "list"]);
    let elsewhere = &list["crons"][0];
    assert_eq!(
        (elsewhere["served"].as_bool(), elsewhere["state"].as_str()),
        (Some(false), Some("not served here"))
    );
    let err = daemon.fails(&["cron", "run", "elsewhere"]);
    assert!(
        err.contains("does not run on this node") && err.contains("build-1"),
        "{err}"
    );
}

#[test]
fn sigterm_drains_a_short_firing_and_forces_a_long_one_keeping_its_partial_output() {
    let mut daemon = Daemon::start_with_config(
        r#"
[[crons]]
name = "long"
schedule = "@yearly"
action = { command = "echo partial; sleep 60; echo never" }

[[crons]]
name = "short"
schedule = "@yearly"
action = { command = "sleep 2; echo finished" }
"#,
    );
    // A graph whose one node takes two seconds: it ends within the budget, as it would.
    let repo = support::git_repo();
    let marks = tempfile::tempdir().unwrap();
    let node_started = marks.path().join("node-started");
    let spec = daemon.add_spec("drained");
    daemon.create_graph(serde_json::json!({
        "name": "drained",
        "workdir": repo.path(),
        "specs": [spec],
        "nodes": [{ "name": "work", "command": format!("touch {}; sleep 2; echo node done", node_started.display()) }],
    }));
    daemon.ok(&["cron", "run", "long"]);
    daemon.ok(&["cron", "run", "short"]);
    daemon.control("drained", serde_json::json!({ "action": "run" }));
    receipt_where(&daemon, "long", "the long firing to run", |r| {
        status_of(r) == "running"
    });
    wait_for("the node to run", Duration::from_secs(30), || {
        node_started.exists().then_some(())
    });
    let started = Instant::now();
    daemon.sigterm();
    let took = started.elapsed();
    // The 30 s budget, then forced within 5 s.
    assert!(
        took >= Duration::from_secs(25) && took < Duration::from_secs(45),
        "stopped after {took:?}"
    );
    let daemon = Daemon::start_on(&daemon.data_dir);
    let long = &receipts(&daemon, "long")[0];
    assert_eq!(status_of(long), "interrupted_by_restart", "{long}");
    let output = long["output"].as_str().unwrap();
    assert!(
        output.contains("partial") && !output.contains("never"),
        "{long}"
    );
    assert_eq!(long["original_effects_unknown"], false);
    let short = &receipts(&daemon, "short")[0];
    assert_eq!(
        status_of(short),
        "completed",
        "drained within the budget: {short}"
    );
    let graph = daemon.json(&["graph", "get", "drained"]);
    assert_eq!(
        graph["status"], "completed",
        "drained within the budget: {graph:#}"
    );

    // Its end is on the feed with the original run id.
    let (_, feed) = daemon.get("/api/feed?event=cron.interrupted&last=10");
    assert_eq!(
        feed["events"][0]["payload"]["run_id"], long["run_id"],
        "{feed:#}"
    );
}

#[test]
fn daemon_stop_with_a_timeout_refuses_new_firings_and_says_what_it_drains() {
    let mut daemon = Daemon::start_with_config(
        r#"
[[crons]]
name = "long"
schedule = "@yearly"
action = { command = "echo partial; sleep 60" }

[[crons]]
name = "late"
schedule = "@yearly"
action = { command = "true" }
"#,
    );
    daemon.ok(&["cron", "run", "long"]);
    receipt_where(&daemon, "long", "the firing to run", |r| {
        status_of(r) == "running"
    });
    let started = Instant::now();
    let stopping = std::process::Command::new(CANOPY)
        .args(["daemon", "stop", "--timeout", "3", "--data-dir"])
        .arg(&daemon.data_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While it drains, the daemon still answers, and refuses new firings on the record.
    let refused = wait_for("a refused firing", Duration::from_secs(10), || {
        let output = daemon.cli(&["cron", "run", "late"]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        stderr.contains("did not run (refused)").then_some(stderr)
    });
    assert!(
        refused.contains("a planned stop closed cron admission"),
        "{refused}"
    );
    let output = stopping.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(" of work in flight ha")
            && String::from_utf8_lossy(&output.stderr).contains(" up to 3s to end"),
        "{output:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    daemon.stop();
    let daemon = Daemon::start_on(&daemon.data_dir);
    let long = &receipts(&daemon, "long")[0];
    assert_eq!(status_of(long), "interrupted_by_restart", "{long}");
    assert!(
        long["output"].as_str().unwrap().contains("partial"),
        "{long}"
    );
    assert_eq!(status_of(&receipts(&daemon, "late")[0]), "refused");
    // A bad budget is refused naming the field.
    let (status, answer) = daemon.send(
        "POST",
        "/api/shutdown",
        &serde_json::json!({ "timeout_secs": 99999 }),
    );
    assert_eq!(status, 400);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timeout_secs"),
        "{answer}"
    );
}

#[test]
fn a_firing_cut_by_a_crash_is_interrupted_unknown_and_never_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let starts = tmp.path().join("starts");
    let (_dir, data) = data_dir(&format!(
        r#"
[[crons]]
name = "risky"
schedule = "@yearly"
action = {{ command = "echo start >> {}; sleep 60" }}
"#,
        starts.display()
    ));
    let mut daemon = Daemon::start_on(&data);
    daemon.ok(&["cron", "run", "risky"]);
    wait_for("the firing to start", Duration::from_secs(30), || {
        starts.exists().then_some(())
    });
    daemon.kill();
    let daemon = Daemon::start_on(&data);
    let receipt = &receipts(&daemon, "risky")[0];
    assert_eq!(status_of(receipt), "interrupted_unknown", "{receipt}");
    assert_eq!(receipt["original_effects_unknown"], true);
    // Listing shows it as the last execution, and nothing ran again.
    let list = daemon.ok(&["cron", "list"]);
    assert!(list.contains("interrupted_unknown"), "{list}");
    assert_eq!(receipts(&daemon, "risky").len(), 1);
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 1);
}

#[test]
fn firings_missed_while_down_are_recorded_once_and_catch_up_once_runs_one() {
    let (_dir, data) = data_dir(
        r#"
[[crons]]
name = "counted"
schedule = "@every 1s"
action = { command = "true" }

[[crons]]
name = "caught"
schedule = "@every 1s"
catch_up = "once"
action = { command = "echo late" }
"#,
    );
    let mut daemon = Daemon::start_on(&data);
    receipt_where(&daemon, "counted", "a first firing", |r| {
        status_of(r) == "completed"
    });
    daemon.stop();
    // The daemon stays down over several scheduled seconds.
    std::thread::sleep(Duration::from_secs(3));
    let daemon = Daemon::start_on(&data);
    let missed = receipt_where(&daemon, "counted", "the missed receipt", |r| {
        status_of(r) == "missed"
    });
    assert!(missed["missed_count"].as_i64().unwrap() >= 2, "{missed}");
    let all = receipts(&daemon, "counted");
    assert_eq!(all.iter().filter(|r| status_of(r) == "missed").count(), 1);
    assert!(all.iter().all(|r| r["trigger"] != "catch_up"));
    let late = receipt_where(&daemon, "caught", "the catch-up run", |r| {
        r["trigger"] == "catch_up"
    });
    assert_eq!(
        receipts(&daemon, "caught")
            .iter()
            .filter(|r| r["trigger"] == "catch_up")
            .count(),
        1,
        "{late}"
    );
    let (_, feed) = daemon.get("/api/feed?event=cron.missed&last=10");
    assert_eq!(feed["events"].as_array().unwrap().len(), 2, "{feed:#}");
}

#[test]
fn a_paused_cron_stays_paused_across_a_restart_and_resuming_counts_no_misses() {
    let (_dir, data) = data_dir(
        r#"
[[crons]]
name = "quiet"
schedule = "@every 1s"
action = { command = "true" }

[[crons]]
name = "clock"
schedule = "@every 1s"
action = { command = "true" }
"#,
    );
    let mut daemon = Daemon::start_on(&data);
    let paused = daemon.ok(&["cron", "pause", "quiet"]);
    assert!(paused.contains("paused cron quiet"), "{paused}");
    daemon.stop();
    let daemon = Daemon::start_on(&data);
    let before = receipts(&daemon, "quiet").len();
    // The other cron firing three times shows the schedulers ran.
    let clock_start = receipts(&daemon, "clock").len();
    wait_for("the clock cron to fire", Duration::from_secs(30), || {
        (receipts(&daemon, "clock").len() >= clock_start + 3).then_some(())
    });
    assert_eq!(
        receipts(&daemon, "quiet").len(),
        before,
        "a paused cron fired"
    );
    let list = daemon.json(&["cron", "list"]);
    assert_eq!(list["crons"][0]["state"], "paused");
    let resumed = daemon.ok(&["cron", "resume", "quiet"]);
    assert!(
        resumed.contains("resumed cron quiet; next firing"),
        "{resumed}"
    );
    receipt_where(&daemon, "quiet", "a firing after resume", |r| {
        status_of(r) == "completed"
    });
    assert!(
        receipts(&daemon, "quiet")
            .iter()
            .all(|r| status_of(r) != "missed")
    );
}

#[test]
fn bad_crons_are_refused_naming_their_path_and_what_is_allowed() {
    let daemon = Daemon::start();
    let file = daemon.data_dir.join("candidate.toml");
    std::fs::write(
        &file,
        r#"
[[crons]]
name = "a"
schedule = "0 */6 * *"
action = { command = "true" }

[[crons]]
name = "a"
schedule = "@daily"
timezone = "Mars/Olympus"
overlap = "sometimes"
action = { command = "true" }
"#,
    )
    .unwrap();
    let err = daemon.fails(&["config", "validate", file.to_str().unwrap()]);
    assert!(
        err.contains("crons[1].overlap") || err.contains("crons[1]"),
        "{err}"
    );
    std::fs::write(
        &file,
        r#"
[[crons]]
name = "a"
schedule = "0 */6 * *"
action = { command = "true" }

[[crons]]
name = "a"
schedule = "@every 0s"
jitter_secs = 99999
action = { command = "true" }

[[crons]]
name = "b"
schedule = "@daily"
timezone = "Mars/Olympus"
action = { command = "true" }

[[crons]]
name = "c"
schedule = "@daily"
timeout_secs = 9223372036854775807
cwd = "relative/dir"
action = { command = "true" }
"#,
    )
    .unwrap();
    let err = daemon.fails(&["config", "validate", file.to_str().unwrap()]);
    for expected in [
        "crons[0].schedule: `0 */6 * *` is not a schedule",
        "crons[1].name: `a` names another cron too",
        "crons[1].schedule: `@every 0s`",
        "crons[1].jitter_secs: must be at most 3600",
        "crons[2].timezone: `Mars/Olympus` is not an IANA time zone",
        "crons[3].timeout_secs: must be from 1 to 604800",
        "crons[3].cwd: `relative/dir` is not an absolute path",
    ] {
        assert!(err.contains(expected), "no {expected:?} in:\n{err}");
    }
}

#[test]
fn a_config_reload_schedules_a_new_cron_without_a_restart() {
    let daemon = Daemon::start();
    let list = daemon.ok(&["cron", "list"]);
    assert!(list.contains("no crons"), "{list}");
    std::fs::write(
        daemon.data_dir.join("canopy.toml"),
        "[[crons]]\nname = \"fresh\"\nschedule = \"@every 1s\"\naction = { command = \"echo hi\" }\n",
    )
    .unwrap();
    let reload = daemon.ok(&["config", "reload"]);
    assert!(reload.contains("crons"), "{reload}");
    let fired = receipt_where(&daemon, "fresh", "a firing of the new cron", |r| {
        status_of(r) == "completed"
    });
    assert_eq!(fired["trigger"], "schedule");
    // A new cron starts with nothing missed.
    assert!(
        receipts(&daemon, "fresh")
            .iter()
            .all(|r| status_of(r) != "missed")
    );
}
