//! Hook benchmark: run it with `cargo bench --bench hooks`; `-- wasm-noop wasm-noop-8` runs only
//! the lines of those names.
//!
//! In-process, on a real SQLite file: 10,000 `on_spec_completed` events fired into the hook
//! dispatcher for a graph whose hook is (a) a no-op wasm executor, (b) a `command` hook running
//! `true`. Each firing is recorded (queued) when the event fires, committed before its `emit`
//! returns, and finished when the executor returns. Latency is event → finished record
//! committed, read back from the records themselves (`fired_at` is taken when the event reaches
//! the dispatcher, `finished_at` in the write that records the end).
//!
//! An emitter awaits each `emit` before the next, as a graph's driver does, so one emitter
//! measures the round trip of one commit per event; several emitters (several graphs' drivers)
//! measure what the dispatcher sustains when events arrive together and share commits. Lines run
//! back to back, or paced at a steady total rate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_process;

use std::time::{Duration, Instant, SystemTime};

use canopy_core::bus::Bus;
use canopy_core::engine::events::RunContext;
use canopy_core::engine::{Engine, GraphInput, NewSpec};
use canopy_core::hooks::daemon::DaemonHooks;
use canopy_core::hooks::runs::{HookRunFilter, HookRunStatus};
use canopy_model::events::graph::CompletedSpec;
use canopy_store::{Store, StoreError};
use serde_json::json;

const FIRINGS: usize = 10_000;

fn body() -> String {
    let mut body = "<spec>\n<objective>\nbench\n</objective>\n".to_string();
    for tag in &canopy_model::spec_format::SECTIONS[1..] {
        body.push_str(&format!("<{tag}>\n-\n</{tag}>\n"));
    }
    body + "</spec>\n"
}

/// Waits until every hook run of the graph has finished; returns (fired, finished) instants.
async fn wait_all(store: &Store, graph_id: &str, expected: usize) -> Vec<(SystemTime, SystemTime)> {
    let of_graph = HookRunFilter {
        graph_id: Some(graph_id.to_string()),
        last: expected + 1,
        ..HookRunFilter::default()
    };
    loop {
        let filter = of_graph.clone();
        // Counting is cheap next to reading every record, so polling does not slow the runs.
        let (all, unfinished) = store
            .read(move |rd| {
                let mut unfinished = 0;
                for status in [HookRunStatus::Queued, HookRunStatus::Running] {
                    unfinished += rd.count_hook_runs(&HookRunFilter {
                        status: Some(status),
                        ..filter.clone()
                    })?;
                }
                Ok::<_, StoreError>((rd.count_hook_runs(&filter)?, unfinished))
            })
            .await
            .unwrap();
        if all == expected && unfinished == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let filter = of_graph.clone();
    let runs = store.read(move |rd| rd.hook_runs(&filter)).await.unwrap();
    assert_eq!(runs.len(), expected);
    assert!(
        runs.iter().all(|r| r.status == HookRunStatus::Completed),
        "every hook run completes"
    );
    runs.iter()
        .map(|r| (r.fired_at.as_system(), r.finished_at.unwrap().as_system()))
        .collect()
}

fn report(label: &str, rows: &[(SystemTime, SystemTime)]) {
    let first = rows.iter().map(|r| r.0).min().unwrap();
    let last = rows.iter().map(|r| r.1).max().unwrap();
    let span = last.duration_since(first).unwrap().as_secs_f64();
    let mut latencies: Vec<f64> = rows
        .iter()
        .map(|(f, d)| d.duration_since(*f).unwrap_or_default().as_secs_f64() * 1e3)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label}: {} hook runs in {span:.3} s = {:.0} runs/s; event → record committed: median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        rows.len(),
        rows.len() as f64 / span,
        at(0.5),
        at(0.99),
        latencies[latencies.len() - 1]
    );
}

/// What every benchmark line shares.
struct Bench {
    engine: Engine,
    hooks: Bus,
    store: Store,
    workdir: String,
    spec: String,
    /// Runs only the lines of these names (all lines when empty).
    only: Vec<String>,
}

