//! Canopy on PostgreSQL: a daemon that keeps its records there, and `canopy store migrate`,
//! which moves a single-machine install's `canopy.db` into an empty PostgreSQL database. Real
//! daemons, a real SQLite file, and a real PostgreSQL server (a throwaway one the test starts,
//! see `canopy_store::pg::cluster`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

use serde_json::json;
use support::{CANOPY, Daemon, git_repo};

/// A graph of two command nodes and a completion hook, run to the end; returns its name.
fn run_a_graph(daemon: &Daemon) -> String {
    let repo = git_repo();
    let spec = daemon.add_spec("greeting");
    daemon.create_graph(json!({
        "name": "moved",
        "workdir": repo.path(),
        "specs": [spec],
        "allow_dirty_start": true,
        "nodes": [
            { "name": "write", "command": "echo hello > hello.txt" },
            { "name": "check", "command": "test -s hello.txt" }
        ],
        "hooks": { "on_spec_completed": [ { "command": "echo done: {{spec_name}}" } ] }
    }));
    daemon.control_ok("moved", json!({ "action": "run" }));
    let view = daemon.settled("moved");
    assert_eq!(view["status"], "completed", "{view}");
    daemon.ended_hook_runs("graph", 1);
    std::mem::forget(repo);
    "moved".into()
}

