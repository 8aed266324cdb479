//! Launches with runtime hooks: an agent call whose config declares `runtime_hooks` (or names
//! `profiles`) gets, for that call only, the runtime's own hook configuration written in a
//! directory of its own, every hook in it calling back into the daemon with a secret of the
//! launch's own. The daemon finds the launch by that secret (see [`Launches::find`]), and the
//! launch, its secret and its directory are gone when the call ends.
//!
//! Materialised formats (a platform's `runtime_hooks`):
//! - `claude`: Claude Code's settings, passed with the platform's `settings_args`
//!   (`--settings {settings}`): an `http` hook per phase, at the daemon's loopback API, with
//!   `onFailure: "block"` on the phases that decide; `SessionStart` (`on_start`), which takes
//!   no `http` hook, runs the relay `canopy runtime-hook`, which posts the same JSON.
//! - `codex`: Codex's hook tables as a config layer of the launch's own, on its command line
//!   (`-c hooks.PreToolUse=[...]`, never the user's `~/.codex`), trusted for that launch only
//!   with `--dangerously-bypass-hook-trust` (Codex's documented way for automation that vets
//!   its hooks itself). Codex runs command hooks only: each runs the relay, with
//!   `--fail-closed` on the phases that decide (a Codex hook that fails lets the tool run).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use canopy_model::events::Cause;
use canopy_model::runtime_hooks::{Phase, RuntimeHooks};
use canopy_model::work::Provenance;

use super::platforms::{Platform, RuntimeFormat};
use super::work::HostKeys;
use super::{HostServices, SYNC_HOOK_TIMEOUT};

/// The variables a launch's processes get: where and how its hooks call back.
pub const RUNTIME_URL: &str = "CANOPY_RUNTIME_URL";
pub const RUNTIME_TOKEN: &str = "CANOPY_RUNTIME_TOKEN";
pub const LAUNCH_ID: &str = "CANOPY_LAUNCH_ID";

/// Every launch secret starts with this.
const PREFIX: &str = "canopy-launch-";

/// The route a runtime's hooks call, under the API (`/api/runtime/{callback}`).
pub const CALLBACK_ROUTE: &str = "/api/runtime";

/// One agent call with runtime hooks, as its callbacks need it.
#[derive(Debug)]
pub struct Launch {
    pub id: String,
    pub platform: String,
    pub workdir: PathBuf,
    pub hooks: RuntimeHooks,
    pub provenance: Provenance,
    /// Who the agent's call acts as (its hooks run one dispatch deeper).
    pub cause: Option<Cause>,
    /// The `hooks` map of the graph whose node launched it, when it keys an event the launch
    /// asks (its sync hooks decide there too, after the launch's own).
    pub graph_hooks: Option<Arc<serde_json::Map<String, Value>>>,
}

/// Where a launch comes from: its call's workdir, provenance and cause, and its graph's hooks.
/// Borrowed from the call: every call asks whether it opens a launch, few do.
#[derive(Debug, Clone)]
pub(crate) struct LaunchSite<'a> {
    pub workdir: &'a Path,
    pub provenance: &'a Provenance,
    pub cause: Option<&'a Cause>,
    pub graph_hooks: Option<&'a Arc<serde_json::Map<String, Value>>>,
}

/// How a launch ended, for the phases Canopy fires itself (`on_complete`, `on_failure`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchEnd {
    Completed {
        summary: Option<String>,
    },
    /// `failure`: `failed`, `timed_out`, `blocked`, `limit_blocked` or `interrupted`.
    Failed {
        failure: &'static str,
        reason: String,
    },
}

impl LaunchEnd {
    /// The end of the call that `result` is.
    pub fn of(result: &Result<super::CallReport, super::PluginError>) -> Self {
        use super::Ending;
        let failed = |failure, reason: &str| Self::Failed {
            failure,
            reason: reason.to_string(),
        };
        match Ending::of(result) {
            Ending::Completed => Self::Completed {
                summary: result
                    .as_ref()
                    .ok()
                    .and_then(|report| report.outcome.summary.clone()),
            },
            Ending::Failed(reason) => failed("failed", &reason),
            Ending::TimedOut(reason) => failed("timed_out", &reason),
            Ending::Blocked(blocker) => failed("blocked", &blocker),
            Ending::LimitBlocked(hit) => failed("limit_blocked", &hit.as_failure()),
            Ending::Interrupted(reason) => failed(
                "interrupted",
                reason.as_deref().unwrap_or("a stop signal ended it"),
            ),
        }
    }
}

