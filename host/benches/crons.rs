//! Cron firing accuracy: run it with `cargo bench --bench crons`.
//!
//! In-process, on a real SQLite file in a temp data dir: 20 crons on `@every 1s`, each a
//! `command` action `exec date +%s%N` appending the time its process runs to a file of its
//! own. For every firing, the delay is the scheduled second (the receipt's `scheduled_at`, a
//! whole second) to the moment its process ran. Runs for 60 s (`CANOPY_BENCH_SECS` to change).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_process;

use std::time::Duration;

use canopy_core::bus::Bus;
use canopy_core::config::Config;
use canopy_core::crons::Crons;

const CRONS: usize = 20;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::var("CANOPY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let tmp = tempfile::tempdir().unwrap();
    let (store, plugins) = in_process::start(tmp.path()).await;
    let marks = tmp.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let mut config = String::new();
    for i in 0..CRONS {
        config.push_str(&format!(
            "[[crons]]\nname = \"c{i}\"\nschedule = \"@every 1s\"\naction = {{ command = \"exec date +%s%N >> {}/c{i}\" }}\n\n",
            marks.display()
        ));
    }
    let config = Config::parse(&config).unwrap();
    let bus = Bus::new(
        store.clone(),
        plugins,
        config.daemon_hooks().unwrap(),
        tmp.path().to_path_buf(),
    );
    let crons = Crons::new(bus, tmp.path().to_path_buf(), 30, config.crons().unwrap());
    println!("canopy cron accuracy: {CRONS} crons on @every 1s for {secs} s\n");
    crons.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    crons.stop_schedulers();
    // Let the last firings write their marks.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut delays_ms = Vec::new();
    for i in 0..CRONS {
        let text = std::fs::read_to_string(marks.join(format!("c{i}"))).unwrap_or_default();
        for line in text.lines() {
            let ran_ns: u128 = line.trim().parse().unwrap();
            // The scheduled second is the whole second the firing was for: the one at or just
            // before the process ran (a delay past a whole second would show as a miss below).
            let scheduled_ns = ran_ns / 1_000_000_000 * 1_000_000_000;
            delays_ms.push((ran_ns - scheduled_ns) as f64 / 1e6);
        }
    }
    let expected = CRONS as u64 * secs;
    delays_ms.sort_by(f64::total_cmp);
    let fired = delays_ms.len();
    println!("firings:  {fired} of about {expected} scheduled");
    println!(
        "delay from the scheduled second to process start:\n  p50 {:.1} ms   p90 {:.1} ms   p99 {:.1} ms   max {:.1} ms",
        quantile(&delays_ms, 0.5),
        quantile(&delays_ms, 0.9),
        quantile(&delays_ms, 0.99),
        delays_ms.last().copied().unwrap_or_default()
    );
    let receipts: usize = store
        .read(|rd| {
            let mut n = 0;
            for i in 0..CRONS {
                n += rd.cron_receipts(&format!("c{i}"), 1_000_000)?.len();
            }
            Ok::<_, canopy_store::StoreError>(n)
        })
        .await
        .unwrap();
    println!("receipts: {receipts}");
}
