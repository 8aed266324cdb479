//! The event taxonomy: every event Canopy emits, with its family, its typed payload (and the
//! JSON Schema generated from it), the markers it offers hooks, and whether it is sync-eligible.
//!
//! This module is a leaf: it depends on nothing else in Canopy, and every other layer depends on
//! it. One file per family declares that family's events with [`declare_events!`]; adding an
//! event is a payload struct in its family's file plus its emit site.
//!
//! An [`Event`] is a payload made untyped for the feed: its definition, the target and project
//! it is about, and the payload as JSON. The [`Envelope`] the feed stores wraps it with where,
//! when and by whom.

pub mod agent;
pub mod cron;
pub mod graph;
pub mod hook;
pub mod node;
pub mod plugin;
pub mod project;
pub mod session;
pub mod spec;
pub mod tool;
pub mod webhook;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;

/// The families events are grouped in.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Graph definitions and their runs.
    Graph,
    /// Specs: backlog changes, and a spec finishing in a run.
    Spec,
    /// One node of a graph run over one spec.
    Node,
    /// Hook runs ending.
    Hook,
    /// Interactive sessions and the messages typed into them.
    Session,
    /// Executor plugins installed, removed, enabled or disabled.
    Plugin,
    /// Crons firing, ending, missed while the daemon was down.
    Cron,
    /// Inbound webhook deliveries received and handled.
    Webhook,
    /// A project's checkout moving to a new commit, a new tag appearing.
    Project,
    /// An agent Canopy launched, reporting from inside its run (runtime hooks).
    Agent,
    /// A tool call of an agent Canopy launched, before and after it runs (runtime hooks).
    Tool,
}

/// Every family, in the order they are listed.
pub const FAMILIES: [Family; 11] = [
    Family::Graph,
    Family::Spec,
    Family::Node,
    Family::Hook,
    Family::Session,
    Family::Plugin,
    Family::Cron,
    Family::Webhook,
    Family::Project,
    Family::Agent,
    Family::Tool,
];

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Graph => "graph",
            Self::Spec => "spec",
            Self::Node => "node",
            Self::Hook => "hook",
            Self::Session => "session",
            Self::Plugin => "plugin",
            Self::Cron => "cron",
            Self::Webhook => "webhook",
            Self::Project => "project",
            Self::Agent => "agent",
            Self::Tool => "tool",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        FAMILIES.into_iter().find(|f| f.as_str() == text)
    }

    /// The family names, for error messages.
    pub fn names() -> String {
        FAMILIES.map(Self::as_str).join(", ")
    }

    /// The events of this family.
    pub fn events(self) -> &'static [&'static EventDef] {
        match self {
            Self::Graph => graph::EVENTS,
            Self::Spec => spec::EVENTS,
            Self::Node => node::EVENTS,
            Self::Hook => hook::EVENTS,
            Self::Session => session::EVENTS,
            Self::Plugin => plugin::EVENTS,
            Self::Cron => cron::EVENTS,
            Self::Webhook => webhook::EVENTS,
            Self::Project => project::EVENTS,
            Self::Agent => agent::EVENTS,
            Self::Tool => tool::EVENTS,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of the taxonomy.
#[derive(Debug)]
pub struct EventDef {
    /// Dotted name: `graph.run.completed`.
    pub name: &'static str,
    pub family: Family,
    /// What it means and when it is emitted, once.
    pub description: &'static str,
    /// The payload fields a hook config may use as `{{marker}}` (the envelope's markers, see
    /// [`ENVELOPE_MARKERS`], come on top).
    pub markers: &'static [&'static str],
    /// Whether it is asked *before* its action, of sync hooks that allow, deny or patch it
    /// (see `canopy_core::hooks::decide`). Such an event is a question, not a fact: it is
    /// never recorded in the feed, and only sync hooks run on it. Its payload is the action's
    /// input.
    pub sync_eligible: bool,
    /// The payload's JSON Schema.
    pub payload_schema: fn() -> schemars::Schema,
    /// The schema of the patch a sync hook may return, for sync-eligible events that take one.
    /// A patch is checked against this very schema before it is applied.
    pub patch_schema: Option<fn() -> schemars::Schema>,
    /// The graph-hook key that fires on this event, when one does.
    pub graph_hook: Option<&'static crate::hook_keys::GraphHook>,
}

/// A typed payload: the struct that is one event's data.
pub trait Payload: Serialize {
    /// The event this is the payload of.
    const DEF: &'static EventDef;
    /// What the event is about, in a word (a graph's name, a spec's id, a plugin's name).
    fn target(&self) -> Option<String>;
    /// The project (the workdir) the event belongs to, when it belongs to one.
    fn project(&self) -> Option<String>;
    /// What this event gives the graph hooks it fires, when its definition has a graph-hook key
    /// and this occurrence fires it.
    fn graph_firing(&self) -> Option<crate::hook_keys::FiringParts> {
        None
    }
}

/// Declares a family's events: each `Payload type => "name", description, markers` line makes
/// the type an event payload, and `EVENTS` lists the family's definitions in order. An event
/// that graph hooks key on adds `graph_hook: GraphHook { .. }` and `fires: |e| ..`, the parts
/// of a firing its payload gives (`None`: this occurrence fires none).
macro_rules! declare_events {
    (@some) => { None };
    (@some $hook:expr) => { Some(&$hook) };
    (@schema) => { None };
    (@schema $patch:ty) => { Some(|| schemars::schema_for!($patch)) };
    ($family:expr; $( $payload:ty => $name:literal, $sync:literal, $description:literal, [$($marker:literal),* $(,)?], target: |$t:ident| $target:expr, project: |$p:ident| $project:expr $(, graph_hook: $hook:expr, fires: |$f:ident| $fires:expr)? $(, patch: $patch:ty)?; )+) => {
        $(
            impl $crate::events::Payload for $payload {
                const DEF: &'static $crate::events::EventDef = &$crate::events::EventDef {
                    name: $name,
                    family: $family,
                    description: $description,
                    markers: &[$($marker),*],
                    sync_eligible: $sync,
                    payload_schema: || schemars::schema_for!($payload),
                    patch_schema: $crate::events::declare_events!(@schema $($patch)?),
                    graph_hook: $crate::events::declare_events!(@some $($hook)?),
                };
                fn target(&self) -> Option<String> {
                    let $t = self;
                    $target
                }
                fn project(&self) -> Option<String> {
                    let $p = self;
                    $project
                }
                $(
                    fn graph_firing(&self) -> Option<$crate::hook_keys::FiringParts> {
                        let $f = self;
                        $fires
                    }
                )?
            }
        )+
        /// This family's events, in the order they are documented.
        pub const EVENTS: &[&$crate::events::EventDef] = &[
            $( <$payload as $crate::events::Payload>::DEF, )+
        ];
    };
}
pub(crate) use declare_events;

