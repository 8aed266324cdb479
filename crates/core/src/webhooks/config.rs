//! `[webhooks]` and `[projects.NAME.webhooks]` in `canopy.toml`, as written, and [`compile`],
//! which checks them and turns them into [`Hook`]s.
//!
//! ```toml
//! [webhooks]
//! bind_host = "0.0.0.0"            # default 127.0.0.1; the listener is off unless bind_port is set
//! bind_port = 11300                # 0: any free port (written to webhooks.addr in the data dir)
//! token_env = "CANOPY_HOOK_TOKEN"  # a section token: every hook here without its own uses it
//! max_connections = 256            # open at once (default: a quarter of the fd limit, 16 to 1024)
//! max_connections_per_peer = 128   # of one address (default: half of max_connections)
//! header_timeout_secs = 5          # for a request's line and headers, from their first byte
//! idle_timeout_secs = 10           # for an idle connection's next request
//! flood_rate = 640                 # requests/s answered at once past which each hook runs one
//!                                  # handler at a time (0: never)
//!
//! [webhooks.entries.deploy]        # served at /hooks/global/deploy
//! type = "command"                 # spec | command | action | agent | an installed executor mode
//! command = "./deploy.sh"          # as sh -c runs it; the body on stdin and in $CANOPY_HOOK_BODY
//! hmac_secret_file = "secrets/github"   # GitHub's X-Hub-Signature-256, checked over the raw body
//! match = { ref = "refs/heads/main", "header.x-github-event" = "push" }
//! pass_env = { SHA = "after" }     # $CANOPY_HOOK_ARG_SHA from the body's `after`
//! nodes = ["build-1"]              # only this node serves it (and needs its token)
//! ```
//!
//! Nothing here reads a secret: `token_file` and `token_env` are read per request by the
//! listener (see [`Secret::read`]), so a rotated secret needs no restart and a missing file on
//! another node never fails validation here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::rules::{FieldPath, Rule};
use canopy_executors::plugins::{WorkConfig, split_work_config};
use canopy_model::records::webhooks::{AuthMode, Respond, RespondMode};

/// Bodies larger than this are refused with 413 unless a hook sets `max_body_bytes`.
pub const DEFAULT_MAX_BODY: u64 = 1024 * 1024;
/// The largest `max_body_bytes` a hook may set.
pub const MAX_MAX_BODY: u64 = 64 * 1024 * 1024;
/// Handler runs of one hook at once unless it sets `concurrency` (more wait in its queue): four
/// per core of this machine, from 4 to 32. A handler run spends most of its time waiting for
/// its process, so a hook with as many runs as cores leaves the cores idle between them; the
/// handlers run on threads of their own, so more of them do not slow the listener's answers.
pub fn default_concurrency() -> u32 {
    std::thread::available_parallelism()
        .map_or(8, |n| u32::try_from(n.get()).unwrap_or(8).saturating_mul(4))
        .clamp(4, 32)
}
/// The most `webhooks.max_connections` may be.
pub const MAX_CONNECTIONS: u32 = 65_536;
/// `webhooks.header_timeout_secs` unless set.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u32 = 5;
/// `webhooks.idle_timeout_secs` unless set.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u32 = 10;
/// The most `webhooks.header_timeout_secs` may be.
pub const MAX_HEADER_TIMEOUT_SECS: u32 = 3_600;
/// The most a hook's `concurrency` may be.
pub const MAX_CONCURRENCY: u32 = 256;
/// The deadline of a handler run unless the hook sets `timeout_secs`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Headers a request may have recorded and passed to its handler, at most.
pub const MAX_PASS_HEADERS: usize = 32;
/// Headers that carry credentials: never matched, recorded or passed to a handler.
/// (`X-Gitlab-Token` is not one: a rule may compare it, as configs did before the `gitlab`
/// provider; its value is never recorded, as every header named like a credential.)
pub const AUTH_HEADERS: [&str; 8] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-canopy-hook-token",
    "x-hub-signature",
    "x-hub-signature-256",
    "x-slack-signature",
    "stripe-signature",
];
/// How long a sender's delivery id is remembered unless `dedup_window_secs` says: a day covers
/// a sender's automatic retries and a person's redelivery from its settings page.
pub const DEFAULT_DEDUP_WINDOW_SECS: u64 = 86_400;
/// The longest delivery id remembered; a longer header value is not an id (and is not used).
pub const MAX_DELIVERY_ID: usize = 200;

/// Whose signature a hook's sender secret checks, and whose delivery-id header it
/// deduplicates by (`provider = "github"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// `X-Hub-Signature-256: sha256=<HMAC of the body>`; deliveries by `X-GitHub-Delivery`.
    #[default]
    Github,
    /// `X-Gitlab-Token: <the secret>`; deliveries by `X-Gitlab-Event-UUID`.
    Gitlab,
    /// `X-Slack-Signature: v0=<HMAC of v0:<timestamp>:<body>>`, the timestamp in
    /// `X-Slack-Request-Timestamp` within five minutes.
    Slack,
    /// `Stripe-Signature: t=<timestamp>,v1=<HMAC of <timestamp>.<body>>`, within five minutes.
    Stripe,
}

