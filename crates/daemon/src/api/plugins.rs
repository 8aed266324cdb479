//! `/api/plugins`: install, list, inspect, remove, enable, run and bench executor plugins.
//!
//! A change records its `plugin.*` event once it is done: installed (or upgraded), removed,
//! and a built-in disabled (removing one) or a disabled plugin enabled.

use canopy_model::requests::plugins::{BenchBody, InstallQuery, RunBody};
use std::collections::BTreeSet;

use super::docs::{Created, delete, get, post};
use aide::axum::ApiRouter;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use serde_json::{Map, Value};

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::hooks::decide::{Question, Verdict};
use canopy_executors::plugins::{BenchRequest, CallReport, CallRequest, WorkConfig, Workdir};
use canopy_model::events::plugin::{
    PluginDisabled, PluginEnabled, PluginInstalled, PluginPreInstall, PluginRef as PluginEventRef,
    PluginRemoved,
};
use canopy_model::events::{Cause, Event, Payload};
use canopy_model::records::plugins::{
    BenchReport, NotLoaded, PluginInfo, PluginList, PluginUse, RemovedPlugin,
};
use canopy_model::work::Provenance;

/// Largest component accepted for install.
const MAX_COMPONENT: usize = 64 * 1024 * 1024;

/// What a `plugin.*` event says about a plugin.
fn event_ref(info: &PluginInfo) -> PluginEventRef {
    PluginEventRef {
        plugin: info.record.name.clone(),
        version: info.record.version.clone(),
        sha256: info.record.sha256.clone(),
        modes: info.record.manifest.modes.clone(),
    }
}

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/", get(list))
        .api_route(
            "/",
            post(install).layer(DefaultBodyLimit::max(MAX_COMPONENT)),
        )
        .api_route("/{name}", get(inspect))
        .api_route("/{name}", delete(remove))
        .api_route("/{name}/enable", post(enable))
        .api_route("/{name}/run", post(run))
        .api_route("/{name}/bench", post(bench))
}

async fn list(State(state): State<AppState>) -> ApiJson<PluginList> {
    let not_loaded = state
        .plugins
        .skipped()
        .into_iter()
        .map(|(name, why)| NotLoaded { name, why })
        .collect();
    ApiJson(PluginList {
        plugins: state.plugins.list(),
        not_loaded,
    })
}

async fn install(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<InstallQuery>,
    body: Bytes,
) -> Result<Created<PluginInfo>, ApiError> {
    let grants: Vec<String> = query
        .grant
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect();
    // The sync hooks on `plugin.pre_install` decide, once the component said who it is.
    let bus = state.bus.clone();
    let gate: canopy_executors::plugins::InstallGate = Box::new(move |ask| {
        Box::pin(async move {
            let question = PluginPreInstall {
                plugin: PluginEventRef {
                    plugin: ask.name.clone(),
                    version: ask.version,
                    sha256: ask.sha256,
                    modes: ask.modes,
                },
                capabilities: ask.capabilities,
                granted: ask.granted,
            };
            if !bus.asks(PluginPreInstall::DEF.name) {
                return Ok(());
            }
            let question = Question::of(&question, Cause::current());
            let decision = bus
                .decide(question)
                .await
                .map_err(|err| format!("the sync hooks' answer cannot be recorded: {err}"))?;
            match decision.verdict {
                Verdict::Allow => Ok(()),
                Verdict::Deny { hook, reason } => Err(format!(
                    "sync hook `{hook}` denied the install of plugin `{}`: {reason}",
                    ask.name
                )),
            }
        })
    });
    let info = state
        .plugins
        .install_gated(body.to_vec(), &grants, query.replace, Some(gate))
        .await?;
    tracing::info!(plugin = %info.record.name, version = %info.record.version, sha256 = %info.record.sha256, "plugin installed");
    // The files are in place: the event can only follow them.
    state
        .bus
        .emit_logged(vec![Event::new(&PluginInstalled(event_ref(&info)))])
        .await;
    Ok(Created(info))
}