/// Markers every event offers, from its envelope.
pub const ENVELOPE_MARKERS: &[&str] = &["event", "node", "project", "target", "actor", "timestamp"];

/// Every event of the taxonomy, family by family.
pub fn all() -> impl Iterator<Item = &'static EventDef> {
    FAMILIES
        .into_iter()
        .flat_map(|f| f.events().iter().copied())
}

/// The event with this exact name.
pub fn find(name: &str) -> Option<&'static EventDef> {
    all().find(|def| def.name == name)
}

/// An event pattern: an exact name or a glob (`spec.*`, `graph.run.*`, `*`). `*` matches any
/// run of characters, dots included.
#[derive(Debug, Clone)]
pub struct EventPattern {
    text: String,
    pattern: crate::pattern::Pattern,
}

impl EventPattern {
    /// Parses a pattern; it must match at least one event of the taxonomy.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an event pattern cannot be empty".to_string());
        }
        let pattern = Self {
            text: text.to_string(),
            pattern: crate::pattern::Pattern::glob_or_exact(text, &['*', '?', '[', '{'])?,
        };
        if !all().any(|def| pattern.matches(def.name)) {
            return Err(format!(
                "`{text}` matches no event{}; events are named like graph.run.completed or spec.* (`canopy hooks events` lists them)",
                crate::text::did_you_mean(text, all().map(|def| def.name))
            ));
        }
        Ok(pattern)
    }

    pub fn matches(&self, event: &str) -> bool {
        self.pattern.matches(event)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The events of the taxonomy this pattern matches.
    pub fn events(&self) -> impl Iterator<Item = &'static EventDef> + '_ {
        all().filter(|def| self.matches(def.name))
    }
}

/// Who caused an event: the host's user, or one of Canopy's automations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Actor {
    /// A person at the CLI or the API.
    #[default]
    User,
    /// A cron's process: `cron:<name>`.
    Cron(String),
    /// A hook's process: `hook:<name>`.
    Hook(String),
    /// A webhook delivery's handler: `webhook:<scope>/<id>`.
    Webhook(String),
    /// An agent (an MCP client, an agent CLI a node runs).
    Agent,
}

