//! Event benchmark: run it with `cargo bench --bench events`; `-- feed-8 command-hook` runs
//! only the lines of those names (`feed-1`, `feed-8`, `feed-64`, `command-hook`,
//! `command-hook-sh`).
//!
//! In-process, on a real SQLite file in a temp data dir:
//! 1. **feed**: 100,000 events appended to the feed with no hook listening, by 1, 8 and 64
//!    concurrent emitters, each awaiting its `emit` (the event is committed when it returns)
//!    before the next. Several emitters share commits (the store's group commit).
//! 2. **daemon command hook**: a daemon hook on `spec.created` whose action is the `command`
//!    `date +%s%N` (`command-hook`: plain words, which the command executor runs itself) or
//!    `exec date +%s%N > <dir>/{{spec_id}}` (`command-hook-sh`: through `sh`); the hook's
//!    process is `date`, which prints (writes) the time it runs; events emitted at a steady
//!    500/s; latency is event emitted → the hook's process running (the time it printed, less
//!    the time the event was emitted).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_process;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use canopy_core::bus::Bus;
use canopy_core::config::Config;
use canopy_model::events::spec::SpecCreated;
use canopy_model::events::{Cause, Event};

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
    println!("canopy event benchmark, {}\n", in_process::backend());
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
    if runs("command-hook") {
        command_hook_line(&store, &plugins, tmp.path(), false).await;
    }
    if runs("command-hook-sh") {
        command_hook_line(&store, &plugins, tmp.path(), true).await;
    }
}

/// A daemon hook on `spec.created` whose process prints (or, through `sh`, writes into a file
/// named by the event's spec id) the time it runs, in ns since 1970; `HOOK_EVENTS` events at
/// `HOOK_RATE`/s; latency = that time less the time the event was emitted.
async fn command_hook_line(
    store: &canopy_store::Store,
    plugins: &canopy_executors::plugins::PluginHost,
    dir: &std::path::Path,
    shell: bool,
) {
    let marks = dir.join(if shell { "marks-sh" } else { "marks" });
    std::fs::create_dir_all(&marks).unwrap();
    let (name, command) = if shell {
        (
            "stamp-sh",
            format!("exec date +%s%N > {}/{{{{spec_id}}}}", marks.display()),
        )
    } else {
        // Plain words: the command executor runs `date` itself, no shell; the hook run
        // records what it printed.
        ("stamp", "date +%s%N".to_string())
    };
    // A hook firing 500 times a second is what this measures: the firing breaker is off.
    let config = Config::parse(&format!(
        r#"
[limits]
breaker_firings = 0

[[hooks]]
name = "{name}"
event = "spec.created"
match = {{ spec_name = "{name} *" }}
action = {{ command = "{command}" }}
"#
    ))
    .unwrap();
    let hooked = Bus::new(
        store.clone(),
        plugins.clone(),
        config.daemon_hooks().unwrap(),
        dir.to_path_buf(),
    );
    // One event first, waited for: the executor is compiled and loaded, as in a daemon that
    // has run a hook before, so the line measures the steady state and not the first compile.
    let warm_up = Event::new(&SpecCreated {
        spec_id: "warm-up".to_string(),
        spec_name: format!("{name} warm-up"),
        workdir: None,
    });
    hooked.emit(vec![warm_up], Cause::user()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while finished_runs(store, name).await == 0 {
        assert!(Instant::now() < deadline, "the warm-up event runs its hook");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut emitted = Vec::with_capacity(HOOK_EVENTS);
    let started = Instant::now();
    for i in 0..HOOK_EVENTS {
        let due = started + Duration::from_secs_f64(i as f64 / f64::from(HOOK_RATE));
        tokio::time::sleep_until(due.into()).await;
        emitted.push(now_ns());
        let event = Event::new(&SpecCreated {
            spec_id: format!("{i:032x}"),
            spec_name: format!("{name} {i}"),
            workdir: None,
        });
        hooked.emit(vec![event], Cause::user()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let marks_read = loop {
        let read = if shell {
            read_marks(&marks)
        } else {
            recorded_marks(store, name).await
        };
        if read.len() == HOOK_EVENTS {
            break read;
        }
        assert!(Instant::now() < deadline, "every event runs its hook");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut latencies: Vec<f64> = marks_read
        .iter()
        .map(|(index, at)| (at.saturating_sub(emitted[*index])) as f64 / 1e6)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let how = if shell {
        "`exec date > file` through sh"
    } else {
        "`date` run directly"
    };
    println!(
        "\ndaemon command hook ({how}), paced at {HOOK_RATE} events/s: {HOOK_EVENTS} events; event → hook process running: median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
}

/// (event index, time written) from the files the shell hook wrote.
fn read_marks(marks: &std::path::Path) -> Vec<(usize, u128)> {
    let mut read = Vec::new();
    for entry in std::fs::read_dir(marks).into_iter().flatten().flatten() {
        let Some(index) = entry
            .file_name()
            .to_str()
            .and_then(|name| usize::from_str_radix(name, 16).ok())
        else {
            continue;
        };
        if let Some(at) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            read.push((index, at));
        }
    }
    read
}

/// How many runs of hook `name` have finished.
async fn finished_runs(store: &canopy_store::Store, name: &str) -> usize {
    let filter = canopy_core::hooks::runs::HookRunFilter {
        hook: Some(name.to_string()),
        status: Some(canopy_core::hooks::runs::HookRunStatus::Completed),
        ..Default::default()
    };
    store
        .read(move |rd| rd.count_hook_runs(&filter))
        .await
        .unwrap()
}

/// (event index, time printed) from the finished hook runs of hook `name`.
async fn recorded_marks(store: &canopy_store::Store, name: &str) -> Vec<(usize, u128)> {
    let filter = canopy_core::hooks::runs::HookRunFilter {
        hook: Some(name.to_string()),
        status: Some(canopy_core::hooks::runs::HookRunStatus::Completed),
        last: HOOK_EVENTS + 1,
        ..Default::default()
    };
    let runs = store.read(move |rd| rd.hook_runs(&filter)).await.unwrap();
    runs.iter()
        .filter_map(|run| {
            let index = usize::from_str_radix(run.spec_id.as_deref()?, 16).ok()?;
            let at = run.output.as_deref()?.trim().parse().ok()?;
            Some((index, at))
        })
        .collect()
}