impl Provider {
    pub const NAMES: [&str; 4] = ["github", "gitlab", "slack", "stripe"];

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "github" => Some(Self::Github),
            "gitlab" => Some(Self::Gitlab),
            "slack" => Some(Self::Slack),
            "stripe" => Some(Self::Stripe),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Github => "github",
            Self::Gitlab => "gitlab",
            Self::Slack => "slack",
            Self::Stripe => "stripe",
        }
    }

    /// The header its signature (or, for GitLab, its secret) comes in, lowercase.
    pub fn signature_header(self) -> &'static str {
        match self {
            Self::Github => "x-hub-signature-256",
            Self::Gitlab => "x-gitlab-token",
            Self::Slack => "x-slack-signature",
            Self::Stripe => "stripe-signature",
        }
    }

    /// The header naming each delivery, which a retry or a redelivery repeats, when the sender
    /// has one.
    pub fn delivery_header(self) -> Option<&'static str> {
        match self {
            Self::Github => Some("x-github-delivery"),
            Self::Gitlab => Some("x-gitlab-event-uuid"),
            Self::Slack | Self::Stripe => None,
        }
    }
}

/// A hook's memory of its sender's delivery ids: a delivery whose id was seen within `window`
/// is answered with the first one's id and status, and not run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// Lowercase.
    pub header: String,
    pub window: Duration,
}
/// Headers recorded with every delivery (when present), besides a hook's `pass_headers`.
pub const DEFAULT_HEADERS: [&str; 6] = [
    "content-type",
    "user-agent",
    "x-github-event",
    "x-github-delivery",
    "x-gitlab-event",
    "x-request-id",
];

/// The top-level `[webhooks]` section.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    /// The listener's address: an IP address or `localhost` (default 127.0.0.1).
    pub bind_host: Option<String>,
    /// The listener's port; no port, no listener. 0 takes any free one.
    pub bind_port: Option<u16>,
    /// Days a finished delivery is kept (default 30).
    pub keep_days: Option<u32>,
    /// Connections the listener keeps open at once (default: a quarter of the daemon's file
    /// descriptor limit, from 16 to 1024); more wait to be accepted.
    pub max_connections: Option<u32>,
    /// Seconds a request's line and headers may take once their first byte arrived (default 5).
    pub header_timeout_secs: Option<u32>,
    /// Seconds an idle connection may wait for its next request (default 10).
    pub idle_timeout_secs: Option<u32>,
    /// Connections one peer address may hold at once (default: half of `max_connections`).
    /// Behind a proxy every connection comes from its address: set it to `max_connections`.
    pub max_connections_per_peer: Option<u32>,
    /// Requests a second answered at once (202, nobody waiting) past which the listener is
    /// taking in a flood, and each hook runs one handler at a time until it ends (default
    /// 640; 0: never).
    pub flood_rate: Option<u32>,
    /// The bearer token itself (prefer `token_env` or `token_file`).
    #[serde(default, skip_serializing)]
    pub token: Option<Redacted>,
    /// The environment variable holding the token (read per request).
    pub token_env: Option<String>,
    /// The file holding the token, relative to the data dir (read per request).
    pub token_file: Option<PathBuf>,
    /// GitHub-style HMAC secret (`X-Hub-Signature-256` over the raw body).
    #[serde(default, skip_serializing)]
    pub hmac_secret: Option<Redacted>,
    pub hmac_secret_env: Option<String>,
    pub hmac_secret_file: Option<PathBuf>,
    /// Global hooks, served at `/hooks/global/<id>`.
    #[serde(default)]
    pub entries: BTreeMap<String, WebhookEntry>,
}

/// A project's `webhooks` section, served under `/hooks/<project>/`.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectWebhooks {
    /// The bearer token itself (prefer `token_env` or `token_file`).
    #[serde(default, skip_serializing)]
    pub token: Option<Redacted>,
    /// The environment variable holding the token (read per request).
    pub token_env: Option<String>,
    /// The file holding the token, relative to the data dir (read per request).
    pub token_file: Option<PathBuf>,
    /// GitHub-style HMAC secret (`X-Hub-Signature-256` over the raw body).
    #[serde(default, skip_serializing)]
    pub hmac_secret: Option<Redacted>,
    pub hmac_secret_env: Option<String>,
    pub hmac_secret_file: Option<PathBuf>,
    #[serde(default)]
    pub entries: BTreeMap<String, WebhookEntry>,
}

/// Where a token and an HMAC secret come from; each from at most one source.
#[derive(Debug, Clone, Copy)]
pub struct AuthConfig<'a> {
    pub token: Option<&'a str>,
    pub token_env: Option<&'a str>,
    pub token_file: Option<&'a Path>,
    pub hmac_secret: Option<&'a str>,
    pub hmac_secret_env: Option<&'a str>,
    pub hmac_secret_file: Option<&'a Path>,
}

/// The auth fields of a section or an entry, as an [`AuthConfig`].
macro_rules! auth_of {
    ($($t:ty),*) => {$(
        impl $t {
            /// Its token and HMAC secret fields.
            pub fn auth(&self) -> AuthConfig<'_> {
                AuthConfig {
                    token: self.token.as_ref().map(|t| t.0.as_str()),
                    token_env: self.token_env.as_deref(),
                    token_file: self.token_file.as_deref(),
                    hmac_secret: self.hmac_secret.as_ref().map(|t| t.0.as_str()),
                    hmac_secret_env: self.hmac_secret_env.as_deref(),
                    hmac_secret_file: self.hmac_secret_file.as_deref(),
                }
            }
        }
    )*};
}
auth_of!(WebhooksConfig, ProjectWebhooks, WebhookEntry);