/// The live launches, by secret (cheap to clone).
#[derive(Debug, Default, Clone)]
pub struct Launches {
    live: Arc<Mutex<HashMap<String, Arc<Launch>>>>,
}

impl Launches {
    /// The live launch whose secret is `secret`.
    pub fn find(&self, secret: &str) -> Option<Arc<Launch>> {
        if !secret.starts_with(PREFIX) {
            return None;
        }
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(secret)
            .cloned()
    }

    /// The live launch with that id.
    pub fn by_id(&self, id: &str) -> Option<Arc<Launch>> {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .find(|launch| launch.id == id)
            .cloned()
    }

    /// How many launches are live.
    pub fn live(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A launch opened for one call: its hooks answer while this lives; dropping it forgets the
/// secret and removes the directory its configuration was written in.
pub(crate) struct OpenLaunch {
    launches: Launches,
    launch: Arc<Launch>,
    secret: String,
    /// Where its runtime hook configuration is written (none when the runtime calls nothing
    /// back: only the phases Canopy fires itself are declared).
    dir: Option<PathBuf>,
    /// The variables the call's processes get (see [`RUNTIME_URL`]).
    pub env: Vec<(String, String)>,
    /// The arguments the host adds to the platform's command (its `settings_args`, rendered).
    pub args: Vec<String>,
}

impl OpenLaunch {
    /// The launch's secret (to keep out of the call's record).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The launch, as its callbacks and its end see it.
    pub fn launch(&self) -> &Arc<Launch> {
        &self.launch
    }
}

impl Drop for OpenLaunch {
    fn drop(&mut self) {
        self.launches
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.secret);
        if let Some(dir) = &self.dir
            && let Err(err) = std::fs::remove_dir_all(dir)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %err, "cannot remove a launch's runtime hook configuration");
        }
    }
}

/// The runtime hooks a config declares: its profiles' (in the order it names them), then its
/// own. Errors name the field and, for a profile, where it is missing.
pub fn resolve(host: &HostKeys, services: &dyn HostServices) -> Result<RuntimeHooks, String> {
    let hooks = stack_of(&host.profiles()?, services)?;
    match host.runtime_hooks() {
        Some(own) => Ok(hooks.then(RuntimeHooks::parse(
            own,
            "runtime_hooks",
            "the agent's config",
        )?)),
        None => Ok(hooks),
    }
}

/// The runtime hooks of `profiles`, composed in that order.
pub fn stack_of(profiles: &[String], services: &dyn HostServices) -> Result<RuntimeHooks, String> {
    let mut hooks = RuntimeHooks::default();
    for name in profiles {
        let value = services.profile(name)?;
        hooks = hooks.then(RuntimeHooks::parse(
            &value,
            &format!("profiles.{name}.runtime_hooks"),
            &format!("profile {name}"),
        )?);
    }
    Ok(hooks)
}

/// Whether the platform reads a hook configuration Canopy can write.
pub fn takes_runtime_hooks(platform: &Platform) -> bool {
    match platform.runtime_hooks {
        Some(RuntimeFormat::Claude) => platform
            .settings_args
            .iter()
            .any(|a| a.contains("{settings}")),
        Some(RuntimeFormat::Codex) => true,
        None => false,
    }
}

/// Phases Codex has no hook event for.
const NOT_IN_CODEX: [Phase; 2] = [Phase::OnNotification, Phase::OnSessionEnd];

