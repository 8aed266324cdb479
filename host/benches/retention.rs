//! Retention benchmark: does a daemon left running stay under its configured size? Run it with
//! `cargo bench --bench retention` (`-- --minutes 60` for the whole simulated hour, the
//! default; `--minutes 10` for a quick look).
//!
//! In-process, on a real SQLite file in a temp dir, it writes what a busy daemon writes — the
//! load of the 20-minute soak that found the database growing 1.56 GB an hour: per second,
//! 210 hook runs (recorded, then finished with their rendered config and output), 100 webhook
//! deliveries (a 1 KiB body each) and 420 feed events — at simulated times, as fast as the
//! store takes them, and runs a retention pass with the default `[retention]` every simulated
//! 10 minutes, as the daemon does. Each pass prints the file's size, its free pages and every
//! table's rows; the last line says whether the file stayed under the bound the defaults imply.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use canopy_core::retention::{Policy, prune};
use canopy_model::events::spec::SpecCreated;
use canopy_model::events::{Cause, Event};
use canopy_model::records::hook_runs::{HookRunStatus, HookSourceKind};
use canopy_model::records::webhooks::DeliveryStatus;
use canopy_model::time::Timestamp;
use canopy_store::Store;
use canopy_store::hook_runs::{Finished, Fired};
use canopy_store::webhooks::NewDelivery;

const HOOK_RUNS_PER_SEC: usize = 210;
const DELIVERIES_PER_SEC: usize = 100;
const FEED_PER_SEC: usize = 420;
/// Simulated seconds written per store write.
const SECONDS_PER_WRITE: u64 = 5;

fn at(start: SystemTime, second: u64, micros: usize) -> Timestamp {
    Timestamp::from_system(
        start + Duration::from_secs(second) + Duration::from_micros(micros as u64),
    )
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let minutes: u64 = args
        .iter()
        .position(|a| a == "--minutes")
        .and_then(|i| args.get(i + 1))
        .and_then(|m| m.parse().ok())
        .unwrap_or(60);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canopy.db");
    let store = Store::open(&path).unwrap();
    let policy = Policy::of(&canopy_core::config::Config::default());
    // The bound the defaults imply: each capped table full, at the sizes measured below.
    println!(
        "retention: {minutes} simulated minutes at {HOOK_RUNS_PER_SEC} hook runs/s, {DELIVERIES_PER_SEC} deliveries/s, {FEED_PER_SEC} feed events/s; caps: hook runs {}, deliveries {}, feed {}, a pass every {} min",
        policy.hook_runs_rows,
        policy.deliveries_rows,
        policy.feed_rows,
        policy.every.as_secs() / 60
    );
    let start = SystemTime::now() - Duration::from_secs(minutes * 60);
    let config: Arc<str> =
        r#"{"command":"./notify.sh \"${CANOPY_MARKER_SPEC_NAME}\"","timeout_secs":30}"#.into();
    let output = "notified\n".repeat(40);
    let body = vec![b'{'; 1024];
    let began = Instant::now();
    let mut largest = 0u64;
    let pass_every = policy.every.as_secs();
    let mut second = 0;
    while second < minutes * 60 {
        let from = second;
        let (config, output, body) = (config.clone(), output.clone(), body.clone());
        store
            .write(move |tx| {
                for s in from..from + SECONDS_PER_WRITE {
                    for i in 0..FEED_PER_SEC {
                        let event = Event::new(&SpecCreated {
                            spec_id: format!("{s:016x}{i:016x}"),
                            spec_name: format!("spec {s}.{i}"),
                            workdir: Some("/srv/web".into()),
                        });
                        tx.append_feed("bench", event, &Cause::user())?;
                    }
                    let fired: Vec<Fired> = (0..HOOK_RUNS_PER_SEC)
                        .map(|i| Fired {
                            source: HookSourceKind::Config,
                            hook_name: "announce".into(),
                            graph_id: None,
                            graph_name: Some("web".into()),
                            run_id: None,
                            event: "spec.created".into(),
                            hook_index: 0,
                            hook_config: config.clone(),
                            spec_id: Some(format!("{s:016x}{i:016x}")),
                            mode: Some("command".into()),
                            test: false,
                            fired_at: at(start, s, i),
                            // Started as recorded, as a hook run with a free slot is.
                            running: true,
                            plugin: None,
                            dispatch_depth: 0,
                            feed_id: None,
                            project: Some("/srv/web".into()),
                            dropped: None,
                        })
                        .collect();
                    let refs: Vec<&Fired> = fired.iter().collect();
                    for id in tx.insert_hook_runs(&refs)? {
                        tx.finish_hook_run(
                            &id,
                            &Finished {
                                status: HookRunStatus::Completed,
                                summary: Some("notified".into()),
                                error: None,
                                output: Some(output.clone()),
                                rendered: Some(serde_json::json!({ "config": { "command": "./notify.sh \"${CANOPY_MARKER_SPEC_NAME}\"" }, "markers": { "spec_name": "spec" } })),
                                duration_ms: 12,
                            },
                        )?;
                    }
                    for i in 0..DELIVERIES_PER_SEC {
                        tx.insert_delivery(&NewDelivery {
                            id: canopy_store::new_ordered_id(),
                            scope: "global".into(),
                            hook: "push".into(),
                            handler: "command".into(),
                            node: "bench".into(),
                            status: DeliveryStatus::Completed,
                            reason: None,
                            method: "POST".into(),
                            path: "/hooks/global/push".into(),
                            query: None,
                            content_type: Some("application/json".into()),
                            headers: vec![("x-github-event".into(), "push".into())],
                            body: body.clone(),
                            redelivery_of: None,
                            test: false,
                            received_at: at(start, s, i),
                            started_at: None,
                            sender_delivery_id: None,
                        })?;
                    }
                }
                Ok::<_, canopy_store::StoreError>(())
            })
            .await
            .unwrap();
        second += SECONDS_PER_WRITE;
        if second % pass_every == 0 {
            let pass = Instant::now();
            let pruned = prune(&store, &policy, SystemTime::now()).await.unwrap();
            let pass_ms = pass.elapsed().as_millis();
            let sizes = store.read(|rd| rd.sizes()).await.unwrap();
            let file = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            largest = largest.max(file);
            println!(
                "  minute {:>3}: file {:>7.1} MiB ({:>6.1} MiB free before the pass returned it); rows: hook runs {:>7}, deliveries {:>7}, feed {:>8}; pass {pass_ms} ms, pruned {} hook runs, {} deliveries, {} feed rows",
                second / 60,
                mib(file),
                mib(pruned.free_pages * 4096),
                sizes.hook_runs,
                sizes.deliveries,
                sizes.feed_rows,
                pruned.hook_runs,
                pruned.deliveries,
                pruned.feed
            );
        }
    }
    println!(
        "largest file after a pass: {:.1} MiB; written in {:.0} s",
        mib(largest),
        began.elapsed().as_secs_f64()
    );
}