impl Actor {
    /// Parses `user`, `agent`, `cron:<name>`, `hook:<name>` or `webhook:<scope>/<id>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "actor `{text}` is not one of user, agent, cron:<name>, hook:<name>, webhook:<scope>/<id>"
            )
        };
        let named = |rest: &str| -> Result<String, String> {
            let ok = !rest.is_empty()
                && rest.len() <= 200
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:@[]".contains(c));
            ok.then(|| rest.to_string()).ok_or_else(bad)
        };
        match text {
            "user" => Ok(Self::User),
            "agent" => Ok(Self::Agent),
            _ => match text.split_once(':') {
                Some(("cron", rest)) => Ok(Self::Cron(named(rest)?)),
                Some(("hook", rest)) => Ok(Self::Hook(named(rest)?)),
                Some(("webhook", rest)) => Ok(Self::Webhook(named(rest)?)),
                _ => Err(bad()),
            },
        }
    }

    /// True for an automation (a cron, hook or webhook), whose processes carry its identity.
    pub fn is_automation(&self) -> bool {
        matches!(self, Self::Cron(_) | Self::Hook(_) | Self::Webhook(_))
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::User => f.write_str("user"),
            Self::Agent => f.write_str("agent"),
            Self::Cron(name) => write!(f, "cron:{name}"),
            Self::Hook(name) => write!(f, "hook:{name}"),
            Self::Webhook(id) => write!(f, "webhook:{id}"),
        }
    }
}

/// What caused an event: who, and how deep in a chain of hooks it is (an event caused by a
/// hook's process is one deeper than the event that fired the hook).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cause {
    pub actor: Actor,
    pub depth: u32,
}

impl Cause {
    pub fn user() -> Self {
        Self::default()
    }

    /// The cause of the work the current task does: what the request being served said (the
    /// API sets it with [`Cause::scope`]), else the user.
    pub fn current() -> Self {
        CAUSE.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `work` with this as [`Cause::current`].
    pub async fn scope<F: std::future::Future>(self, work: F) -> F::Output {
        CAUSE.scope(self, work).await
    }

    /// The cause of what a hook run by an event at this cause does: the hook's actor, one
    /// level deeper.
    pub fn hook(&self, hook_name: &str) -> Self {
        Self {
            actor: Actor::Hook(hook_name.to_string()),
            depth: self.depth.saturating_add(1),
        }
    }
}

tokio::task_local! {
    static CAUSE: Cause;
}

/// Bytes of an event's payload kept in the feed at most; a larger payload keeps its shape with
/// long strings cut (see [`bound_payload`]).
pub const PAYLOAD_LIMIT: usize = 16 * 1024;

/// An event ready for the feed: its definition, what it is about, its payload as JSON.
#[derive(Debug, Clone)]
pub struct Event {
    pub def: &'static EventDef,
    pub target: Option<String>,
    pub project: Option<String>,
    /// Read it freely; never change it after [`Event::new`]: the feed records `text`, made from
    /// it there.
    pub payload: Value,
    /// The graph hooks it fires, when it fires any (see [`Payload::graph_firing`]).
    pub firing: Option<crate::hook_keys::Firing>,
    /// `payload` as JSON text, as the feed stores it: serialised once, where the event is made
    /// (bounding it measures that text anyway), not again inside the write that records it.
    text: String,
}

impl Event {
    pub fn new<P: Payload>(payload: &P) -> Self {
        let value = serde_json::to_value(payload).unwrap_or_else(|err| {
            // A payload struct of strings and numbers always serialises; keep the event anyway.
            serde_json::json!({ "error": format!("payload not serialisable: {err}") })
        });
        let (value, text) = bounded(value, PAYLOAD_LIMIT);
        let firing = P::DEF.graph_hook.and_then(|hook| {
            payload
                .graph_firing()
                .map(|parts| crate::hook_keys::Firing::new(hook.key, parts))
        });
        Self {
            def: P::DEF,
            target: payload.target(),
            project: payload.project(),
            payload: value,
            firing,
            text,
        }
    }

    pub fn name(&self) -> &'static str {
        self.def.name
    }

    /// The payload as JSON text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A payload no larger than about `limit` bytes as JSON: strings longer than their share are
/// cut with a marker, so the payload keeps its fields and its schema.
pub fn bound_payload(value: Value, limit: usize) -> Value {
    bounded(value, limit).0
}

/// [`bound_payload`], with the bounded payload's JSON text.
fn bounded(value: Value, limit: usize) -> (Value, String) {
    let text = value.to_string();
    if text.len() <= limit {
        return (value, text);
    }
    fn cut(value: Value, each: usize) -> Value {
        match value {
            Value::String(s) if s.len() > each => {
                let mut end = each;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                Value::String(format!("{}… [cut]", &s[..end]))
            }
            Value::Array(items) => Value::Array(items.into_iter().map(|v| cut(v, each)).collect()),
            Value::Object(map) => {
                Value::Object(map.into_iter().map(|(k, v)| (k, cut(v, each))).collect())
            }
            other => other,
        }
    }
    let mut each = limit / 4;
    let mut value = value;
    let mut text = text;
    while each > 16 {
        value = cut(value, each);
        text = value.to_string();
        if text.len() <= limit {
            break;
        }
        each /= 2;
    }
    (value, text)
}

/// One row of the feed: an event with where, when and by whom.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Envelope {
    /// The feed's cursor: increasing, never reused.
    pub id: i64,
    /// The daemon that observed the event.
    pub node: String,
    /// The project (the workdir) the event belongs to, when known.
    pub project: Option<String>,
    /// What the event is about.
    pub target: Option<String>,
    pub event: String,
    pub family: Family,
    /// RFC 3339, UTC.
    pub timestamp: Timestamp,
    /// `user`, `agent`, `cron:<name>`, `hook:<name>` or `webhook:<scope>/<id>`.
    pub actor: String,
    /// How deep in a chain of hooks the event was caused (0: not by a hook).
    pub dispatch_depth: u32,
    pub payload: Value,
}