/// Refuses runtime hooks the platform cannot honour, naming the phase and the platform. The
/// phases Canopy fires itself as the launch ends (`on_complete`, `on_failure`) run on any.
pub fn check_platform(name: &str, platform: &Platform, hooks: &RuntimeHooks) -> Result<(), String> {
    let Some(first) = hooks.declared().find(|phase| phase.from_runtime()) else {
        return Ok(());
    };
    match platform.runtime_hooks {
        Some(RuntimeFormat::Claude)
            if platform
                .settings_args
                .iter()
                .any(|a| a.contains("{settings}")) =>
        {
            Ok(())
        }
        Some(RuntimeFormat::Claude) => Err(format!(
            "platform `{name}` reads Claude Code's settings but its `settings_args` have no `{{settings}}` (for example [\"--settings\", \"{{settings}}\"]); the runtime hooks ({first}) cannot be given to it"
        )),
        Some(RuntimeFormat::Codex) => match hooks.declared().find(|p| NOT_IN_CODEX.contains(p)) {
            Some(phase) => Err(format!(
                "platform `{name}` runs Codex, which has no hook event for phase `{phase}`; Codex runs on_start, before_tool, post_tool_use, before_complete and on_stop (and Canopy runs on_complete and on_failure on any platform)"
            )),
            None => Ok(()),
        },
        None => Err(format!(
            "platform `{name}` takes no runtime hooks, so phase `{first}` cannot run in it: set `runtime_hooks = \"claude\"` and `settings_args` in [platforms.{name}] if it reads Claude Code's settings, or remove the runtime hooks"
        )),
    }
}

/// Opens a launch for one call: registers it, writes its configuration under `tmp_dir`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open(
    launches: &Launches,
    tmp_dir: &Path,
    api_url: &str,
    platform_name: &str,
    platform: &Platform,
    hooks: RuntimeHooks,
    phases: &[Phase],
    site: LaunchSite<'_>,
) -> Result<OpenLaunch, String> {
    check_platform(platform_name, platform, &hooks)?;
    let id = canopy_store::new_id();
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|err| format!("no randomness for a launch secret: {err}"))?;
    let secret = format!("{PREFIX}{}", hex::encode(bytes));
    let called_back: Vec<Phase> = phases
        .iter()
        .copied()
        .filter(|phase| phase.from_runtime())
        .collect();
    let (dir, args) = if called_back.is_empty() {
        (None, Vec::new())
    } else if platform.runtime_hooks == Some(RuntimeFormat::Codex) {
        (None, codex_args(&hooks, &called_back))
    } else {
        let dir = tmp_dir.join(format!("launch-{id}"));
        let settings = claude_settings(api_url, &hooks, &called_back);
        write_private(&dir, &settings).map_err(|err| {
            format!(
                "cannot write the runtime hook configuration in {}: {err}",
                dir.display()
            )
        })?;
        let settings_path = dir.join("settings.json").to_string_lossy().into_owned();
        let args = platform
            .settings_args
            .iter()
            .map(|arg| arg.replace("{settings}", &settings_path))
            .collect();
        (Some(dir), args)
    };
    let launch = Arc::new(Launch {
        id: id.clone(),
        platform: platform_name.to_string(),
        workdir: site.workdir.to_path_buf(),
        hooks,
        provenance: site.provenance.clone(),
        cause: site.cause.cloned(),
        graph_hooks: site.graph_hooks.cloned(),
    });
    launches
        .live
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(secret.clone(), launch.clone());
    Ok(OpenLaunch {
        launches: launches.clone(),
        launch,
        env: vec![
            (RUNTIME_URL.to_string(), api_url.to_string()),
            (RUNTIME_TOKEN.to_string(), secret.clone()),
            (LAUNCH_ID.to_string(), id),
        ],
        secret,
        dir,
        args,
    })
}

/// Writes `settings` as `dir/settings.json`, the directory only its owner may read.
fn write_private(dir: &Path, settings: &Value) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join("settings.json"))?;
    file.write_all(settings.to_string().as_bytes())
}

/// The `canopy` program a command hook runs to relay its callback (`canopy runtime-hook`): the
/// daemon's own executable, which is the CLI.
fn relay_program() -> String {
    std::env::current_exe()
        .map(|exe| exe.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "canopy".to_string())
}

