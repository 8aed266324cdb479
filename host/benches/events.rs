//! Event benchmark: run it with `cargo bench --bench events`; `-- feed-8 command-hook` runs
//! only the lines of those names (`feed-1`, `feed-8`, `feed-64`, `command-hook`).
//!
//! In-process, on a real SQLite file in a temp data dir:
//! 1. **feed**: 100,000 events appended to the feed with no hook listening, by 1, 8 and 64
//!    concurrent emitters, each awaiting its `emit` (the event is committed when it returns)
//!    before the next. Several emitters share commits (the store's group commit).
//! 2. **daemon command hook**: a daemon hook on `spec.created` whose action is the `command`
//!    `exec date +%s%N > <dir>/{{spec_id}}`: the hook's process is `date`, which writes the time
//!    it runs; events emitted at a steady 500/s; latency is event emitted → the hook's process
//!    running (the time it wrote, less the time the event was emitted).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_process;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use canopy::bus::Bus;
use canopy::config::Config;
use canopy::events::spec::SpecCreated;
use canopy::events::{Cause, Event};

const FEED_EVENTS: usize = 100_000;
const HOOK_EVENTS: usize = 2_000;
const HOOK_RATE: u32 = 500;

fn event(i: usize) -> Event {
    Event::new(&SpecCreated {
        spec_id: format!("{i:032x}"),
        spec_name: format!("spec {i}"),
        workdir: Some("/tmp/bench".into()),
    })
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn feed_line(bus: &Bus, emitters: usize) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for emitter in 0..emitters {
        let bus = bus.clone();
        tasks.push(tokio::spawn(async move {
            for i in (emitter..FEED_EVENTS).step_by(emitters) {
                bus.emit(vec![event(i)], Cause::user()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "feed, no hooks, {emitters} emitter(s): {FEED_EVENTS} events in {elapsed:.3} s = {:.0} events/s",
        FEED_EVENTS as f64 / elapsed
    );
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::main]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, plugins) = in_process::start(tmp.path()).await;
    println!("canopy event benchmark, SQLite in a temp data dir\n");
    // Line names after `--` (cargo passes `--bench` too); none: every line.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let runs = |name: &str| only.is_empty() || only.iter().any(|o| o == name);

    let quiet = Bus::new(
        store.clone(),
        plugins.clone(),
        Config::default().daemon_hooks().unwrap(),
        tmp.path().to_path_buf(),
    );
    for emitters in [1, 8, 64] {
        if runs(&format!("feed-{emitters}")) {
            feed_line(&quiet, emitters).await;
        }
    }
    if !runs("command-hook") {
        return;
    }

    // A daemon hook whose process writes the time it runs (ns since 1970) into a file named
    // by the event's spec id.
    let marks = tmp.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let config = Config::parse(&format!(
        r#"
[[hooks]]
name = "stamp"
event = "spec.created"
match = {{ spec_name = "hooked *" }}
action = {{ command = "exec date +%s%N > {}/{{{{spec_id}}}}" }}
"#,
        marks.display()
    ))
    .unwrap();
    let hooked = Bus::new(
        store.clone(),
        plugins.clone(),
        config.daemon_hooks().unwrap(),
        tmp.path().to_path_buf(),
    );
    let mut emitted = Vec::with_capacity(HOOK_EVENTS);
    let started = Instant::now();
    for i in 0..HOOK_EVENTS {
        let due = started + Duration::from_secs_f64(i as f64 / f64::from(HOOK_RATE));
        tokio::time::sleep_until(due.into()).await;
        emitted.push(now_ns());
        let event = Event::new(&SpecCreated {
            spec_id: format!("{i:032x}"),
            spec_name: format!("hooked {i}"),
            workdir: None,
        });
        hooked.emit(vec![event], Cause::user()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let read_all = || -> Option<Vec<(usize, u128)>> {
        let mut marks_read = Vec::with_capacity(HOOK_EVENTS);
        for entry in std::fs::read_dir(&marks).ok()? {
            let entry = entry.ok()?;
            let index = usize::from_str_radix(entry.file_name().to_str()?, 16).ok()?;
            let at: u128 = std::fs::read_to_string(entry.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            marks_read.push((index, at));
        }
        (marks_read.len() == HOOK_EVENTS).then_some(marks_read)
    };
    let marks_read = loop {
        if let Some(all) = read_all() {
            break all;
        }
        assert!(Instant::now() < deadline, "every event runs its hook");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut latencies: Vec<f64> = marks_read
        .iter()
        .map(|(index, at)| (at.saturating_sub(emitted[*index])) as f64 / 1e6)
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "\ndaemon command hook, paced at {HOOK_RATE} events/s: {HOOK_EVENTS} events; event → hook process running: median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
}