/// One `entries.<id>` table as written.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookEntry {
    /// `spec`, `command`, `action`, `agent`, or an installed executor mode.
    #[serde(rename = "type")]
    pub kind: String,
    /// The bearer token itself (prefer `token_env` or `token_file`).
    #[serde(default, skip_serializing)]
    pub token: Option<Redacted>,
    /// The environment variable holding the token (read per request).
    pub token_env: Option<String>,
    /// The file holding the token, relative to the data dir (read per request).
    pub token_file: Option<PathBuf>,
    /// The sender's secret: it signs each body (`X-Hub-Signature-256` unless `provider` says
    /// otherwise; GitLab sends it as `X-Gitlab-Token`).
    #[serde(default, skip_serializing)]
    pub hmac_secret: Option<Redacted>,
    pub hmac_secret_env: Option<String>,
    pub hmac_secret_file: Option<PathBuf>,
    /// `github` (default), `gitlab`, `slack` or `stripe`: how the sender signs its bodies and
    /// which header names its deliveries.
    pub provider: Option<String>,
    /// `token` (default: a bearer token is required) or `signature`: the sender's signature
    /// alone authenticates the request (GitHub and the others cannot send a token).
    pub auth: Option<String>,
    /// The header naming each delivery (default: the provider's, `X-GitHub-Delivery` for
    /// GitHub): a delivery whose id was seen within `dedup_window_secs` is not run again.
    pub dedup_header: Option<String>,
    /// How long a delivery id is remembered (default a day).
    pub dedup_window_secs: Option<u64>,
    /// Only these nodes serve the hook (default: every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Trigger rules on the body, headers and query (see [`Rule`]).
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matcher: Option<Value>,
    /// `NAME = "body.field"`: `$CANOPY_HOOK_ARG_NAME` for the handler.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_env: BTreeMap<String, String>,
    /// Request headers recorded and passed as `$CANOPY_HOOK_HEADER_<NAME>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_headers: Vec<String>,
    /// `"async"` (default: 202 at once), `"sync"` (wait for the handler), or a table
    /// `{ mode, status, output }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respond: Option<Value>,
    pub max_body_bytes: Option<u64>,
    /// Handler runs at once; more wait in the hook's queue.
    pub concurrency: Option<u32>,
    pub timeout_secs: Option<u64>,
    /// `spec`: the JSON body field holding the spec's name (default: the hook and delivery).
    pub title_from: Option<String>,
    /// `spec`: the JSON body field holding the spec's body (default: the whole body).
    pub body_from: Option<String>,
    /// `spec`: the queue (name or id) the new spec joins.
    pub queue: Option<String>,
    /// A global `spec` hook: the project whose checkout tags the spec.
    pub project: Option<String>,
    /// `command`: the shell command.
    pub command: Option<String>,
    /// Where the handler runs (default: the project's checkout, else the data dir).
    pub cwd: Option<PathBuf>,
    /// `action`: the name of an `[actions.NAME]` table.
    pub action: Option<String>,
    /// `agent` or an installed mode: the executor's config (`platform`, `prompt`, ...);
    /// `{{body}}` and the other webhook markers render in its template fields.
    pub config: Option<Map<String, Value>>,
}

/// A secret written inline in `canopy.toml`: `Debug` never shows it, and it is never serialized.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Redacted(String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(redacted)")
    }
}

/// A secret's source. Never printed: `Debug` and [`Secret::describe`] name the source only.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    Inline(Arc<str>),
    Env(String),
    /// Absolute, or relative to the data dir.
    File(PathBuf),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A secret that could not be read (logged without the secret; the client sees only 401).
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("environment variable {0} is not set")]
    EnvMissing(String),
    #[error("cannot read {path}: {err}")]
    File { path: String, err: std::io::Error },
    #[error("{0} is empty")]
    Empty(String),
}

impl Secret {
    /// Where it comes from, for listings: `inline (redacted)`, `env NAME`, `file PATH`.
    pub fn describe(&self) -> String {
        match self {
            Self::Inline(_) => "inline (redacted)".to_string(),
            Self::Env(name) => format!("env {name}"),
            Self::File(path) => format!("file {}", path.display()),
        }
    }

    /// Reads it now (a file relative to `base`), trimmed of surrounding whitespace.
    pub fn read(&self, base: &Path) -> Result<Vec<u8>, SecretError> {
        let value = match self {
            Self::Inline(value) => value.as_bytes().to_vec(),
            Self::Env(name) => std::env::var_os(name)
                .ok_or_else(|| SecretError::EnvMissing(name.clone()))?
                .into_encoded_bytes(),
            Self::File(path) => {
                let full = base.join(path);
                std::fs::read(&full).map_err(|err| SecretError::File {
                    path: full.display().to_string(),
                    err,
                })?
            }
        };
        let trimmed = value.trim_ascii();
        if trimmed.is_empty() {
            return Err(SecretError::Empty(self.describe()));
        }
        // Known from now on: a handler printing it has it masked in the record.
        if let Ok(text) = std::str::from_utf8(trimmed) {
            canopy_executors::secrets::register(text);
        }
        Ok(trimmed.to_vec())
    }
}

/// What a hook's handler does.
#[derive(Debug, Clone)]
pub enum Handler {
    /// The body (or a field of it) becomes a backlog spec.
    Spec {
        title_from: Option<FieldPath>,
        body_from: Option<FieldPath>,
        queue: Option<String>,
        /// The workdir tag of the spec (the project's checkout).
        workdir: Option<PathBuf>,
    },
    /// An executor call: `command`, a named `action`, `agent`, or an installed mode.
    Work {
        work: WorkConfig,
        /// The command runs with the body file on stdin (`command` mode).
        stdin: bool,
    },
}

