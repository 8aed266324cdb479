//! What `graph get` shows beyond the stored graph: the current run with its specs and node
//! runs, and the progress of the run's source, summarised and one page of it per spec.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::graphs::Graph;
use super::hook_runs::HookRun;
use super::queues::MemberStatus;
use super::runs::{NodeRun, Run, RunSpec, SpecResult};
use crate::state_enum;

/// A graph with what `graph get` adds: the current run, progress, warnings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GraphView {
    /// The graph; its `specs` holds the bound specs of the page shown.
    #[serde(flatten)]
    pub graph: Graph,
    /// How many specs are bound to the graph in all.
    pub specs_total: usize,
    /// Set when the graph says running but nothing runs and nothing is scheduled.
    pub consistency_warning: Option<String>,
    pub current_run: Option<RunView>,
    /// How many specs of the current run's source stand at each result.
    pub progress_summary: BTreeMap<ProgressResult, usize>,
    /// Which part of the per-spec list `progress` holds.
    pub progress_page: PageInfo,
    /// Each spec of the page of the current run's source (its queue's members, or the bound
    /// specs) and what the run did with it, reconstructed from the run history.
    pub progress: Vec<Progress>,
    /// The hook runs of the current run, newest first.
    pub completion_hook_runs: Vec<HookRun>,
    /// After an update that changed hooks while a run is active: the events of that run still
    /// to come, which the new hooks will serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_events: Option<Vec<String>>,
    /// After an update: true when it changed nothing (nothing was written, the version stayed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
}

/// The window a paged list shows.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct PageInfo {
    pub offset: usize,
    pub limit: usize,
    /// Entries in the whole list.
    pub total: usize,
}

state_enum! {
    /// What a run did with one spec of its source.
    pub enum ProgressResult {
        NotReached = "not_reached",
        Running = "running",
        Blocked = "blocked",
        /// Its agent hit a usage limit; the run goes on after the reset.
        LimitBlocked = "limit_blocked",
        Completed = "completed",
        Failed = "failed",
        Skipped = "skipped",
        Interrupted = "interrupted",
        Cancelled = "cancelled",
    }
}

impl From<SpecResult> for ProgressResult {
    fn from(result: SpecResult) -> Self {
        match result {
            SpecResult::Running => Self::Running,
            SpecResult::Blocked => Self::Blocked,
            SpecResult::LimitBlocked => Self::LimitBlocked,
            SpecResult::Completed => Self::Completed,
            SpecResult::Failed => Self::Failed,
            SpecResult::Skipped => Self::Skipped,
            SpecResult::Interrupted => Self::Interrupted,
            SpecResult::Cancelled => Self::Cancelled,
            SpecResult::Unknown => Self::Unknown,
        }
    }
}

impl From<MemberStatus> for ProgressResult {
    fn from(status: MemberStatus) -> Self {
        match status {
            MemberStatus::Pending => Self::NotReached,
            MemberStatus::Running => Self::Running,
            MemberStatus::Blocked => Self::Blocked,
            MemberStatus::LimitBlocked => Self::LimitBlocked,
            MemberStatus::Completed => Self::Completed,
            MemberStatus::Failed => Self::Failed,
            MemberStatus::Skipped => Self::Skipped,
            MemberStatus::Interrupted => Self::Interrupted,
            MemberStatus::Cancelled => Self::Cancelled,
            MemberStatus::Unknown => Self::Unknown,
        }
    }
}

impl ProgressResult {
    /// A spec the run did not complete and has a reason to show.
    pub fn stopped(self) -> bool {
        match self {
            Self::Failed
            | Self::Blocked
            | Self::LimitBlocked
            | Self::Interrupted
            | Self::Cancelled => true,
            Self::NotReached | Self::Running | Self::Completed | Self::Skipped | Self::Unknown => {
                false
            }
        }
    }
}

impl PartialOrd for ProgressResult {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ProgressResult {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let rank = |r: &Self| Self::ALL.iter().position(|x| x == r);
        rank(self).cmp(&rank(other))
    }
}

/// A run with its specs and node runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct RunView {
    #[serde(flatten)]
    pub run: Run,
    /// The specs the run reached (in `graph get`: those on the page shown).
    pub specs: Vec<RunSpec>,
    /// In `graph get`: how many specs the run reached in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs_total: Option<usize>,
    pub node_runs: Vec<NodeRun>,
}

/// One spec of a run's source and what the run did with it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Progress {
    pub position: usize,
    pub spec_id: String,
    pub spec_name: String,
    pub group: Option<String>,
    /// The spec's status in this run; for a queue member another run on the queue completed or
    /// skipped (an earlier one, or another graph's), that (see `done_in_run`); else
    /// `not_reached`.
    pub result: ProgressResult,
    pub summary: Option<String>,
    /// Why a failed, blocked or interrupted spec stopped, and at which node.
    pub reason: Option<String>,
    pub reason_node: Option<String>,
    /// The other run on the queue that completed or skipped this member, so this run did not
    /// take it.
    pub done_in_run: Option<String>,
}

/// One run as `GET /api/runs/{id}` shows it: its specs and node runs, its graph's name, every
/// hook run it fired (newest first), and whether the engine still works on it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub view: RunView,
    /// The run's graph's name; `None` once the graph is deleted.
    pub graph_name: Option<String>,
    pub hook_runs: Vec<HookRun>,
    /// True while the engine still works on the run; once false, every hook it fired is in
    /// `hook_runs`.
    pub in_flight: bool,
}

/// A run in `GET /api/runs`: the run and its graph's name (`None` once the graph is deleted).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NamedRun {
    #[serde(flatten)]
    pub run: Run,
    pub graph_name: Option<String>,
}

/// The `lagged` event of a followed stream (the feed, a session's inbox): the reader fell
/// behind by `missed` events. The feed reads them back from the store and goes on; an inbox
/// lists them (`session inbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Lagged {
    pub missed: u64,
}

impl Lagged {
    /// The SSE event name it is sent under.
    pub const EVENT: &'static str = "lagged";
}
