//! `canopy hooks test`: render the hooks of one event against a graph's past run -- which would
//! fire, with what values, and what is wrong with them -- and with `execute`, run them for real,
//! recorded as test runs.

pub use canopy_model::records::hook_reports::{DryRun, HookCheck};
use serde_json::Value;

use super::config::runs_of;
use super::config::{HookMap, hooks_of};
use canopy_executors::plugins::{PluginError, PluginHost, split_work_config};
use canopy_model::hook_keys::Firing;
use canopy_model::hook_keys::HookEvent;
use canopy_model::markers::HOOK_MARKERS;

/// Checks the hooks of `event` (or only `only`) against a firing built from history.
pub async fn evaluate(
    plugins: &PluginHost,
    hooks: &HookMap,
    event: HookEvent,
    firing: Option<&Firing>,
    only: Option<usize>,
) -> Vec<HookCheck> {
    let mut checks = Vec::new();
    for (index, hook) in hooks_of(hooks, event).into_iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let mut problems = Vec::new();
        let work = split_work_config(&hook);
        let mode = work.as_ref().ok().map(|w| w.mode.clone());
        let mut rendered = None;
        // A hook whose plugin is disabled cannot run: say that, once, rather than what
        // validating and rendering against a missing executor would say.
        let disabled = match &work {
            Ok(work) => match plugins.plugin_ref(&work.mode) {
                Err(err @ PluginError::Disabled { .. }) => Some(err.to_string()),
                _ => None,
            },
            Err(_) => None,
        };
        match &work {
            Ok(_) if disabled.is_some() => {}
            Ok(work) => {
                if let Err(err) = plugins.validate(work, HOOK_MARKERS).await {
                    problems.push(err.to_string());
                }
                let markers = firing.map(|f| f.markers.clone()).unwrap_or_default();
                match plugins.render(work, &markers) {
                    Ok(config) => rendered = Some(config),
                    Err(err) => problems.push(err.to_string()),
                }
            }
            Err(err) => problems.push(err.clone()),
        }
        let (would_fire, reason) = match firing {
            _ if disabled.is_some() => (false, disabled.clone()),
            None => (false, Some("the event would not fire".to_string())),
            Some(firing) if runs_of(firing, &hook).is_empty() => (
                false,
                Some(format!(
                    "its spec_ids do not include the event's spec ({})",
                    firing.spec_id.as_deref().unwrap_or("none")
                )),
            ),
            Some(_) => (true, None),
        };
        checks.push(HookCheck {
            index,
            config: Value::Object(hook),
            mode,
            would_fire,
            reason,
            rendered,
            problems,
            executor_disabled: disabled.is_some(),
        });
    }
    checks
}
