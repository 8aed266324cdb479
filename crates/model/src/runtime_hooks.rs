//! Runtime hooks: hooks that run *inside* an agent Canopy launches, at its lifecycle and tool
//! phases. An agent config carries them under `runtime_hooks` (and names `profiles`, whose
//! `runtime_hooks` come first); the host materialises them into the runtime's own hook
//! configuration for that launch, and each callback is a Canopy event (`tool.pre_call`, ...).
//!
//! ```json
//! "runtime_hooks": {
//!   "before_tool": [
//!     { "matcher": "Bash", "hooks": [ { "command": "./no-force-push.sh" } ] }
//!   ]
//! }
//! ```
//!
//! A matcher is pipe-separated exact names (`Bash|Edit|Write`), or a regex when it holds any
//! other character (`mcp__.*`), as Claude Code reads its own; none (or `*`) matches every name.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A phase of an agent's run that runtime hooks can be declared for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// The agent's session started: `agent.started`.
    OnStart,
    /// Before a tool call (sync: allow, deny, patch its input): `tool.pre_call`.
    BeforeTool,
    /// After a tool call: `tool.post_call`.
    PostToolUse,
    /// The runtime notified its user: `agent.notification`.
    OnNotification,
    /// Before the agent ends its turn (sync: deny keeps it working): `agent.pre_complete`.
    BeforeComplete,
    /// The agent ended its turn: `agent.stopped`.
    OnStop,
    /// The agent's session ended: `agent.session_ended`.
    OnSessionEnd,
    /// The launch ended and its work completed: `agent.completed` (Canopy fires it itself, on
    /// every platform).
    OnComplete,
    /// The launch ended and its work did not complete (failed, timed out, blocked, hit a usage
    /// limit, interrupted): `agent.failed` (Canopy fires it itself, on every platform).
    OnFailure,
}

/// Every phase, in the order a launch goes through them.
pub const PHASES: [Phase; 9] = [
    Phase::OnStart,
    Phase::BeforeTool,
    Phase::PostToolUse,
    Phase::OnNotification,
    Phase::BeforeComplete,
    Phase::OnStop,
    Phase::OnSessionEnd,
    Phase::OnComplete,
    Phase::OnFailure,
];

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnStart => "on_start",
            Self::BeforeTool => "before_tool",
            Self::PostToolUse => "post_tool_use",
            Self::OnNotification => "on_notification",
            Self::BeforeComplete => "before_complete",
            Self::OnStop => "on_stop",
            Self::OnSessionEnd => "on_session_end",
            Self::OnComplete => "on_complete",
            Self::OnFailure => "on_failure",
        }
    }

    /// A phase by its name (`after_tool` is `post_tool_use`).
    pub fn parse(name: &str) -> Option<Self> {
        if name == "after_tool" {
            return Some(Self::PostToolUse);
        }
        PHASES.into_iter().find(|phase| phase.as_str() == name)
    }

    /// The event a callback of this phase is.
    pub fn event(self) -> &'static str {
        match self {
            Self::OnStart => "agent.started",
            Self::BeforeTool => "tool.pre_call",
            Self::PostToolUse => "tool.post_call",
            Self::OnNotification => "agent.notification",
            Self::BeforeComplete => "agent.pre_complete",
            Self::OnStop => "agent.stopped",
            Self::OnSessionEnd => "agent.session_ended",
            Self::OnComplete => "agent.completed",
            Self::OnFailure => "agent.failed",
        }
    }

    /// The phase whose callbacks are `event`.
    pub fn of_event(event: &str) -> Option<Self> {
        PHASES.into_iter().find(|phase| phase.event() == event)
    }

    /// Whether the runtime calls it back (its hook configuration must name it), rather than
    /// Canopy firing it as the launch ends (`on_complete`, `on_failure`: any platform).
    pub fn from_runtime(self) -> bool {
        !matches!(self, Self::OnComplete | Self::OnFailure)
    }

    /// Whether its hooks decide (allow, deny, patch) before the runtime goes on.
    pub fn decides(self) -> bool {
        matches!(self, Self::BeforeTool | Self::BeforeComplete)
    }

    /// Whether a matcher narrows its hooks (by tool name); the others match every callback.
    pub fn has_matcher(self) -> bool {
        matches!(self, Self::BeforeTool | Self::PostToolUse)
    }

    /// The phase names, for messages.
    pub fn names() -> String {
        let mut names: Vec<&str> = PHASES.iter().map(|p| p.as_str()).collect();
        names.push("after_tool (post_tool_use)");
        names.join(", ")
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which names a hook group applies to.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Every name (no matcher, empty, or `*`).
    Any,
    /// Exact names, as written pipe-separated.
    Names(Vec<String>),
    /// An unanchored regex.
    Regex(regex::Regex),
}

