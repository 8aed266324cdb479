//! `canopy plugin bench`: what a plugin costs on this machine -- compile, cached load, and a
//! fresh instantiate + `execute` call -- next to the floor wasmtime itself sets for that call
//! and the cost of spawning a process.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Map, Value};
use wasmtime::component::Component;

use super::bindings::canopy::hooks::types::Invocation;
use super::call::{Call, CallSetup, CommandRecord};
use super::capabilities::Grants;
use super::{CallRequest, PluginError, PluginHost, WorkConfig, Workdir, sha256_hex};
use canopy_model::records::plugins::{BenchReport, LatencyStats};
use canopy_model::work::Provenance;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// Plugin name.
    pub plugin: String,
    /// Mode to call (default: the plugin's first mode).
    pub mode: Option<String>,
    /// Config of each call.
    pub config: Map<String, Value>,
    /// Calls to time.
    pub iterations: u32,
    /// Workdir of each call (default: a scratch dir in the data dir).
    pub workdir: Option<PathBuf>,
}

/// The latency figures of `samples`, in microseconds.
fn stats_of(mut samples: Vec<Duration>) -> LatencyStats {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(index).copied().map_or(0.0, us)
    };
    LatencyStats {
        samples: samples.len(),
        median_us: at(0.5),
        p99_us: at(0.99),
        min_us: samples.first().copied().map_or(0.0, us),
        max_us: samples.last().copied().map_or(0.0, us),
    }
}

impl PluginHost {
    /// Measures one plugin.
    pub async fn bench(&self, request: BenchRequest) -> Result<BenchReport, PluginError> {
        let plugin = self.loaded(&request.plugin)?;
        let mode = match request.mode {
            Some(mode) => mode,
            None => plugin
                .record
                .manifest
                .modes
                .first()
                .cloned()
                .unwrap_or_default(),
        };
        let workdir = match request.workdir {
            Some(dir) => dir,
            None => {
                let dir = self.tmp_dir().join("bench-workdir");
                std::fs::create_dir_all(&dir).context("cannot create the bench workdir")?;
                dir
            }
        };
        // Resolved once, as a run resolves its workdir once for all its nodes.
        let workdir = Workdir::resolve(&workdir)?;
        let iterations = request.iterations.max(1) as usize;
        let bytes = std::fs::read(self.wasm_path(&plugin.record.sha256))
            .context("cannot read the plugin's component")?;
        debug_assert_eq!(sha256_hex(&bytes), plugin.record.sha256);

        let engine = self.engine().clone();
        let compile = {
            let engine = engine.clone();
            let bytes = bytes.clone();
            tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Duration>> {
                (0..iterations.clamp(1, 5))
                    .map(|_| {
                        let started = Instant::now();
                        Component::new(&engine, &bytes)?;
                        Ok(started.elapsed())
                    })
                    .collect()
            })
            .await
            .context("compile bench panicked")??
        };

        let cache = self.inner.cache.clone();
        let sha256 = plugin.record.sha256.clone();
        let cache_load = {
            let engine = engine.clone();
            tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Duration>> {
                (0..iterations.clamp(1, 200))
                    .map(|_| {
                        // The daemon's own path: read, check the recorded digest, deserialise.
                        let started = Instant::now();
                        cache
                            .cached(&engine, &sha256)
                            .context("the plugin has no verified cached artifact")?;
                        Ok(started.elapsed())
                    })
                    .collect()
            })
            .await
            .context("cache-load bench panicked")??
        };

        let call_request = CallRequest {
            stdin: None,
            decision_input: None,
            graph_hooks: None,
            work: WorkConfig::with_mode(mode.clone(), &request.config),
            markers: [
                ("graph_name", "bench"),
                ("spec_name", "bench spec"),
                ("spec_id", "0000"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            supported_markers: std::borrow::Cow::Borrowed(canopy_model::markers::HOOK_MARKERS),
            workdir: workdir.clone(),
            provenance: Provenance {
                event: "bench".into(),
                ..Provenance::default()
            },
            timeout: None,
            resume_session: None,
            cause: None,
            env: Vec::new(),
        };
        let mut last_status = String::new();
        let mut warmed = None;
        for _ in 0..iterations.min(20) {
            warmed = Some(self.execute(call_request.clone()).await?);
        }
        // The bare call makes the same invocation the host made (its config as rendered).
        let invocation = Invocation {
            mode: mode.clone(),
            config: warmed
                .map(|report| report.rendered_config.to_string())
                .unwrap_or_default(),
            markers: super::marker_list(&call_request.supported_markers, &call_request.markers),
            workdir: workdir.path().to_string_lossy().into_owned(),
            provenance: super::call::provenance_to_wit(&call_request.provenance),
            deadline_ms: u64::try_from(self.timeout_for(call_request.work.host()).as_millis())
                .unwrap_or(u64::MAX),
            resume_session: None,
            decision_input: None,
        };
        let bare_call = Call::Execute(Box::new(invocation));
        let setup = CallSetup {
            plugin: plugin.clone(),
            grants: Grants::new(plugin.record.name.clone(), plugin.record.grants()),
            workdir: Some(workdir.to_path_buf()),
            timeout: self.timeout_for(call_request.work.host()),
            detach: false,
            env: self.inner.call_env.clone(),
            commands: std::sync::Arc::new(CommandRecord::default()),
            host_env: std::sync::Arc::from(Vec::new()),
            stdin: None,
            platform_args: std::sync::Arc::from(Vec::new()),
        };
        // Pair by pair: a call through Canopy, then the same on bare wasmtime, so drift in the
        // machine (frequency, other load) falls on both alike.
        let mut calls = Vec::with_capacity(iterations);
        let mut bare_calls = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            // The request is made before the clock starts, as the bare call's invocation is.
            let request = call_request.clone();
            let started = Instant::now();
            let report = self.execute(request).await?;
            calls.push(started.elapsed());
            last_status = match report.outcome.status {
                super::Status::Completed => "completed".to_string(),
                super::Status::Failed { reason } => format!("failed: {reason}"),
                super::Status::Blocked { blocker } => format!("blocked: {blocker}"),
                super::Status::TimedOut { reason } => format!("timed out: {reason}"),
            };
            let started = Instant::now();
            setup.bare_execute(&bare_call).await?;
            bare_calls.push(started.elapsed());
        }

        let spawns = iterations.clamp(1, 300);
        let mut spawn_true = Vec::with_capacity(spawns);
        let mut spawn_sh_true = Vec::with_capacity(spawns);
        for _ in 0..spawns {
            let started = Instant::now();
            tokio::process::Command::new("/bin/true")
                .status()
                .await
                .context("cannot spawn /bin/true")?;
            spawn_true.push(started.elapsed());
            let started = Instant::now();
            tokio::process::Command::new("sh")
                .args(["-c", "true"])
                .output()
                .await
                .context("cannot spawn sh")?;
            spawn_sh_true.push(started.elapsed());
        }

        let (call, bare_call) = (stats_of(calls), stats_of(bare_calls));
        let call_over_bare = if bare_call.median_us > 0.0 {
            call.median_us / bare_call.median_us
        } else {
            0.0
        };
        Ok(BenchReport {
            plugin: super::plugin_ref(&plugin.record),
            mode,
            compile: stats_of(compile),
            cache_load: stats_of(cache_load),
            call,
            bare_call,
            call_over_bare,
            spawn_true: stats_of(spawn_true),
            spawn_sh_true: stats_of(spawn_sh_true),
            last_status,
        })
    }
}