/// A checked hook.
#[derive(Debug, Clone)]
pub struct Hook {
    /// `global` or the project's name.
    pub scope: String,
    pub id: String,
    /// `webhooks.entries.<id>` or `projects.<p>.webhooks.entries.<id>`.
    pub toml_path: String,
    /// The handler kind (`type`; `bash` is read as `command`).
    pub kind: String,
    pub entry: WebhookEntry,
    /// Whether this node serves it (its `nodes` filter).
    pub served: bool,
    pub token: Option<Secret>,
    pub hmac: Option<Secret>,
    pub provider: Provider,
    pub auth: AuthMode,
    pub dedup: Option<Dedup>,
    pub rule: Option<Rule>,
    pub pass_env: Vec<(String, FieldPath)>,
    /// Lowercase names of the headers recorded and passed.
    pub headers: Vec<String>,
    pub respond: Respond,
    pub max_body: usize,
    pub concurrency: usize,
    pub timeout: Duration,
    pub handler: Handler,
    /// Where the handler runs, when the hook or its project says.
    pub workdir: Option<PathBuf>,
    /// The project's checkout, for a project's hook.
    pub project: Option<String>,
}

impl Hook {
    /// `scope/id`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.scope, self.id)
    }

    /// The URL path it is served at.
    pub fn url_path(&self) -> String {
        format!("/hooks/{}/{}", self.scope, self.id)
    }
}

/// The compiled `[webhooks]` of one configuration.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    /// `host:port` to listen on, when the listener is on.
    pub bind: Option<(String, u16)>,
    pub keep_days: u32,
    /// Connections the listener keeps open at once.
    pub max_connections: usize,
    /// How long a request's line and headers may take once their first byte arrived.
    pub header_timeout: Duration,
    /// How long an idle connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Connections one peer address may hold at once.
    pub max_per_peer: usize,
    /// Requests a second answered at once that make a flood (see [`super::flood`]); 0: none.
    pub flood_rate: u32,
    /// Every hook, served here or not, in `scope/id` order.
    pub hooks: BTreeMap<(String, String), Arc<Hook>>,
}

impl Webhooks {
    /// Whether `other` has the same listener settings (its address, connection limits,
    /// flood rate): those are read at start only.
    pub fn same_listener(&self, other: &Webhooks) -> bool {
        self.bind == other.bind
            && self.max_connections == other.max_connections
            && self.header_timeout == other.header_timeout
            && self.idle_timeout == other.idle_timeout
            && self.max_per_peer == other.max_per_peer
            && self.flood_rate == other.flood_rate
    }
}

/// Checks the webhook sections; every problem with its TOML path.
pub fn check(config: &crate::config::Config) -> Vec<String> {
    compile(config).err().unwrap_or_default()
}

/// Checks every executor handler against its plugin, as a delivery would run it (markers only
/// where the mode renders them, only the webhook markers, none inside quotes of a shell line).
pub async fn check_actions(
    plugins: &canopy_executors::plugins::PluginHost,
    webhooks: &Webhooks,
) -> Vec<String> {
    let mut problems = Vec::new();
    for hook in webhooks.hooks.values() {
        if let Handler::Work { work, .. } = &hook.handler
            && let Err(err) = plugins.validate(work, super::run::WEBHOOK_MARKERS).await
        {
            problems.push(format!("{}: {err}", hook.toml_path));
        }
    }
    problems
}