impl Matcher {
    /// Parses a matcher as written; the error says why a regex does not compile.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(Self::Any);
        }
        let plain = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|' | ',' | ' '));
        if plain {
            return Ok(Self::Names(
                text.split(['|', ','])
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                    .map(str::to_string)
                    .collect(),
            ));
        }
        regex::Regex::new(text)
            .map(Self::Regex)
            .map_err(|err| format!("is neither pipe-separated names nor a regex: {err}"))
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Names(names) => names.iter().any(|n| n == name),
            Self::Regex(re) => re.is_match(name),
        }
    }
}

/// Hooks of one phase that apply to the names their matcher matches.
#[derive(Debug, Clone)]
pub struct HookGroup {
    /// The matcher as written (`None`: every name).
    pub matcher_text: Option<String>,
    pub matcher: Matcher,
    /// Executor configs, as written (a `command`, an `agent`, any installed mode).
    pub hooks: Vec<Map<String, Value>>,
    /// Where it was declared: `profile NAME` or `the agent's config`, for names and messages.
    pub from: String,
}

/// Runtime hooks by phase, each phase's groups in the order they compose.
#[derive(Debug, Clone, Default)]
pub struct RuntimeHooks {
    pub phases: BTreeMap<Phase, Vec<HookGroup>>,
}

impl RuntimeHooks {
    /// Parses a `runtime_hooks` value as written at `at` (a field path for messages), its
    /// groups marked as declared `from`. Each hook config is checked as an object only: its
    /// executor checks the rest.
    pub fn parse(value: &Value, at: &str, from: &str) -> Result<Self, String> {
        let Value::Object(phases) = value else {
            return Err(format!(
                "`{at}` must be an object keyed by phase ({}), not {value}",
                Phase::names()
            ));
        };
        let mut parsed = Self::default();
        for (name, groups) in phases {
            let Some(phase) = Phase::parse(name) else {
                let hint = crate::text::did_you_mean(
                    name,
                    PHASES.iter().map(|p| p.as_str()).chain(["after_tool"]),
                );
                return Err(format!(
                    "`{at}`: unknown phase `{name}`{hint} (phases: {})",
                    Phase::names()
                ));
            };
            let Value::Array(groups) = groups else {
                return Err(format!(
                    "`{at}.{name}` must be a list of {{\"matcher\": ..., \"hooks\": [...]}}, not {groups}"
                ));
            };
            let list = parsed.phases.entry(phase).or_default();
            for (index, group) in groups.iter().enumerate() {
                list.push(parse_group(
                    group,
                    &format!("{at}.{name}.{index}"),
                    phase,
                    from,
                )?);
            }
        }
        Ok(parsed)
    }

    /// `later`'s groups after this one's, phase by phase.
    pub fn then(mut self, later: Self) -> Self {
        for (phase, groups) in later.phases {
            self.phases.entry(phase).or_default().extend(groups);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.phases.values().all(Vec::is_empty)
    }

    /// The phases that have hooks.
    pub fn declared(&self) -> impl Iterator<Item = Phase> + '_ {
        self.phases
            .iter()
            .filter(|(_, groups)| !groups.is_empty())
            .map(|(phase, _)| *phase)
    }

    /// The hooks of `phase` whose matcher matches `name` (every group's, when there is no
    /// name to match), in order, each with its group's place.
    pub fn matching<'a>(
        &'a self,
        phase: Phase,
        name: Option<&'a str>,
    ) -> impl Iterator<Item = (usize, &'a HookGroup)> + 'a {
        self.phases
            .get(&phase)
            .into_iter()
            .flat_map(|groups| groups.iter().enumerate())
            .filter(move |(_, group)| name.is_none_or(|name| group.matcher.matches(name)))
    }
}