/// One benchmark line: `FIRINGS` events for a graph whose `on_spec_completed` hook is `hook`,
/// emitted by `emitters` concurrent emitters (as that many graphs' drivers would), each awaiting
/// its `emit` before the next; back to back, or `paced` at that many events per second in all.
async fn bench(
    b: &Bench,
    name: &str,
    hook: serde_json::Value,
    paced: Option<u32>,
    emitters: usize,
) {
    let Bench {
        engine,
        hooks,
        store,
        workdir,
        spec,
        only,
    } = b;
    if !only.is_empty() && !only.iter().any(|o| o == name) {
        return;
    }
    let view = engine
        .create_graph(GraphInput {
            name: Some(name.to_string()),
            workdir: Some(workdir.to_string()),
            nodes: Some(vec![json!({ "name": "n", "command": "true" })]),
            specs: Some(vec![spec.to_string()]),
            hooks: Some(json!({ "on_spec_completed": [hook] })),
            ..GraphInput::default()
        })
        .await
        .unwrap();
    let run = RunContext {
        graph_id: view.graph.id.clone(),
        graph_name: name.to_string(),
        run_id: "bench".into(),
        workdir: workdir.to_string(),
        queue_id: None,
        cause: Default::default(),
    };
    let before = store.writer_stats();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(emitters);
    for emitter in 0..emitters {
        let (hooks, run, spec) = (hooks.clone(), run.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            // How far behind its schedule the emitter fell at worst.
            let mut behind = Duration::ZERO;
            for i in (emitter..FIRINGS).step_by(emitters) {
                if let Some(rate) = paced {
                    let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate));
                    tokio::time::sleep_until(due.into()).await;
                    behind = behind.max(Instant::now().saturating_duration_since(due));
                }
                let event = run.spec_completed(CompletedSpec {
                    id: spec.clone(),
                    name: format!("spec {i}"),
                    summary: None,
                });
                hooks.emit(vec![event], run.cause.clone()).await.unwrap();
            }
            behind
        }));
    }
    let mut behind = Duration::ZERO;
    for task in tasks {
        behind = behind.max(task.await.unwrap());
    }
    let rows = wait_all(store, &view.graph.id, FIRINGS).await;
    let stats = store.writer_stats();
    let who = match emitters {
        1 => "1 emitter".to_string(),
        n => format!("{n} emitters"),
    };
    let label = match paced {
        Some(rate) => format!(
            "{name} (paced at {rate}/s, {who}, at most {:.2} ms behind schedule)",
            behind.as_secs_f64() * 1e3
        ),
        None => format!("{name} (back to back, {who})"),
    };
    report(&label, &rows);
    let (writes, commits) = (stats.writes - before.writes, stats.commits - before.commits);
    println!(
        "  the store's writer: {writes} writes in {commits} commits ({:.1} writes per commit)",
        writes as f64 / commits.max(1) as f64
    );
}

#[tokio::main]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, plugins) = in_process::start(tmp.path()).await;
    plugins
        .install(
            std::fs::read(env!("CANOPY_TEST_NOOP_WASM")).unwrap(),
            &[],
            false,
        )
        .await
        .unwrap();
    // 10,000 firings of one hook are what this measures: its firing breaker is off.
    let hooks = Bus::new(
        store.clone(),
        plugins.clone(),
        DaemonHooks {
            breaker_firings: 0,
            ..DaemonHooks::default()
        },
        tmp.path().to_path_buf(),
    );
    let engine = Engine::new(store.clone(), plugins.clone(), hooks.clone());
    let workdir = tmp.path().join("work");
    std::fs::create_dir_all(&workdir).unwrap();
    let workdir = workdir.to_string_lossy().into_owned();
    let spec = engine
        .create_spec(NewSpec {
            name: "bench".into(),
            body: body(),
            workdir: None,
        })
        .await
        .unwrap()
        .id;

    println!(
        "canopy hook benchmark: {FIRINGS} on_spec_completed firings per line, {}\n",
        in_process::backend()
    );
    let b = Bench {
        engine,
        hooks,
        store,
        workdir,
        spec,
        // Line names after `--` (cargo passes `--bench` too).
        only: std::env::args()
            .skip(1)
            .filter(|arg| !arg.starts_with('-'))
            .collect(),
    };
    let noop = || json!({ "mode": "noop" });
    let command = || json!({ "command": "true" });
    bench(&b, "wasm-noop", noop(), None, 1).await;
    bench(&b, "wasm-noop-8", noop(), None, 8).await;
    bench(&b, "wasm-noop-64", noop(), None, 64).await;
    bench(&b, "wasm-noop-paced", noop(), Some(10_000), 8).await;
    bench(&b, "command-true", command(), None, 1).await;
    bench(&b, "command-true-paced", command(), Some(500), 1).await;
}
