//! Builds what `graph get` shows beyond the stored graph (the model's
//! [`canopy_model::records::views`]): the current run with its latest node runs, the progress
//! of the run's source reconstructed from the run history (summarised, and one page of it per
//! spec), the hook runs, and warnings.
//!
//! A graph can have thousands of specs; the view reads only the page it shows, so its cost
//! stays flat with the spec count.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::{EngineError, GraphStatus, RunSpec};
use crate::hooks::runs::HookRunFilter;
use canopy_model::hook_keys::HookEvent;
pub use canopy_model::records::views::{GraphView, PageInfo, Progress, ProgressResult, RunView};
use canopy_store::Rd;

/// Which window of a long per-spec list a view shows.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ViewPage {
    /// Specs skipped from the start.
    #[serde(default)]
    pub offset: usize,
    /// Specs shown at most.
    #[serde(default = "default_limit")]
    pub limit: usize,
}

/// Specs a view shows unless asked for another window.
pub const DEFAULT_PAGE: usize = 50;
/// The most specs one view shows.
pub const MAX_PAGE: usize = 1000;

fn default_limit() -> usize {
    DEFAULT_PAGE
}

impl Default for ViewPage {
    fn default() -> Self {
        Self {
            offset: 0,
            limit: DEFAULT_PAGE,
        }
    }
}

impl ViewPage {
    /// Checks a page asked for by a client.
    pub fn checked(self) -> Result<Self, EngineError> {
        if self.limit == 0 || self.limit > MAX_PAGE {
            return super::invalid(format!(
                "field `limit` must be from 1 to {MAX_PAGE}, got {}",
                self.limit
            ));
        }
        Ok(self)
    }
}

/// The events an active run can still fire.
pub(super) fn remaining_events(view: &GraphView, _run: &RunView) -> Vec<String> {
    let mut events = Vec::new();
    let open = [
        ProgressResult::NotReached,
        ProgressResult::Running,
        ProgressResult::Blocked,
        ProgressResult::LimitBlocked,
    ];
    if open
        .iter()
        .any(|r| view.progress_summary.get(r).is_some_and(|n| *n > 0))
    {
        events.push(HookEvent::OnSpecCompleted.as_str().to_string());
    }
    for event in [
        HookEvent::OnBlocked,
        HookEvent::OnCompleted,
        HookEvent::OnFailed,
    ] {
        events.push(event.as_str().to_string());
    }
    events
}

/// Node runs `graph get` shows of the current run (the latest ones; `GET /api/runs/{id}` has all).
pub(super) const RECENT_NODE_RUNS: usize = 20;

/// Hook runs `graph get` shows of the current run.
pub(super) const RECENT_HOOK_RUNS: usize = 50;

/// One spec of a run's source: id, name, group, and the other run on the queue that settled
/// it (with how), if one did.
struct Source {
    spec_id: String,
    spec_name: String,
    group: Option<String>,
    earlier: Option<(ProgressResult, String)>,
}

