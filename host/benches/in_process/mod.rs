//! What the in-process benchmarks share: a store and an executor host on a temp data dir,
//! with host services that refuse everything (no sessions, no agent platforms), and processes
//! started and supervised as the daemon does it (its private umask, so that user processes
//! start from the spawner threads; a child subreaper with its ledger).

use std::sync::Arc;

use canopy_core::config::Config;
use canopy_datadir::DataDir;
use canopy_executors::plugins::platforms::Platform;
use canopy_executors::plugins::{HostServices, PluginHost};
use canopy_model::work::{MessageTarget, Provenance};
use canopy_store::Store;

struct NoServices;

impl HostServices for NoServices {
    fn enqueue_message<'a>(
        &'a self,
        _: &'a str,
        _: MessageTarget,
        _: &'a str,
        _: &'a Provenance,
    ) -> canopy_executors::plugins::ServiceFuture<'a, Result<String, String>> {
        Box::pin(std::future::ready(Err("not in this benchmark".into())))
    }
    fn agent_platform(&self, name: &str) -> Result<Platform, String> {
        Err(format!("no platform {name} in this benchmark"))
    }
}

/// Where the store is: `CANOPY_TEST_BACKEND=postgres` puts it on a throwaway PostgreSQL
/// server, as the end-to-end tests' switch does; else SQLite in the temp data dir.
pub fn backend() -> &'static str {
    if std::env::var("CANOPY_TEST_BACKEND").is_ok_and(|b| b == "postgres") {
        "PostgreSQL"
    } else {
        "SQLite in a temp data dir"
    }
}

/// A store and an executor host (built-in plugins installed) on a data dir under `tmp`, on the
/// backend [`backend`] names.
pub async fn start(tmp: &std::path::Path) -> (Store, PluginHost) {
    // As the daemon does first: what it creates is private, and the processes it runs for the
    // user start from the spawner threads with the user's umask, not from a tokio worker.
    canopy_executors::procs::umask::private_umask();
    let data = DataDir::resolve(Some(tmp.join("data")))
        .unwrap()
        .create()
        .unwrap();
    let store = if backend() == "PostgreSQL" {
        // The PostgreSQL client blocks on a runtime of its own: off this one.
        tokio::task::spawn_blocking(|| {
            let url = canopy_store::pg::cluster::scratch_database().unwrap();
            Store::open_postgres(&url, canopy_store::LOCAL_NODE).unwrap()
        })
        .await
        .unwrap()
    } else {
        Store::open(&data.database()).unwrap()
    };
    // As the daemon does before anything runs: without it a command's sweep would read every
    // process on the machine instead of the daemon's descendants, and keep no ledger.
    canopy_executors::procs::start(
        data.root(),
        &canopy_executors::procs::ProcessConfig::default(),
    )
    .await
    .unwrap();
    let plugins = PluginHost::start(
        &data,
        store.clone(),
        &Config::default().limits.calls(),
        Arc::new(NoServices),
    )
    .await
    .unwrap();
    (store, plugins)
}
