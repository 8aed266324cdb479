//! Hook benchmark: run it with `cargo bench --bench hooks`.
//!
//! In-process, on a real SQLite file: 10,000 `on_spec_completed` events fired into the hook
//! dispatcher for a graph whose hook is (a) a no-op wasm executor, (b) a `command` hook running
//! `true`. Each firing is recorded (queued, committed before the next event is emitted) when the
//! event fires and finished when the executor returns; latency is event → finished record
//! committed, read back from the records themselves (`fired_at` is taken when the event reaches
//! the dispatcher, `finished_at` in the write that records the end). Throughput fires all events
//! back to back, one emitter awaiting each `emit` as the engine does; latency also fires them
//! paced at a steady rate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use canopy::config::{Config, Platform};
use canopy::datadir::DataDir;
use canopy::engine::events::{CompletedSpec, EngineEvent, EventSink, RunContext};
use canopy::engine::{Engine, GraphInput, NewSpec};
use canopy::hooks::HookDispatcher;
use canopy::hooks::runs::{HookRunFilter, HookRunStatus};
use canopy::plugins::{HostServices, MessageTarget, PluginHost, Provenance};
use canopy::store::{Store, StoreError};
use serde_json::json;

const FIRINGS: usize = 10_000;

struct NoServices;

impl HostServices for NoServices {
    fn enqueue_message<'a>(
        &'a self,
        _: &'a str,
        _: MessageTarget,
        _: &'a str,
        _: &'a Provenance,
    ) -> canopy::plugins::ServiceFuture<'a, Result<String, String>> {
        Box::pin(std::future::ready(Err("not in this benchmark".into())))
    }
    fn agent_platform(&self, name: &str) -> Result<Platform, String> {
        Err(format!("no platform {name} in this benchmark"))
    }
}

fn body() -> String {
    let mut body = "<spec>\n<objective>\nbench\n</objective>\n".to_string();
    for tag in &canopy::engine::spec_format::SECTIONS[1..] {
        body.push_str(&format!("<{tag}>\n-\n</{tag}>\n"));
    }
    body + "</spec>\n"
}

fn time(text: &str) -> SystemTime {
    humantime::parse_rfc3339(text).unwrap()
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
        .map(|r| (time(&r.fired_at), time(r.finished_at.as_deref().unwrap())))
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
    hooks: HookDispatcher,
    store: Store,
    workdir: String,
    spec: String,
}

async fn bench(b: &Bench, name: &str, hook: serde_json::Value, paced: Option<u32>) {
    let Bench {
        engine,
        hooks,
        store,
        workdir,
        spec,
    } = b;
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
    };
    let started = Instant::now();
    for i in 0..FIRINGS {
        if let Some(rate) = paced {
            let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate));
            tokio::time::sleep_until(due.into()).await;
        }
        hooks
            .emit(EngineEvent::SpecCompleted {
                run: run.clone(),
                spec: CompletedSpec {
                    id: spec.to_string(),
                    name: format!("spec {i}"),
                    summary: None,
                },
            })
            .await;
    }
    let rows = wait_all(store, &view.graph.id, FIRINGS).await;
    let label = match paced {
        Some(rate) => format!("{name} (paced at {rate}/s)"),
        None => format!("{name} (back to back)"),
    };
    report(&label, &rows);
}

#[tokio::main]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::resolve(Some(tmp.path().join("data")))
        .unwrap()
        .create()
        .unwrap();
    let store = Store::open(&data.database()).unwrap();
    let plugins = PluginHost::start(
        &data,
        store.clone(),
        &Config::default(),
        Arc::new(NoServices),
    )
    .await
    .unwrap();
    plugins
        .install(
            std::fs::read(env!("CANOPY_TEST_NOOP_WASM")).unwrap(),
            &[],
            false,
        )
        .await
        .unwrap();
    let hooks = HookDispatcher::new(store.clone(), plugins.clone());
    let engine = Engine::new(store.clone(), plugins.clone(), Arc::new(hooks.clone()));
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
        "canopy hook benchmark: {FIRINGS} on_spec_completed firings per line, SQLite in a temp data dir\n"
    );
    let b = Bench {
        engine,
        hooks,
        store,
        workdir,
        spec,
    };
    bench(&b, "wasm-noop", json!({ "mode": "noop" }), None).await;
    bench(
        &b,
        "wasm-noop-paced",
        json!({ "mode": "noop" }),
        Some(10_000),
    )
    .await;
    bench(&b, "command-true", json!({ "command": "true" }), None).await;
    bench(
        &b,
        "command-true-paced",
        json!({ "command": "true" }),
        Some(500),
    )
    .await;
}