/// `text` as one word of a POSIX shell line, single-quoted.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Claude Code's name of the hook event a phase is called back on (none for the phases Canopy
/// fires itself).
fn claude_event(phase: Phase) -> Option<&'static str> {
    Some(match phase {
        Phase::OnStart => "SessionStart",
        Phase::BeforeTool => "PreToolUse",
        Phase::PostToolUse => "PostToolUse",
        Phase::OnNotification => "Notification",
        Phase::BeforeComplete | Phase::OnStop => "Stop",
        Phase::OnSessionEnd => "SessionEnd",
        Phase::OnComplete | Phase::OnFailure => return None,
    })
}

/// The phases a callback of Claude Code's `event` answers, in the order they are asked.
pub fn claude_phases(event: &str) -> &'static [Phase] {
    match event {
        "SessionStart" => &[Phase::OnStart],
        "PreToolUse" => &[Phase::BeforeTool],
        "PostToolUse" => &[Phase::PostToolUse],
        "Notification" => &[Phase::OnNotification],
        "Stop" => &[Phase::BeforeComplete, Phase::OnStop],
        "SessionEnd" => &[Phase::OnSessionEnd],
        _ => &[],
    }
}

/// How long the runtime waits for a callback of `phase`, in whole seconds: a sync phase's hooks
/// run one after the other, and the daemon's answer takes a moment more.
fn wait_secs(hooks: &RuntimeHooks, phase: Phase) -> u64 {
    let wait: Duration = if phase.decides() {
        hooks
            .phases
            .get(&phase)
            .into_iter()
            .flatten()
            .flat_map(|group| &group.hooks)
            .map(|hook| {
                super::work::split(hook)
                    .ok()
                    .and_then(|work| work.host().timeout())
                    .unwrap_or(SYNC_HOOK_TIMEOUT)
            })
            .sum::<Duration>()
            + Duration::from_secs(5)
    } else {
        Duration::from_secs(10)
    };
    wait.as_secs().max(1) + u64::from(wait.subsec_nanos() > 0)
}

/// Codex's hook configuration for a launch, as command-line config overrides: one command hook
/// per Codex event the phases need (Canopy matches tool names itself), each running the relay,
/// then the flag that trusts them for this launch. The values are TOML; a JSON string is a
/// TOML basic string.
fn codex_args(hooks: &RuntimeHooks, phases: &[Phase]) -> Vec<String> {
    let mut events: std::collections::BTreeMap<&str, (bool, u64)> = Default::default();
    for &phase in phases {
        let Some(event) = claude_event(phase) else {
            continue;
        };
        let entry = events.entry(event).or_insert((false, 0));
        entry.0 |= phase.decides();
        entry.1 = entry.1.max(wait_secs(hooks, phase));
    }
    let relay = shell_quote(&relay_program());
    let mut args = Vec::new();
    for (event, (decides, wait)) in events {
        let command = if decides {
            format!("{relay} runtime-hook --fail-closed")
        } else {
            format!("{relay} runtime-hook")
        };
        args.push("-c".to_string());
        args.push(format!(
            "hooks.{event}=[{{hooks=[{{type=\"command\",command={},timeout={wait}}}]}}]",
            Value::String(command)
        ));
    }
    args.push("--dangerously-bypass-hook-trust".to_string());
    args
}