async fn inspect(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<PluginInfo>, ApiError> {
    Ok(ApiJson(state.plugins.get(&name)?))
}

/// Removes (or, for a built-in, disables) a plugin. The answer is the plugin, with `used_by`:
/// every node and hook of a graph whose mode no enabled plugin serves any more, which will fail
/// until one does, and a `warnings` line saying so.
async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<RemovedPlugin>, ApiError> {
    let was_enabled = state.plugins.get(&name)?.record.enabled;
    let info = state.plugins.remove(&name).await?;
    let event = if !info.record.builtin {
        Some(Event::new(&PluginRemoved(event_ref(&info))))
    } else if was_enabled {
        Some(Event::new(&PluginDisabled(event_ref(&info))))
    } else {
        // A built-in that was disabled already: nothing changed.
        None
    };
    if let Some(event) = event {
        state.bus.emit_logged(vec![event]).await;
    }
    let orphaned: Vec<&String> = info
        .record
        .manifest
        .modes
        .iter()
        .filter(|mode| state.plugins.plugin_ref(mode).is_err())
        .collect();
    let mut used_by = Vec::new();
    // What canopy.toml configures: webhooks, daemon hooks, project hooks, crons.
    let mut configured = |owner: String, mode: &str| {
        if orphaned.iter().any(|m| m.as_str() == mode) {
            used_by.push(PluginUse {
                graph: None,
                owner,
                place: "canopy.toml".to_string(),
                mode: mode.to_string(),
            });
        }
    };
    for hook in state.webhooks.webhooks().hooks.values() {
        if let canopy_core::webhooks::config::Handler::Work { work, .. } = &hook.handler {
            configured(format!("webhook {}", hook.key()), &work.mode);
        }
    }
    for hook in &state.bus.daemon_hooks().hooks {
        configured(format!("daemon hook {}", hook.name()), &hook.work.mode);
    }
    for hook in &state.bus.project_hooks().hooks {
        configured(format!("project hook {}", hook.name), &hook.work.mode);
    }
    for cron in state.crons.all() {
        configured(format!("cron {}", cron.name()), &cron.work.mode);
    }
    for view in state.engine.list_graphs().await? {
        let graph = &view.graph;
        let mut uses = |place: String, config: &Map<String, Value>| {
            if let Ok(work) = canopy_executors::plugins::split_work_config(config)
                && orphaned.contains(&&work.mode)
            {
                used_by.push(PluginUse {
                    graph: Some(graph.name.clone()),
                    owner: format!("graph {}", graph.name),
                    place,
                    mode: work.mode,
                });
            }
        };
        for (index, node) in graph.nodes.iter().enumerate() {
            uses(format!("nodes[{index}] (`{}`)", node.name), &node.config);
        }
        for event in canopy_model::hook_keys::EVENTS {
            for (index, hook) in canopy_core::hooks::config::hooks_of(&graph.hooks, event)
                .iter()
                .enumerate()
            {
                uses(format!("hooks.{}[{index}]", event.as_str()), hook);
            }
        }
    }
    let mut warnings = Vec::new();
    if !used_by.is_empty() {
        let owners: BTreeSet<&str> = used_by.iter().map(|u| u.owner.as_str()).collect();
        let owners: Vec<&str> = owners.into_iter().collect();
        let who = match owners.as_slice() {
            [one] => format!("{one} still uses"),
            several => format!("{} still use", several.join(", ")),
        };
        let modes: BTreeSet<&str> = used_by.iter().map(|u| u.mode.as_str()).collect();
        let modes: Vec<String> = modes.iter().map(|m| format!("`{m}`")).collect();
        warnings.push(format!(
            "{who} mode {} of plugin `{name}`, which no enabled plugin serves now; that work fails until one does",
            modes.join(", ")
        ));
    }
    Ok(ApiJson(RemovedPlugin {
        info,
        used_by,
        warnings,
    }))
}

async fn enable(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<PluginInfo>, ApiError> {
    let was_enabled = state.plugins.get(&name)?.record.enabled;
    let info = state.plugins.set_enabled(&name, true).await?;
    if !was_enabled {
        state
            .bus
            .emit_logged(vec![Event::new(&PluginEnabled(event_ref(&info)))])
            .await;
    }
    Ok(ApiJson(info))
}

/// The mode to call on plugin `name`: the asked one (which the plugin must serve) or its first.
fn mode_of(state: &AppState, name: &str, mode: Option<String>) -> Result<String, ApiError> {
    let info = state.plugins.get(name)?;
    if !info.record.enabled {
        return Err(ApiError::conflict(format!(
            "plugin `{name}` is disabled; enable it with `canopy plugin enable {name}`"
        )));
    }
    let modes = &info.record.manifest.modes;
    match mode {
        Some(mode) if modes.contains(&mode) => Ok(mode),
        Some(mode) => Err(ApiError::bad_request(format!(
            "field `mode`: plugin `{name}` does not serve `{mode}`; it serves {}",
            modes.join(", ")
        ))),
        None => modes
            .first()
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("plugin `{name}` serves no mode"))),
    }
}

async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<ApiJson<CallReport>, ApiError> {
    let mode = mode_of(&state, &name, body.mode)?;
    let supported = canopy_model::markers::NODE_MARKERS;
    if let Some(unknown) = body
        .markers
        .keys()
        .find(|k| !supported.contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "field `markers`: unknown marker `{unknown}`; supported: {}",
            supported.join(", ")
        )));
    }
    let work = WorkConfig::with_mode(mode, &body.config);
    work.host()
        .check_no_spec_ids()
        .map_err(|err| ApiError::bad_request(format!("field `config`: {err}")))?;
    state.plugins.validate(&work, supported).await?;
    let report = state
        .plugins
        .execute(CallRequest {
            stdin: None,
            decision_input: None,
            graph_hooks: None,
            work,
            markers: body.markers,
            supported_markers: std::borrow::Cow::Borrowed(supported),
            workdir: Workdir::resolve(&body.workdir)?,
            provenance: Provenance {
                event: "manual".to_string(),
                ..Provenance::default()
            },
            timeout: None,
            resume_session: None,
            cause: None,
            env: Vec::new(),
        })
        .await?;
    Ok(ApiJson(report))
}

async fn bench(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<BenchBody>,
) -> Result<ApiJson<BenchReport>, ApiError> {
    let mode = mode_of(&state, &name, body.mode)?;
    if body.iterations == 0 || body.iterations > 100_000 {
        return Err(ApiError::bad_request(
            "field `iterations` must be between 1 and 100000",
        ));
    }
    let report = state
        .plugins
        .bench(BenchRequest {
            plugin: name,
            mode: Some(mode),
            config: body.config,
            iterations: body.iterations,
            workdir: body.workdir,
        })
        .await?;
    Ok(ApiJson(report))
}
