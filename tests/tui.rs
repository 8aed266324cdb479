//! The terminal UI end to end, in a real terminal: tmux runs `canopy tui` against a test daemon
//! in an 80×24 pane, `send-keys` types what a person would, and `capture-pane` reads what they
//! would see.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use support::{CANOPY, Daemon, git_repo, real, spec_body, wait_for};

/// How long the TUI may take to show something.
const SHOWS: Duration = Duration::from_secs(20);

/// A tmux server of its own (its own socket in a temp dir, so tests never share one) running one command in
/// a detached 80×24 session; the server is killed on drop.
struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(command: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = tempfile::tempdir().unwrap();
        let socket = dir
            .path()
            .join(format!("tmux-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
            .display()
            .to_string();
        let tmux = Self { socket, _dir: dir };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            "tui",
            command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-S", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types keys (tmux key names: `Enter`, `Escape`, `Down`, or text).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "tui"])
    }

    /// Waits until the pane shows every one of `texts` and has settled (two looks in a row
    /// see the same screen); returns the screen.
    fn shows(&self, texts: &[&str]) -> String {
        let mut last = String::new();
        let found = wait_for_screen(SHOWS, || {
            let previous = std::mem::replace(&mut last, self.screen());
            previous == last && texts.iter().all(|t| last.contains(t))
        });
        assert!(
            found,
            "the screen never showed {texts:?}; it shows:\n{last}"
        );
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-S", &self.socket, "kill-server"])
            .output();
    }
}

fn wait_for_screen(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The TUI inside a shell that reports how it ended: its exit code, and whether the terminal's
/// settings are the ones it started with (raw mode off).
fn tui_command(daemon: &Daemon, scratch: &Path) -> String {
    let settings = scratch.join("stty-before");
    format!(
        "stty -g > {settings}; {CANOPY} --data-dir {data} tui; echo \"tui exited $?\"; stty -g | cmp -s - {settings} && echo terminal restored; sleep 600",
        settings = settings.display(),
        data = daemon.data_dir.display(),
    )
}

fn add_spec_in(daemon: &Daemon, name: &str, workdir: &Path) -> String {
    let (status, spec) = daemon.send(
        "POST",
        "/api/specs",
        &json!({ "name": name, "body": spec_body(name), "workdir": real(workdir) }),
    );
    assert_eq!(status, 201, "{spec}");
    spec["id"].as_str().unwrap().to_string()
}

/// A node that reports `blocked` until `flag` exists, then completes.
fn gate(flag: &Path) -> String {
    format!(
        r#"if [ -e {flag} ]; then echo passed; else printf '{{"status":"blocked","blocker":"needs a human"}}' > "$CANOPY_RESULT_FILE"; fi"#,
        flag = flag.display()
    )
}

/// The line of the sidebar (the left 30-odd columns) holding `text`, if any.
fn sidebar_has(screen: &str, text: &str) -> bool {
    screen
        .lines()
        .any(|line| line.chars().take(32).collect::<String>().contains(text))
}

#[test]
fn a_blocked_graph_is_flagged_with_its_blocker_and_the_backlog_is_the_selected_projects() {
    let web = git_repo();
    let cli = git_repo();
    let scratch = tempfile::tempdir().unwrap();
    // A spec in the older heading format goes in through the store (the API refuses that body).
    let mut daemon = Daemon::start();
    daemon.stop();
    let store = support::store_of(&daemon.data_dir);
    let web_dir = real(web.path());
    let dir = web_dir.clone();
    store
        .write_blocking(move |tx| {
            tx.insert_spec("Old notes", "## Objective\nShip it\n", Some(&dir))
        })
        .unwrap();
    drop(store);
    let daemon = Daemon::start_on(&daemon.data_dir);
    let login = add_spec_in(&daemon, "Login form", web.path());
    add_spec_in(&daemon, "Parser rewrite", cli.path());
    let flag = scratch.path().join("unblocked");
    daemon.create_graph(json!({
        "name": "gated", "workdir": web.path(),
        "nodes": [{ "name": "gate", "command": gate(&flag) }], "specs": [login]
    }));
    daemon.control_ok("gated", json!({ "action": "run" }));
    assert_eq!(daemon.settled("gated")["status"], "paused");

    let tmux = Tmux::start(&tui_command(&daemon, scratch.path()));
    tmux.shows(&["feed: live", "1 blocked"]);
    // `b` goes to the blocked graph (in its project) and shows its blocker.
    tmux.keys(&["b"]);
    let screen = tmux.shows(&["Blocker of gated", "needs a human"]);
    assert!(
        screen.contains("node `gate` is blocked on spec Login form"),
        "{screen}"
    );
    tmux.keys(&["Escape"]);
    let screen = tmux.shows(&["gated paused BLOCKED", "status: paused"]);
    // The backlog is the web project's: its specs, the old one flagged, not the cli project's.
    assert!(sidebar_has(&screen, "Login form"), "{screen}");
    assert!(
        sidebar_has(&screen, "Old notes needs conversion"),
        "{screen}"
    );
    assert!(!screen.contains("Parser rewrite"), "{screen}");

    // The other project: its row is the first or the last one, and Enter selects it.
    let cli_first = real(cli.path()) < web_dir;
    for _ in 0..30 {
        tmux.keys(&[if cli_first { "Up" } else { "Down" }]);
    }
    tmux.keys(&["Enter"]);
    let screen = tmux.shows(&["Parser rewrite", "Backlog (1)"]);
    assert!(!screen.contains("Login form"), "{screen}");
    assert!(!screen.contains("Old notes"), "{screen}");
    assert!(!sidebar_has(&screen, "gated"), "{screen}");
}

#[test]
fn a_runs_progress_shows_without_a_keypress() {
    let repo = git_repo();
    let scratch = tempfile::tempdir().unwrap();
    let daemon = Daemon::start();
    let flag = scratch.path().join("go");
    let first = add_spec_in(&daemon, "First item", repo.path());
    let second = add_spec_in(&daemon, "Second item", repo.path());
    daemon.create_graph(json!({
        "name": "slow", "workdir": repo.path(),
        "nodes": [
            { "name": "wait", "command": format!("while [ ! -e {} ]; do sleep 0.05; done; echo waited", flag.display()) },
            { "name": "finish", "command": "echo done {{spec_name}}" }
        ],
        "specs": [first, second]
    }));
    let tmux = Tmux::start(&tui_command(&daemon, scratch.path()));
    tmux.shows(&["feed: live", "slow idle"]);
    // Focus the graph: filter the sidebar to it and step onto it.
    tmux.keys(&["/", "slow", "Enter", "Down"]);
    tmux.shows(&["Graph slow", "status: idle", "no current run: r runs it"]);

    // From here on, no key: the run's progress arrives through the live feed.
    daemon.control_ok("slow", json!({ "action": "run" }));
    let screen = tmux.shows(&["status: running", "now: wait on First item"]);
    assert!(screen.contains("slow running"), "{screen}");
    // The node's elapsed time counts on by itself.
    let mut seen = String::new();
    let counted = wait_for_screen(SHOWS, || {
        seen = tmux.screen();
        seen.split("now: wait on First item · ")
            .nth(1)
            .and_then(|rest| rest.split('s').next())
            .and_then(|secs| secs.parse::<u32>().ok())
            .is_some_and(|secs| secs >= 1)
    });
    assert!(counted, "the elapsed time never moved:\n{seen}");
    std::fs::write(&flag, "").unwrap();
    let screen = tmux.shows(&["status: completed", "Specs: 2 completed"]);
    assert!(
        screen.contains("First item") && screen.contains("done First item"),
        "each spec's result and summary show: {screen}"
    );
    assert!(!screen.contains("now: "), "{screen}");
}

#[test]
fn continue_and_reset_by_keys_help_resizing_and_quitting_restore_the_terminal() {
    let repo = git_repo();
    let scratch = tempfile::tempdir().unwrap();
    let daemon = Daemon::start();
    let flag = scratch.path().join("unblocked");
    let spec = add_spec_in(&daemon, "Login form", repo.path());
    daemon.create_graph(json!({
        "name": "gated", "workdir": repo.path(),
        "nodes": [{ "name": "gate", "command": gate(&flag) }, { "name": "after", "command": "echo after" }],
        "specs": [spec],
        "hooks": { "on_completed": [{ "command": "echo announced" }] }
    }));
    let (status, queue) = daemon.send(
        "POST",
        "/api/queues",
        &json!({ "name": "sprint", "specs": [spec] }),
    );
    assert_eq!(status, 201, "{queue}");
    daemon.control_ok("gated", json!({ "action": "run" }));
    daemon.settled("gated");

    let tmux = Tmux::start(&tui_command(&daemon, scratch.path()));
    tmux.shows(&["feed: live", "1 blocked", "sprint 1/1 pending"]);
    tmux.keys(&["b", "Escape"]);
    tmux.shows(&["Graph gated", "status: paused"]);

    // `?` lists the keys.
    tmux.keys(&["?"]);
    tmux.shows(&["Help: keys", "run the graph", "filter the sidebar"]);
    tmux.keys(&["Escape"]);

    // Continue, plain: the gate passes now, the run completes and its hook run shows.
    std::fs::write(&flag, "").unwrap();
    tmux.keys(&["c"]);
    tmux.shows(&["Continue gated", "skip_next_spec", "run_from_node"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.shows(&["status: completed", "Hook runs", "announced"]);
    assert!(!screen.contains("BLOCKED"), "{screen}");

    // A refusal is said in words, and the TUI goes on.
    tmux.keys(&["c", "Down", "Enter"]);
    tmux.shows(&["continue gated refused:"]);

    // Reset asks first.
    tmux.keys(&["x"]);
    tmux.shows(&["Reset graph gated to idle?"]);
    tmux.keys(&["y"]);
    tmux.shows(&["status: idle", "gated idle"]);

    // Run from the picker, over the queue: the gate passes, so it completes and drains it.
    tmux.keys(&["r"]);
    tmux.shows(&[
        "Run gated over",
        "its bound specs",
        "queue sprint (1 pending)",
    ]);
    tmux.keys(&["Down", "Enter"]);
    tmux.shows(&["status: completed", "· queue sprint", "sprint 0/1 pending"]);

    // The node run's output, in full.
    tmux.keys(&["o"]);
    tmux.shows(&["after on Login form: completed"]);
    tmux.keys(&["Enter"]);
    tmux.shows(&["gated: after on Login form", "after"]);
    tmux.keys(&["Escape"]);

    // Bigger, then back to 80×24: the layout follows, the keys stay on the last line.
    tmux.run(&["resize-window", "-t", "tui", "-x", "120", "-y", "40"]);
    wait_for("the pane to be 40 rows", SHOWS, || {
        let screen = tmux.screen();
        (screen.lines().count() == 40 && screen.lines().last()?.contains("? help q quit"))
            .then_some(())
    });
    tmux.run(&["resize-window", "-t", "tui", "-x", "80", "-y", "24"]);
    wait_for("the pane to be 24 rows again", SHOWS, || {
        let screen = tmux.screen();
        let lines: Vec<&str> = screen.lines().collect();
        (lines.len() == 24
            && lines[23].contains("? help q quit")
            && screen.contains("status: completed"))
        .then_some(())
    });

    tmux.keys(&["q"]);
    let screen = tmux.shows(&["tui exited 0", "terminal restored"]);
    assert!(
        !screen.contains("Graph gated"),
        "the alternate screen is gone: {screen}"
    );
}

#[test]
fn the_daemon_going_away_is_said_and_the_tui_reconnects_when_it_comes_back() {
    let repo = git_repo();
    let scratch = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start();
    add_spec_in(&daemon, "Login form", repo.path());
    let tmux = Tmux::start(&tui_command(&daemon, scratch.path()));
    tmux.shows(&["feed: live", "Login form"]);
    daemon.stop();
    tmux.shows(&["feed: down", "reconnecting"]);
    let daemon = Daemon::start_on(&daemon.data_dir);
    tmux.shows(&["feed: live", "reconnected to the daemon"]);
    // Live again: a spec and a session added now show without a key.
    add_spec_in(&daemon, "Password reset", repo.path());
    let (status, session) = daemon.send("POST", "/api/sessions", &json!({ "name": "lead" }));
    assert_eq!(status, 201, "{session}");
    tmux.shows(&["Password reset", "lead live"]);
}