impl Envelope {
    /// The marker values of this event: the envelope's fields and the payload's scalar fields
    /// (strings as they are, numbers and booleans as text, lists of strings one per line).
    pub fn markers(&self) -> Vec<(String, String)> {
        let mut markers = vec![
            ("event".to_string(), self.event.clone()),
            ("node".to_string(), self.node.clone()),
            ("actor".to_string(), self.actor.clone()),
            ("timestamp".to_string(), self.timestamp.to_string()),
        ];
        if let Some(project) = &self.project {
            markers.push(("project".to_string(), project.clone()));
        }
        if let Some(target) = &self.target {
            markers.push(("target".to_string(), target.clone()));
        }
        if let Value::Object(fields) = &self.payload {
            for (key, value) in fields {
                if let Some(text) = scalar_text(value) {
                    markers.push((key.clone(), text));
                }
            }
        }
        markers
    }
}

/// A payload field as marker text, when it has one.
pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Array(items) if items.iter().all(Value::is_string) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_dotted_and_in_their_family() {
        let mut seen = std::collections::HashSet::new();
        for def in all() {
            assert!(seen.insert(def.name), "{} declared twice", def.name);
            assert!(
                def.name.starts_with(&format!("{}.", def.family)),
                "{} is not in family {}",
                def.name,
                def.family
            );
            let schema = (def.payload_schema)();
            assert!(schema.as_value().is_object(), "{} has a schema", def.name);
            for marker in def.markers {
                let props = schema.as_value()["properties"].as_object();
                assert!(
                    props.is_some_and(|p| p.contains_key(*marker)),
                    "{}: marker {marker} is not a payload field",
                    def.name
                );
            }
        }
    }

    #[test]
    fn patterns_match_globs_and_refuse_what_matches_nothing() {
        let spec = EventPattern::parse("spec.*").unwrap();
        assert!(spec.matches("spec.completed"));
        assert!(!spec.matches("graph.run.completed"));
        let all = EventPattern::parse("*").unwrap();
        assert_eq!(all.events().count(), super::all().count());
        let err = EventPattern::parse("graph.ran").unwrap_err();
        assert!(err.contains("matches no event"), "{err}");
        // A misspelt name is answered with the closest event.
        let err = EventPattern::parse("spec.creatd").unwrap_err();
        assert!(
            err.starts_with("`spec.creatd` matches no event; did you mean `spec.created`?"),
            "{err}"
        );
    }

    #[test]
    fn actors_round_trip_and_refuse_junk() {
        for text in [
            "user",
            "agent",
            "cron:prune",
            "hook:announce",
            "webhook:global/deploy",
        ] {
            assert_eq!(Actor::parse(text).unwrap().to_string(), text);
        }
        assert!(Actor::parse("root").is_err());
        assert!(Actor::parse("hook:").is_err());
        assert!(Actor::parse("hook:a b").is_err());
    }

    #[test]
    fn a_large_payload_is_cut_but_keeps_its_fields() {
        let big = serde_json::json!({ "a": "x".repeat(100_000), "b": 1 });
        let cut = bound_payload(big, 1024);
        assert!(cut.to_string().len() <= 1024);
        assert_eq!(cut["b"], 1);
        assert!(cut["a"].as_str().unwrap().ends_with("[cut]"));
    }

    #[test]
    fn the_text_an_event_is_recorded_with_is_its_bounded_payload() {
        for value in [
            serde_json::json!({ "a": "short", "b": 1 }),
            serde_json::json!({ "a": "x".repeat(100_000), "b": [1, 2] }),
        ] {
            let (bounded, text) = bounded(value, 1024);
            assert!(text.len() <= 1024, "{}", text.len());
            assert_eq!(text, bounded.to_string());
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), bounded);
        }
    }
}