/// Checks and compiles every hook. Reads no secret.
pub fn compile(config: &crate::config::Config) -> Result<Webhooks, Vec<String>> {
    let mut problems = Vec::new();
    let node = config.node_name();
    let section = &config.webhooks;
    let bind = match (&section.bind_host, section.bind_port) {
        (host, Some(port)) => {
            let host = host.clone().unwrap_or_else(|| "127.0.0.1".to_string());
            if host != "localhost" && host.parse::<std::net::IpAddr>().is_err() {
                problems.push(format!(
                    "webhooks.bind_host: `{host}` is not an IP address or `localhost` (0.0.0.0 serves every interface)"
                ));
            }
            Some((host, port))
        }
        (Some(_), None) => {
            problems.push(
                "webhooks.bind_host: set bind_port too (the listener is off without a port)"
                    .to_string(),
            );
            None
        }
        (None, None) => None,
    };
    let keep_days = section.keep_days.unwrap_or(30);
    if !(1..=36_500).contains(&keep_days) {
        problems.push("webhooks.keep_days: must be from 1 to 36500".to_string());
    }
    let flood_rate = section.flood_rate.unwrap_or(super::flood::DEFAULT_RATE);
    if flood_rate > super::flood::MAX_RATE {
        problems.push(format!(
            "webhooks.flood_rate: must be from 0 (never) to {} requests a second",
            super::flood::MAX_RATE
        ));
    }
    let max_connections = section
        .max_connections
        .unwrap_or_else(crate::config::default_max_connections);
    if !(1..=MAX_CONNECTIONS).contains(&max_connections) {
        problems.push(format!(
            "webhooks.max_connections: must be from 1 to {MAX_CONNECTIONS}"
        ));
    }
    let header_timeout_secs = section
        .header_timeout_secs
        .unwrap_or(DEFAULT_HEADER_TIMEOUT_SECS);
    if !(1..=MAX_HEADER_TIMEOUT_SECS).contains(&header_timeout_secs) {
        problems.push(format!(
            "webhooks.header_timeout_secs: must be from 1 to {MAX_HEADER_TIMEOUT_SECS}"
        ));
    }
    let idle_timeout_secs = section
        .idle_timeout_secs
        .unwrap_or(DEFAULT_IDLE_TIMEOUT_SECS);
    if !(1..=MAX_HEADER_TIMEOUT_SECS).contains(&idle_timeout_secs) {
        problems.push(format!(
            "webhooks.idle_timeout_secs: must be from 1 to {MAX_HEADER_TIMEOUT_SECS}"
        ));
    }
    let max_per_peer = section
        .max_connections_per_peer
        .unwrap_or_else(|| (max_connections / 2).max(1));
    if !(1..=max_connections.max(1)).contains(&max_per_peer) {
        problems.push(format!(
            "webhooks.max_connections_per_peer: must be from 1 to max_connections ({max_connections})"
        ));
    }
    let mut hooks = BTreeMap::new();
    let global = secrets("webhooks", section.auth(), &mut problems);
    for (id, entry) in &section.entries {
        let at = format!("webhooks.entries.{id}");
        if let Some(hook) = compile_one(
            config,
            &node,
            "global",
            id,
            &at,
            entry,
            &global,
            None,
            &mut problems,
        ) {
            hooks.insert(("global".to_string(), id.clone()), Arc::new(hook));
        }
    }
    for (name, project) in &config.projects {
        let section = &project.webhooks;
        if section.entries.is_empty() {
            continue;
        }
        let base = format!("projects.{name}.webhooks");
        if name == "global" || !crate::node::is_name(name) {
            problems.push(format!(
                "projects.{name}: a project with webhooks needs a name of letters, digits, `-`, `_`, `.` other than `global` (it is a URL segment)"
            ));
            continue;
        }
        let own = secrets(&base, section.auth(), &mut problems);
        let checkout = project
            .checkout
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        for (id, entry) in &section.entries {
            let at = format!("{base}.entries.{id}");
            if let Some(hook) = compile_one(
                config,
                &node,
                name,
                id,
                &at,
                entry,
                &own,
                checkout.clone(),
                &mut problems,
            ) {
                hooks.insert((name.clone(), id.clone()), Arc::new(hook));
            }
        }
    }
    if problems.is_empty() {
        Ok(Webhooks {
            bind,
            keep_days,
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            header_timeout: Duration::from_secs(u64::from(header_timeout_secs)),
            idle_timeout: Duration::from_secs(u64::from(idle_timeout_secs)),
            max_per_peer: usize::try_from(max_per_peer).unwrap_or(usize::MAX),
            flood_rate,
            hooks,
        })
    } else {
        Err(problems)
    }
}

/// A section's (or hook's) token and HMAC secret sources, each checked to be one at most.
fn secrets(
    at: &str,
    auth: AuthConfig<'_>,
    problems: &mut Vec<String>,
) -> (Option<Secret>, Option<Secret>) {
    let token = one_source(
        at,
        "token",
        auth.token,
        auth.token_env,
        auth.token_file,
        problems,
    );
    let hmac = one_source(
        at,
        "hmac_secret",
        auth.hmac_secret,
        auth.hmac_secret_env,
        auth.hmac_secret_file,
        problems,
    );
    (token, hmac)
}

fn one_source(
    at: &str,
    name: &str,
    inline: Option<&str>,
    env: Option<&str>,
    file: Option<&Path>,
    problems: &mut Vec<String>,
) -> Option<Secret> {
    let set = [inline.is_some(), env.is_some(), file.is_some()]
        .iter()
        .filter(|s| **s)
        .count();
    if set > 1 {
        problems.push(format!(
            "{at}: set exactly one of {name}, {name}_env or {name}_file (several are set)"
        ));
        return None;
    }
    if let Some(value) = inline {
        if value.trim().is_empty() {
            problems.push(format!("{at}.{name}: must not be empty"));
            return None;
        }
        return Some(Secret::Inline(Arc::from(value.trim())));
    }
    if let Some(var) = env {
        if !canopy_model::text::is_env_name(var) {
            problems.push(format!(
                "{at}.{name}_env: `{var}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
            ));
            return None;
        }
        return Some(Secret::Env(var.to_string()));
    }
    if let Some(path) = file {
        if path.as_os_str().is_empty() {
            problems.push(format!(
                "{at}.{name}_file: must name a file (absolute, or relative to the data dir)"
            ));
            return None;
        }
        return Some(Secret::File(path.to_path_buf()));
    }
    None
}

fn field_path(at: &str, text: &str, problems: &mut Vec<String>) -> Option<FieldPath> {
    FieldPath::parse(text)
        .map_err(|err| problems.push(format!("{at}: {err}")))
        .ok()
}

/// The handler kinds a hook may name besides an installed executor mode.
pub const HANDLER_KINDS: [&str; 4] = ["spec", "command", "action", "agent"];