/// Claude Code's settings for a launch: one hook per Claude event the declared phases need,
/// every one calling back (Canopy matches the tool names itself, so one hook per event is
/// enough and a matcher means the same whichever runtime runs it).
fn claude_settings(api_url: &str, hooks: &RuntimeHooks, phases: &[Phase]) -> Value {
    let mut events = serde_json::Map::new();
    for &phase in phases {
        let Some(event) = claude_event(phase) else {
            continue;
        };
        let wait_secs = wait_secs(hooks, phase);
        let mut hook = if phase == Phase::OnStart {
            // SessionStart takes no http hook: the relay posts the same JSON for it.
            json!({
                "type": "command",
                "command": format!("{} runtime-hook", shell_quote(&relay_program())),
                "timeout": wait_secs,
            })
        } else {
            json!({
                "type": "http",
                "url": format!("{api_url}{CALLBACK_ROUTE}/{event}"),
                "headers": { "Authorization": format!("Bearer ${RUNTIME_TOKEN}") },
                "allowedEnvVars": [RUNTIME_TOKEN],
                "timeout": wait_secs,
            })
        };
        if phase.decides() {
            // A daemon that cannot answer blocks the action instead of letting it through.
            hook["onFailure"] = json!("block");
        }
        let entry = events
            .entry(event)
            .or_insert_with(|| json!([{ "hooks": [] }]));
        let list = &mut entry[0]["hooks"];
        if list.as_array().is_some_and(|l| {
            l.iter()
                .any(|h| h["url"] == hook["url"] && h["type"] == "http")
        }) {
            // Stop serves before_complete and on_stop with one callback; keep the blocking one.
            if phase.decides()
                && let Some(existing) = list.as_array_mut().and_then(|l| l.first_mut())
            {
                *existing = hook;
            }
            continue;
        }
        if let Some(list) = list.as_array_mut() {
            list.push(hook);
        }
    }
    json!({
        "hooks": events,
        "allowedHttpHookUrls": [format!("{api_url}{CALLBACK_ROUTE}/*")],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A hook on each phase a runtime calls back for a tool and a turn, and one Canopy fires.
    fn declared() -> RuntimeHooks {
        RuntimeHooks::parse(
            &json!({
                "before_tool": [{"matcher": "Bash", "hooks": [{"command": "a", "timeout_ms": 2500}]}],
                "after_tool": [{"hooks": [{"command": "b"}]}],
                "on_stop": [{"hooks": [{"command": "c"}]}],
                "before_complete": [{"hooks": [{"command": "d"}]}],
                "on_complete": [{"hooks": [{"command": "e"}]}],
            }),
            "runtime_hooks",
            "test",
        )
        .unwrap()
    }

    #[test]
    fn codex_args_are_one_command_hook_per_event_failing_closed_where_they_decide() {
        let hooks = declared();
        let phases: Vec<Phase> = hooks.declared().filter(|p| p.from_runtime()).collect();
        let args = codex_args(&hooks, &phases);
        assert_eq!(args.last().unwrap(), "--dangerously-bypass-hook-trust");
        let overrides: Vec<&String> = args.iter().skip(1).step_by(2).take(3).collect();
        assert_eq!(args.iter().filter(|a| *a == "-c").count(), 3, "{args:?}");
        let pre = overrides
            .iter()
            .find(|a| a.starts_with("hooks.PreToolUse="))
            .unwrap();
        assert!(
            pre.contains("runtime-hook --fail-closed") && pre.contains("timeout=8"),
            "{pre}"
        );
        let post = overrides
            .iter()
            .find(|a| a.starts_with("hooks.PostToolUse="))
            .unwrap();
        assert!(!post.contains("--fail-closed"), "{post}");
        // Stop serves before_complete (decides) and on_stop with one hook.
        let stop = overrides
            .iter()
            .find(|a| a.starts_with("hooks.Stop="))
            .unwrap();
        assert!(stop.contains("--fail-closed"), "{stop}");
    }

    #[test]
    fn claude_settings_call_back_once_per_event_and_block_when_the_daemon_cannot_answer() {
        let hooks = declared();
        let phases: Vec<Phase> = hooks.declared().collect();
        let settings = claude_settings("http://127.0.0.1:7", &hooks, &phases);
        let pre = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(pre["url"], "http://127.0.0.1:7/api/runtime/PreToolUse");
        assert_eq!(pre["onFailure"], "block");
        assert_eq!(
            pre["timeout"], 8,
            "2.5 s of hooks and 5 s for the answer, rounded up"
        );
        assert_eq!(
            pre["headers"]["Authorization"],
            "Bearer $CANOPY_RUNTIME_TOKEN"
        );
        assert!(settings["hooks"]["PostToolUse"][0]["hooks"][0]["onFailure"].is_null());
        let stop = settings["hooks"]["Stop"][0]["hooks"].as_array().unwrap();
        assert_eq!(stop.len(), 1, "{settings}");
        assert_eq!(stop[0]["onFailure"], "block");
    }
}