fn parse_group(group: &Value, at: &str, phase: Phase, from: &str) -> Result<HookGroup, String> {
    let Value::Object(fields) = group else {
        return Err(format!(
            "`{at}` must be {{\"matcher\": ..., \"hooks\": [...]}}, not {group}"
        ));
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !["matcher", "hooks"].contains(&k.as_str()))
    {
        let hint = crate::text::did_you_mean(key, ["matcher", "hooks"]);
        return Err(format!(
            "`{at}`: unknown field `{key}`{hint} (a group has `matcher` and `hooks`)"
        ));
    }
    let matcher_text = match fields.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(format!(
                "`{at}.matcher` must be a string (`Bash|Edit` or a regex), not {other}"
            ));
        }
    };
    if matcher_text.is_some() && !phase.has_matcher() {
        return Err(format!(
            "`{at}.matcher`: phase `{phase}` has no tool name to match; only before_tool and post_tool_use take a matcher"
        ));
    }
    let matcher = match &matcher_text {
        None => Matcher::Any,
        Some(text) => Matcher::parse(text).map_err(|err| format!("`{at}.matcher` {err}"))?,
    };
    let hooks = match fields.get("hooks") {
        Some(Value::Array(hooks)) if !hooks.is_empty() => hooks,
        Some(Value::Array(_)) => {
            return Err(format!("`{at}.hooks` is empty; give at least one hook"));
        }
        None => {
            return Err(format!(
                "`{at}` has no `hooks`: give a list of executor configs"
            ));
        }
        Some(other) => {
            return Err(format!(
                "`{at}.hooks` must be a list of executor configs, not {other}"
            ));
        }
    };
    let hooks = hooks
        .iter()
        .enumerate()
        .map(|(index, hook)| match hook {
            Value::Object(config) => Ok(config.clone()),
            other => Err(format!(
                "`{at}.hooks.{index}` must be an executor config (an object such as {{\"command\": ...}}), not {other}"
            )),
        })
        .collect::<Result<_, _>>()?;
    Ok(HookGroup {
        matcher_text,
        matcher,
        hooks,
        from: from.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matchers_are_names_or_a_regex() {
        let names = Matcher::parse("Bash|Edit, Write").unwrap();
        assert!(names.matches("Bash") && names.matches("Write"));
        assert!(!names.matches("BashOutput"), "names are exact");
        let re = Matcher::parse("mcp__.*").unwrap();
        assert!(re.matches("mcp__github__push") && !re.matches("Bash"));
        assert!(Matcher::parse("*").unwrap().matches("anything"));
        assert!(Matcher::parse("(").unwrap_err().contains("regex"));
    }

    #[test]
    fn groups_compose_in_order_and_errors_name_the_field() {
        let base = RuntimeHooks::parse(
            &json!({"before_tool": [{"matcher": "Bash", "hooks": [{"command": "a"}]}]}),
            "profiles.base.runtime_hooks",
            "profile base",
        )
        .unwrap();
        let own = RuntimeHooks::parse(
            &json!({"after_tool": [{"hooks": [{"command": "b"}]}], "before_tool": [{"hooks": [{"command": "c"}]}]}),
            "runtime_hooks",
            "the agent's config",
        )
        .unwrap();
        let all = base.then(own);
        let before: Vec<&str> = all
            .matching(Phase::BeforeTool, Some("Bash"))
            .map(|(_, g)| g.from.as_str())
            .collect();
        assert_eq!(before, ["profile base", "the agent's config"]);
        assert_eq!(all.matching(Phase::BeforeTool, Some("Edit")).count(), 1);
        assert_eq!(all.matching(Phase::PostToolUse, Some("Edit")).count(), 1);

        let err =
            RuntimeHooks::parse(&json!({"befor_tool": []}), "runtime_hooks", "x").unwrap_err();
        assert!(
            err.contains("unknown phase `befor_tool`; did you mean `before_tool`?"),
            "{err}"
        );
        let ends = RuntimeHooks::parse(
            &json!({"on_complete": [{"hooks": [{"command": "x"}]}], "on_failure": []}),
            "runtime_hooks",
            "x",
        )
        .unwrap();
        assert_eq!(ends.matching(Phase::OnComplete, None).count(), 1);
        assert!(!Phase::OnFailure.from_runtime() && Phase::OnStop.from_runtime());
        let err = RuntimeHooks::parse(
            &json!({"on_stop": [{"matcher": "Bash", "hooks": [{"command": "x"}]}]}),
            "runtime_hooks",
            "x",
        )
        .unwrap_err();
        assert!(err.contains("`runtime_hooks.on_stop.0.matcher`"), "{err}");
        let err = RuntimeHooks::parse(
            &json!({"before_tool": [{"hooks": []}]}),
            "runtime_hooks",
            "x",
        )
        .unwrap_err();
        assert!(
            err.contains("`runtime_hooks.before_tool.0.hooks` is empty"),
            "{err}"
        );
    }
}