#[allow(clippy::too_many_arguments)]
fn compile_one(
    config: &crate::config::Config,
    node: &str,
    scope: &str,
    id: &str,
    at: &str,
    entry: &WebhookEntry,
    section: &(Option<Secret>, Option<Secret>),
    project: Option<String>,
    problems: &mut Vec<String>,
) -> Option<Hook> {
    let before = problems.len();
    let field = |name: &str| format!("{at}.{name}");
    if !crate::node::is_name(id) {
        problems.push(format!(
            "{at}: `{id}` is not a hook id (ASCII letters, digits, `-`, `_`, `.`; at most 100)"
        ));
    }
    for (i, name) in entry.nodes.iter().enumerate() {
        if !crate::node::is_name(name) {
            problems.push(format!(
                "{}: `{name}` is not a node name",
                field(&format!("nodes[{i}]"))
            ));
        }
    }
    let served = entry.nodes.is_empty() || entry.nodes.iter().any(|n| n == node);
    let (own_token, own_hmac) = secrets(at, entry.auth(), problems);
    let token = own_token.or_else(|| section.0.clone());
    let hmac = own_hmac.or_else(|| section.1.clone());
    let provider = match entry.provider.as_deref() {
        None => Provider::default(),
        Some(name) => Provider::parse(name).unwrap_or_else(|| {
            problems.push(format!(
                "{}: `{name}` is not a provider; the providers: {}",
                field("provider"),
                Provider::NAMES.join(", ")
            ));
            Provider::default()
        }),
    };
    let auth = match entry.auth.as_deref() {
        None | Some("token") => AuthMode::Token,
        Some("signature") => AuthMode::Signature,
        Some(other) => {
            problems.push(format!(
                "{}: `{other}` is not an auth mode; use `token` (a bearer token) or `signature` (the sender's signature alone)",
                field("auth")
            ));
            AuthMode::Token
        }
    };
    if auth == AuthMode::Signature && hmac.is_none() {
        problems.push(format!(
            "{}: `signature` needs the sender's secret: set exactly one of hmac_secret, hmac_secret_env or hmac_secret_file",
            field("auth")
        ));
    }
    let dedup_header = match &entry.dedup_header {
        Some(name) => {
            let lower = name.to_ascii_lowercase();
            if http::HeaderName::from_bytes(lower.as_bytes()).is_err() || lower.is_empty() {
                problems.push(format!(
                    "{}: `{name}` is not a header name",
                    field("dedup_header")
                ));
            } else if AUTH_HEADERS.contains(&lower.as_str()) || super::auth::looks_secret(&lower) {
                // Its value is stored with every delivery: a credential must never be.
                problems.push(format!(
                    "{}: `{name}` carries credentials, and a delivery id is recorded; name the header that identifies each delivery (`X-GitHub-Delivery`, `X-Request-Id`)",
                    field("dedup_header")
                ));
            }
            Some(lower)
        }
        None => provider.delivery_header().map(str::to_string),
    };
    let window = entry.dedup_window_secs.unwrap_or(DEFAULT_DEDUP_WINDOW_SECS);
    if !(1..=366 * 86_400).contains(&window) {
        problems.push(format!(
            "{}: {window} is out of range; from 1 to 31622400 (366 days)",
            field("dedup_window_secs")
        ));
    }
    let dedup = dedup_header.map(|header| Dedup {
        header,
        window: Duration::from_secs(window),
    });
    if served && token.is_none() && auth == AuthMode::Token && problems.len() == before {
        problems.push(format!(
            "{at}: no token: set exactly one of token, token_env or token_file here or in its section, or `auth = \"signature\"` with the sender's secret (this node, `{node}`, serves the hook; `nodes` narrows which nodes do)"
        ));
    }
    let rule = entry.matcher.as_ref().and_then(|value| {
        Rule::parse(value)
            .map_err(|err| problems.push(format!("{}{err}", field("match"))))
            .ok()
    });
    let mut pass_env = Vec::new();
    for (name, path) in &entry.pass_env {
        if !canopy_model::text::is_env_name(name) {
            problems.push(format!(
                "{}: `{name}` is not an environment variable name (it becomes CANOPY_HOOK_ARG_{name})",
                field("pass_env")
            ));
            continue;
        }
        if let Some(path) = field_path(&field(&format!("pass_env.{name}")), path, problems) {
            pass_env.push((name.to_ascii_uppercase(), path));
        }
    }
    let mut headers: Vec<String> = DEFAULT_HEADERS.iter().map(|h| (*h).to_string()).collect();
    for (i, name) in entry.pass_headers.iter().enumerate() {
        let lower = name.to_ascii_lowercase();
        if AUTH_HEADERS.contains(&lower.as_str()) {
            problems.push(format!(
                "{}: `{name}` carries credentials; it is never recorded or passed",
                field(&format!("pass_headers[{i}]"))
            ));
        } else if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            problems.push(format!(
                "{}: `{name}` is not a header name",
                field(&format!("pass_headers[{i}]"))
            ));
        } else if !headers.contains(&lower) {
            headers.push(lower);
        }
    }
    if headers.len() > MAX_PASS_HEADERS {
        problems.push(format!(
            "{}: at most {MAX_PASS_HEADERS} headers in all",
            field("pass_headers")
        ));
    }
    let respond = entry
        .respond
        .as_ref()
        .map_or(Ok(Respond::default()), parse_respond)
        .map_err(|err| problems.push(format!("{}: {err}", field("respond"))))
        .unwrap_or_default();
    let max_body = entry.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY);
    if !(1..=MAX_MAX_BODY).contains(&max_body) {
        problems.push(format!(
            "{}: must be from 1 to {MAX_MAX_BODY} (64 MiB)",
            field("max_body_bytes")
        ));
    }
    let concurrency = entry.concurrency.unwrap_or_else(default_concurrency);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        problems.push(format!(
            "{}: must be from 1 to {MAX_CONCURRENCY}",
            field("concurrency")
        ));
    }
    let max_timeout = canopy_executors::plugins::MAX_TIMEOUT.as_secs();
    let timeout = match entry.timeout_secs {
        Some(secs) if !(1..=max_timeout).contains(&secs) => {
            problems.push(format!(
                "{}: must be from 1 to {max_timeout} (7 days)",
                field("timeout_secs")
            ));
            DEFAULT_TIMEOUT
        }
        Some(secs) => Duration::from_secs(secs),
        None => DEFAULT_TIMEOUT,
    };
    // The fields each handler kind takes; any other handler field set is a mistake.
    let set: Vec<&str> = [
        ("title_from", entry.title_from.is_some()),
        ("body_from", entry.body_from.is_some()),
        ("queue", entry.queue.is_some()),
        ("project", entry.project.is_some()),
        ("command", entry.command.is_some()),
        ("action", entry.action.is_some()),
        ("config", entry.config.is_some()),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| name)
    .collect();
    // `bash` is the shell handler's other name: a `command` hook (run through `sh -c`).
    let kind = match entry.kind.as_str() {
        "bash" => "command",
        other => other,
    };
    let allowed: &[&str] = match kind {
        "spec" => &["title_from", "body_from", "queue", "project"],
        "command" => &["command"],
        "action" => &["action"],
        _ => &["config"],
    };
    for name in set.iter().filter(|n| !allowed.contains(n)) {
        problems.push(format!(
            "{}: not a field of a `{}` hook; it takes {}",
            field(name),
            entry.kind,
            allowed.join(", ")
        ));
    }
    let mut workdir = entry
        .cwd
        .clone()
        .or_else(|| project.as_ref().map(PathBuf::from));
    if let Some(cwd) = &entry.cwd
        && !cwd.is_absolute()
    {
        problems.push(format!("{}: must be an absolute path", field("cwd")));
    }
    let handler = match kind {
        "spec" => {
            let title_from = entry
                .title_from
                .as_deref()
                .and_then(|p| field_path(&field("title_from"), p, problems));
            let body_from = entry
                .body_from
                .as_deref()
                .and_then(|p| field_path(&field("body_from"), p, problems));
            let spec_workdir = match (&entry.project, &project) {
                (Some(name), _) => match config.projects.get(name) {
                    Some(p) => p.checkout.clone(),
                    None => {
                        problems.push(format!(
                            "{}: no [projects.{name}] is configured",
                            field("project")
                        ));
                        None
                    }
                },
                (None, Some(checkout)) => Some(PathBuf::from(checkout)),
                (None, None) => None,
            };
            if entry.queue.as_deref().is_some_and(|q| q.trim().is_empty()) {
                problems.push(format!("{}: must name a queue", field("queue")));
            }
            Some(Handler::Spec {
                title_from,
                body_from,
                queue: entry.queue.clone(),
                workdir: spec_workdir,
            })
        }
        "command" => match entry.command.as_deref() {
            Some(command) if !command.trim().is_empty() => {
                let mut map = Map::new();
                map.insert("command".to_string(), Value::String(command.to_string()));
                work_of(&field("command"), &map, timeout, problems)
                    .map(|work| Handler::Work { work, stdin: true })
            }
            _ => {
                problems.push(format!(
                    "{}: a `command` hook needs a shell command",
                    field("command")
                ));
                None
            }
        },
        "action" => match entry.action.as_deref() {
            Some(name) => match config.actions.get(name) {
                Some(action) => {
                    let stdin = action.contains_key("command")
                        && action
                            .get("mode")
                            .is_none_or(|m| m.as_str() == Some("command"));
                    work_of(&format!("actions.{name}"), action, timeout, problems)
                        .map(|work| Handler::Work { work, stdin })
                }
                None => {
                    let known: Vec<&str> = config.actions.keys().map(String::as_str).collect();
                    problems.push(format!(
                        "{}: no [actions.{name}]; configured actions: {}",
                        field("action"),
                        if known.is_empty() {
                            "(none)".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                    None
                }
            },
            None => {
                problems.push(format!(
                    "{}: an `action` hook names an [actions.NAME] table",
                    field("action")
                ));
                None
            }
        },
        "" => {
            problems.push(format!(
                "{}: must be one of {}, or an installed executor mode",
                field("type"),
                HANDLER_KINDS.join(", ")
            ));
            None
        }
        mode => match &entry.config {
            Some(map) => {
                let mut map = map.clone();
                if mode != "agent" || map.contains_key("mode") {
                    map.insert("mode".to_string(), Value::String(mode.to_string()));
                }
                let stdin = mode == "command" && map.contains_key("command");
                work_of(&field("config"), &map, timeout, problems)
                    .map(|work| Handler::Work { work, stdin })
            }
            None => {
                problems.push(format!(
                    "{}: a `{mode}` hook needs its executor's config (an `agent` hook: {{ platform = \"claude\", prompt = \"... {{{{body}}}}\" }})",
                    field("config")
                ));
                None
            }
        },
    };
    if kind == "spec" {
        workdir = None;
    }
    if problems.len() > before {
        return None;
    }
    Some(Hook {
        scope: scope.to_string(),
        id: id.to_string(),
        toml_path: at.to_string(),
        kind: kind.to_string(),
        entry: entry.clone(),
        served,
        token,
        hmac,
        provider,
        auth,
        dedup,
        rule,
        pass_env,
        headers,
        respond,
        max_body: usize::try_from(max_body).unwrap_or(usize::MAX),
        concurrency: usize::try_from(concurrency).unwrap_or(1),
        timeout,
        handler: handler?,
        workdir,
        project,
    })
}

/// The executor work of a handler; its deadline is the hook's unless the config names one.
fn work_of(
    at: &str,
    map: &Map<String, Value>,
    timeout: Duration,
    problems: &mut Vec<String>,
) -> Option<WorkConfig> {
    let mut map = map.clone();
    if !map.contains_key("timeout_seconds") && !map.contains_key("timeout_minutes") {
        map.insert(
            "timeout_seconds".to_string(),
            Value::from(timeout.as_secs()),
        );
    }
    split_work_config(&map)
        .map_err(|err| problems.push(format!("{at}: {err}")))
        .ok()
}

fn parse_respond(value: &Value) -> Result<Respond, String> {
    let mode = |text: &str| match text {
        "async" => Ok(RespondMode::Async),
        "sync" => Ok(RespondMode::Sync),
        other => Err(format!("`{other}` is not async or sync")),
    };
    match value {
        Value::String(text) => Ok(Respond {
            mode: mode(text)?,
            ..Respond::default()
        }),
        Value::Object(table) => {
            let mut respond = Respond::default();
            for (key, value) in table {
                match (key.as_str(), value) {
                    ("mode", Value::String(text)) => respond.mode = mode(text)?,
                    ("status", Value::Number(n)) => {
                        let status = n
                            .as_u64()
                            .and_then(|s| u16::try_from(s).ok())
                            .filter(|s| (200..300).contains(s))
                            .ok_or("`status` must be a 2xx status code")?;
                        respond.status = Some(status);
                    }
                    ("output", Value::Bool(b)) => respond.output = *b,
                    _ => {
                        return Err(format!(
                            "`{key}` is not one of mode (\"async\" or \"sync\"), status (a 2xx code), output (true or false)"
                        ));
                    }
                }
            }
            Ok(respond)
        }
        _ => Err("must be \"async\", \"sync\", or a table { mode, status, output }".to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::config::Config;

    fn problems(text: &str) -> String {
        Config::parse(text).err().unwrap_or_default().join("\n")
    }

    #[test]
    fn a_signature_hook_needs_the_senders_secret_and_a_known_provider() {
        let base = "[webhooks]\nbind_port = 0\n[webhooks.entries.x]\ntype = \"command\"\ncommand = \"true\"\n";
        let unsigned = format!("{base}auth = \"signature\"\n");
        assert!(
            problems(&unsigned).contains(
                "webhooks.entries.x.auth: `signature` needs the sender's secret: set exactly one of hmac_secret, hmac_secret_env or hmac_secret_file"
            ),
            "{}",
            problems(&unsigned)
        );
        let signed = format!("{base}auth = \"signature\"\nhmac_secret_env = \"GH_SECRET\"\n");
        assert_eq!(problems(&signed), "", "a signature hook needs no token");
        let unknown = format!("{signed}provider = \"bitbucket\"\n");
        assert!(
            problems(&unknown).contains(
                "webhooks.entries.x.provider: `bitbucket` is not a provider; the providers: github, gitlab, slack, stripe"
            ),
            "{}",
            problems(&unknown)
        );
        let mode = format!("{base}token = \"t\"\nauth = \"none\"\n");
        assert!(
            problems(&mode).contains("webhooks.entries.x.auth: `none` is not an auth mode"),
            "{}",
            problems(&mode)
        );
        let window = format!("{signed}dedup_window_secs = 0\n");
        assert!(
            problems(&window).contains("webhooks.entries.x.dedup_window_secs: 0 is out of range"),
            "{}",
            problems(&window)
        );
        for secret in ["Authorization", "X-Api-Key", "X-Gitlab-Token"] {
            let named = format!("{signed}dedup_header = \"{secret}\"\n");
            assert!(
                problems(&named).contains("carries credentials, and a delivery id is recorded"),
                "{secret}: {}",
                problems(&named)
            );
        }
        let header = format!("{signed}dedup_header = \"not a header\"\n");
        assert!(
            problems(&header)
                .contains("webhooks.entries.x.dedup_header: `not a header` is not a header name"),
            "{}",
            problems(&header)
        );
    }

    #[test]
    fn a_served_hook_needs_a_token_and_another_nodes_hook_does_not() {
        let text = "node = \"a\"\n[webhooks]\nbind_port = 0\n[webhooks.entries.x]\ntype = \"command\"\ncommand = \"true\"\n";
        assert!(
            problems(text).contains("webhooks.entries.x: no token"),
            "{}",
            problems(text)
        );
        let other = text.replace("command = \"true\"", "command = \"true\"\nnodes = [\"b\"]");
        assert_eq!(problems(&other), "");
        let file = text.replace(
            "command = \"true\"",
            "command = \"true\"\ntoken_file = \"no/such/file\"",
        );
        assert_eq!(problems(&file), "", "a token file is not read at load time");
    }

    #[test]
    fn every_problem_names_its_toml_path_and_what_is_allowed() {
        let text = r#"
[webhooks]
bind_port = 0
token = "t"
token_env = "T"
[webhooks.entries.a]
type = "command"
[webhooks.entries.b]
type = "spec"
command = "x"
[webhooks.entries.c]
type = "action"
action = "nope"
respond = "later"
[projects.p.webhooks.entries.d]
type = "command"
command = "true"
token = "x"
match = { "header.authorization" = "x" }
pass_headers = ["Authorization"]
"#;
        let text = problems(text);
        for expected in [
            "webhooks: set exactly one of token, token_env or token_file",
            "webhooks.entries.a.command: a `command` hook needs a shell command",
            "webhooks.entries.b.command: not a field of a `spec` hook",
            "webhooks.entries.c.action: no [actions.nope]",
            "webhooks.entries.c.respond: `later` is not async or sync",
            "projects.p.webhooks.entries.d.match.header.authorization",
            "projects.p.webhooks.entries.d.pass_headers[0]: `Authorization` carries credentials",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }
}