/// Builds `graph get` for graph `id`, showing `page` of its per-spec lists.
pub(super) fn build(
    rd: &Rd<'_>,
    id: &str,
    driver_active: bool,
    page: ViewPage,
) -> Result<GraphView, EngineError> {
    let mut graph = rd.graph_shallow(id)?;
    graph.specs = rd.graph_specs_page(id, page.offset, page.limit)?;
    let specs_total = rd.graph_spec_count(id)?;
    let run = graph
        .current_run_id
        .as_deref()
        .map(|run_id| rd.run(run_id))
        .transpose()?;
    let in_progress = match &run {
        Some(run) => rd.node_in_progress(&run.id)?,
        None => false,
    };
    let consistency_warning = (graph.status == GraphStatus::Running && !in_progress && !driver_active).then(|| {
        format!(
            "graph `{}` is marked running, but no node run is in progress and no resume is scheduled; `canopy graph continue {}` resumes it, `canopy graph reset {}` abandons the run",
            graph.name, graph.name, graph.name
        )
    });
    let mut view = GraphView {
        specs_total,
        consistency_warning,
        current_run: None,
        progress_summary: BTreeMap::new(),
        progress_page: PageInfo {
            offset: page.offset,
            limit: page.limit,
            total: 0,
        },
        progress: Vec::new(),
        completion_hook_runs: Vec::new(),
        remaining_events: None,
        unchanged: false,
        graph,
    };
    let Some(run) = run else {
        return Ok(view);
    };
    // The page of the run's source.
    let (sources, source_total) = match &run.queue_id {
        Some(queue_id) => {
            let members = rd.queue_members_page(queue_id, page.offset, Some(page.limit))?;
            let sources = members
                .into_iter()
                .map(|m| Source {
                    earlier: m
                        .done_in_run
                        .filter(|r| *r != run.id)
                        .map(|r| (m.status.into(), r)),
                    spec_id: m.spec_id,
                    spec_name: m.spec_name,
                    group: m.group,
                })
                .collect::<Vec<_>>();
            (sources, rd.queue_member_count(queue_id)?)
        }
        None => (
            view.graph
                .specs
                .iter()
                .map(|s| Source {
                    spec_id: s.id.clone(),
                    spec_name: s.name.clone(),
                    group: None,
                    earlier: None,
                })
                .collect(),
            specs_total,
        ),
    };
    let ids: Vec<String> = sources.iter().map(|s| s.spec_id.clone()).collect();
    let mut reached = rd.run_specs_among(&run.id, &ids)?;
    let by_id: HashMap<&str, &RunSpec> = reached.iter().map(|s| (s.spec_id.as_str(), s)).collect();
    let mut progress: Vec<Progress> = sources
        .into_iter()
        .enumerate()
        .map(|(index, source)| {
            let hit = by_id.get(source.spec_id.as_str()).copied();
            let (result, done_in_run) = match (hit, source.earlier) {
                (Some(s), _) => (s.status.into(), None),
                (None, Some((status, run))) => (status, Some(run)),
                (None, None) => (ProgressResult::NotReached, None),
            };
            Progress {
                position: page.offset + index + 1,
                result,
                summary: hit.and_then(|s| s.summary.clone()),
                reason: hit.and_then(|s| s.reason.clone()),
                reason_node: hit.and_then(|s| s.reason_node.clone()),
                done_in_run,
                spec_id: source.spec_id,
                spec_name: source.spec_name,
                group: source.group,
            }
        })
        .collect();
    // Specs the run reached that have since left its source still show, after the source.
    let mut total = source_total;
    if page.offset + page.limit > source_total {
        let all_sources: std::collections::HashSet<String> = match &run.queue_id {
            Some(queue_id) => rd
                .queue_members(queue_id)?
                .into_iter()
                .map(|m| m.spec_id)
                .collect(),
            None => rd.graph(id)?.specs.into_iter().map(|s| s.id).collect(),
        };
        let gone: Vec<RunSpec> = rd
            .run_specs(&run.id)?
            .into_iter()
            .filter(|s| !all_sources.contains(&s.spec_id))
            .collect();
        total += gone.len();
        let skip = page.offset.saturating_sub(source_total);
        let room = page.limit.saturating_sub(progress.len());
        for (index, spec) in gone.into_iter().enumerate().skip(skip).take(room) {
            progress.push(Progress {
                position: source_total + index + 1,
                spec_id: spec.spec_id.clone(),
                spec_name: spec
                    .spec_name
                    .clone()
                    .unwrap_or_else(|| "(deleted spec)".to_string()),
                group: spec.group.clone(),
                result: spec.status.into(),
                summary: spec.summary.clone(),
                reason: spec.reason.clone(),
                reason_node: spec.reason_node.clone(),
                done_in_run: None,
            });
            reached.push(spec);
        }
    }
    // The summary: how far the run took its specs; the rest of the source is not reached.
    let mut summary = BTreeMap::new();
    let mut reached_total = 0;
    for (result, count) in rd.run_spec_counts(&run.id)? {
        reached_total += count;
        *summary.entry(ProgressResult::from(result)).or_insert(0) += count;
    }
    let not_reached = total.saturating_sub(reached_total);
    if not_reached > 0 {
        summary.insert(ProgressResult::NotReached, not_reached);
    }
    reached.sort_by_key(|s| s.ordinal);
    view.completion_hook_runs = rd.hook_runs(&HookRunFilter {
        run_id: Some(run.id.clone()),
        last: RECENT_HOOK_RUNS,
        ..HookRunFilter::default()
    })?;
    view.current_run = Some(RunView {
        node_runs: rd.recent_node_runs(&run.id, RECENT_NODE_RUNS)?,
        specs: reached,
        specs_total: Some(reached_total),
        run,
    });
    view.progress_summary = summary;
    view.progress_page.total = total;
    view.progress = progress;
    Ok(view)
}