#[test]
fn a_sqlite_install_moves_to_postgres_whole_and_the_daemon_goes_on_there() {
    if support::on_postgres() {
        // This test makes its own SQLite install to move; on the PostgreSQL pass it would start
        // on PostgreSQL already.
        return;
    }
    let mut daemon = Daemon::start();
    let graph = run_a_graph(&daemon);
    let before_runs = daemon.json(&["hooks", "runs", "--graph", &graph]);
    let before_feed = daemon.json(&["feed", "--last", "1000"]);
    let url = canopy_store::pg::cluster::scratch_database().unwrap();

    // Refused while the daemon runs: nothing may be written while it is copied.
    let refused = daemon.fails(&["store", "migrate", "--to", &url]);
    assert!(refused.contains("stop it first"), "{refused}");

    daemon.stop();
    let data_dir = daemon.data_dir.clone();
    let moved = Command::new(CANOPY)
        .args(["--data-dir"])
        .arg(&data_dir)
        .args(["store", "migrate"])
        .env("CANOPY_DATABASE_URL", &url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&moved.stdout);
    let progress = String::from_utf8_lossy(&moved.stderr);
    assert!(moved.status.success(), "{said}\n{progress}");
    assert!(said.contains("every table's count matches"), "{said}");
    assert!(progress.contains("copied hook_runs: 1 rows"), "{progress}");

    // Again into the same database: refused, as it is not empty.
    let again = Command::new(CANOPY)
        .args(["--data-dir"])
        .arg(&data_dir)
        .args(["store", "migrate", "--to", &url])
        .output()
        .unwrap();
    let again_said = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && again_said.contains("not empty"),
        "{again_said}"
    );

    // The daemon on PostgreSQL sees everything the SQLite one recorded, and goes on from there.
    let daemon = Daemon::start_on_with_env(&data_dir, &[("CANOPY_DATABASE_URL", &url)]);
    let after_runs = daemon.json(&["hooks", "runs", "--graph", &graph]);
    assert_eq!(after_runs["runs"], before_runs["runs"]);
    let after_feed = daemon.json(&["feed", "--last", "1000"]);
    let events = |feed: &serde_json::Value| -> Vec<(i64, String)> {
        feed["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["id"].as_i64().unwrap(),
                    e["event"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let moved_events = events(&before_feed);
    assert!(!moved_events.is_empty());
    assert_eq!(events(&after_feed)[..moved_events.len()], moved_events[..]);
    // A new event's cursor comes after the moved ones.
    daemon.control_ok(&graph, json!({ "action": "reset" }));
    let newest = daemon.json(&["feed", "--last", "1"]);
    let next = events(&newest)[0].0;
    assert!(
        next > moved_events.last().unwrap().0,
        "{next} after {moved_events:?}"
    );
    let status = daemon.ok(&["status"]);
    assert!(
        status.contains("database:     PostgreSQL canopy@"),
        "status names the database: {status}"
    );
}

#[test]
fn a_second_daemon_of_one_node_name_on_a_postgres_database_is_refused_naming_it_and_never_the_password()
 {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let first = Daemon::start_with_env("", &[("CANOPY_DATABASE_URL", &url)]);
    let spec = first.add_spec("kept");
    let other = tempfile::tempdir().unwrap();
    // The same server and database, spelt with a password (trust auth ignores it).
    let with_password = format!("{url} password=hunter2");
    let refused = Command::new(CANOPY)
        .args(["daemon", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(other.path())
        .args(["--database", &with_password])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("another canopy daemon named `") && said.contains("` uses the database"),
        "{said}"
    );
    assert!(said.contains("canopy@"), "names the database: {said}");
    assert!(!said.contains("hunter2"), "shows the password: {said}");
    // The first daemon goes on.
    let (status, _) = first.get(&format!("/api/specs/{spec}"));
    assert_eq!(status, 200);
}

#[test]
fn a_tampered_row_stops_the_copy_naming_its_table_and_leaves_the_target_empty() {
    if support::on_postgres() {
        return;
    }
    let mut daemon = Daemon::start();
    run_a_graph(&daemon);
    daemon.stop();
    // A row SQLite keeps but PostgreSQL cannot: text where a count belongs.
    let db = rusqlite::Connection::open(daemon.data_dir.join("canopy.db")).unwrap();
    db.execute("UPDATE hook_runs SET hook_index = 'not a number'", [])
        .unwrap();
    drop(db);
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let copy = Command::new(CANOPY)
        .args(["--data-dir"])
        .arg(&daemon.data_dir)
        .args(["store", "migrate", "--to", &url])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&copy.stderr);
    assert!(!copy.status.success(), "{said}");
    assert!(
        said.contains("cannot copy row 1 of table hook_runs"),
        "{said}"
    );
    // Nothing of the copy stayed: every table the copy writes is empty.
    let mut target = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for table in ["specs", "graphs", "runs", "node_runs", "hook_runs", "feed"] {
        let rows: i64 = target
            .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(rows, 0, "table {table} kept rows of a failed copy");
    }
}

/// A process that prints a NUL byte (PostgreSQL's text cannot hold one): its run completes on
/// PostgreSQL as on SQLite, its output kept with the NUL shown as U+FFFD. Before, the write of
/// its node run failed and the engine stopped the run halfway.
#[test]
fn a_node_that_prints_a_nul_byte_completes_on_postgres() {
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let daemon = Daemon::start_with_env("", &[("CANOPY_DATABASE_URL", &url)]);
    let repo = git_repo();
    let spec = daemon.add_spec("nul");
    daemon.create_graph(json!({
        "name": "nul",
        "workdir": repo.path(),
        "specs": [spec],
        "allow_dirty_start": true,
        "nodes": [{ "name": "print", "command": "printf 'a\\000b'" }]
    }));
    daemon.control_ok("nul", json!({ "action": "run" }));
    let view = daemon.settled("nul");
    assert_eq!(view["status"], "completed", "{view}");
    let run_id = view["current_run"]["id"].as_str().unwrap();
    let (_, run) = daemon.get(&format!("/api/runs/{run_id}"));
    let node_run = &run["node_runs"][0];
    assert_eq!(node_run["status"], "completed", "{run}");
    assert_eq!(node_run["detail"], "a\u{FFFD}b", "{run}");
}

/// `--from` names the SQLite database to copy (a backup, another install's): copied whole; a
/// path that is not a file, or a URL, is refused naming it, with nothing written.
#[test]
fn store_migrate_from_a_named_sqlite_file() {
    if support::on_postgres() {
        return;
    }
    let mut daemon = Daemon::start();
    run_a_graph(&daemon);
    daemon.stop();
    let elsewhere = tempfile::tempdir().unwrap();
    let backup = elsewhere.path().join("backup.db");
    std::fs::copy(daemon.data_dir.join("canopy.db"), &backup).unwrap();
    let url = canopy_store::pg::cluster::scratch_database().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let migrate = |from: &str| {
        Command::new(CANOPY)
            .arg("--data-dir")
            .arg(fresh.path())
            .args(["store", "migrate", "--from", from, "--to", &url])
            .output()
            .unwrap()
    };
    for bad in ["sqlite:/no/such/canopy.db", "postgres://elsewhere/db"] {
        let refused = migrate(bad);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{said}");
        assert!(
            said.contains(&format!("--from: `{bad}` is not a SQLite database file")),
            "{said}"
        );
    }
    let moved = migrate(&format!("sqlite:{}", backup.display()));
    let said = String::from_utf8_lossy(&moved.stdout);
    assert!(moved.status.success(), "{said}");
    assert!(said.contains("every table's count matches"), "{said}");
    assert!(
        said.contains(&format!("{} is left as it was", backup.display())),
        "{said}"
    );
    let mut target = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let graphs: i64 = target
        .query_one("SELECT COUNT(*) FROM graphs WHERE name = 'moved'", &[])
        .unwrap()
        .get(0);
    assert_eq!(graphs, 1);
}
