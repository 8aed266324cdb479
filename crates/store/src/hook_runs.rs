//! Hook-run records (`hook_runs`): one row per hook that fired, with the exact config that
//! fired, the executor that ran it, the rendered values, and how it ended. Also the one read of
//! `graphs` the dispatcher needs: a graph's stored hooks map.

use std::sync::Arc;

use crate::sql::{self, Conn, Dialect, Queries, Row, params};
use serde_json::Value;

use super::states::{Sql, state, state_opt};
use super::times::{At, time, time_opt};
use super::{Rd, StoreError, Tx};
use canopy_model::records::hook_runs::{
    Dispatch, HookOutcome, HookRun, HookRunStatus, HookSourceKind,
};
use canopy_model::time::Timestamp;
use canopy_model::work::PluginRef;

const COLUMNS: &str = "id, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, plugin, plugin_version, plugin_sha256, rendered, status, summary, error, output, test, fired_at, started_at, finished_at, duration_ms, source, hook_name, dispatch_depth, feed_id, project, dispatch, required, outcome, patch_applied, node";

fn json_column(row: &Row<'_>, index: usize) -> sql::Result<Option<Value>> {
    let text: Option<String> = row.get(index)?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| sql::Error::column(index, e.into()))
}

fn from_row(row: &Row<'_>) -> sql::Result<HookRun> {
    let mode: Option<String> = row.get(8)?;
    let status: HookRunStatus = state(row, 13)?;
    let fired_at = time(row, 18)?;
    Ok(HookRun {
        id: row.get(0)?,
        graph_id: row.get(1)?,
        graph_name: row.get(2)?,
        run_id: row.get(3)?,
        event: row.get(4)?,
        hook_index: row.get(5)?,
        hook_config: json_column(row, 6)?.unwrap_or(Value::Null),
        spec_id: row.get(7)?,
        executor_kind: mode.clone(),
        mode,
        plugin: row.get(9)?,
        plugin_version: row.get(10)?,
        plugin_sha256: row.get(11)?,
        rendered: json_column(row, 12)?,
        status,
        summary: row.get(14)?,
        error: row.get(15)?,
        output: row.get(16)?,
        test: row.get(17)?,
        recorded_at: fired_at,
        fired_at,
        started_at: time_opt(row, 19)?,
        finished_at: time_opt(row, 20)?,
        duration_ms: row.get(21)?,
        source: state(row, 22)?,
        hook_name: row.get(23)?,
        dispatch_depth: row.get(24)?,
        feed_id: row.get(25)?,
        project: row.get(26)?,
        dispatch: state(row, 27)?,
        required: row.get(28)?,
        outcome: state_opt::<HookOutcome>(row, 29)?.or(status.outcome()),
        patch_applied: json_column(row, 30)?,
        node: row.get(31)?,
    })
}

/// A hook that fired, to be recorded: queued behind the hooks before it, or running already
/// when its executor starts the moment it is recorded.
#[derive(Debug, Clone)]
pub struct Fired {
    pub source: HookSourceKind,
    pub hook_name: String,
    pub graph_id: Option<String>,
    pub graph_name: Option<String>,
    pub run_id: Option<String>,
    pub event: String,
    pub hook_index: usize,
    /// The exact hook config that fired, as JSON text.
    pub hook_config: Arc<str>,
    pub spec_id: Option<String>,
    pub mode: Option<String>,
    pub test: bool,
    /// When the event fired.
    pub fired_at: Timestamp,
    /// Recorded as running (started now) instead of queued.
    pub running: bool,
    /// The executor that runs it; recorded with a running hook run.
    pub plugin: Option<PluginRef>,
    pub dispatch_depth: u32,
    pub feed_id: Option<i64>,
    pub project: Option<String>,
    /// Recorded as dropped (past the dispatch depth) with this reason, never to run.
    pub dropped: Option<String>,
}

/// How a hook run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// A finished status ([`HookRunStatus::is_finished`]).
    pub status: HookRunStatus,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub rendered: Option<Value>,
    pub duration_ms: i64,
}

/// A sync hook run, recorded once its decision is made.
#[derive(Debug, Clone)]
pub struct SyncHookRun {
    /// What fired it (`running` and `dropped` are not read: `finished` says how it went).
    pub fired: Fired,
    pub started_at: Option<Timestamp>,
    pub plugin: Option<PluginRef>,
    pub finished: Finished,
    pub required: bool,
    /// What it meant for the action.
    pub outcome: HookOutcome,
    pub patch_applied: Option<Value>,
}

/// Filters of `GET /api/hook-runs` (and of a workspace's hook runs); every one given must hold.
#[derive(Debug, Clone, Default)]
pub struct HookRunFilter {
    pub graph_id: Option<String>,
    pub run_id: Option<String>,
    /// The event as recorded: a graph hook's key (`on_completed`), a daemon hook's taxonomy
    /// event (`graph.run.blocked`).
    pub event: Option<String>,
    /// Any of these events as recorded (see `event`).
    pub events: Option<Vec<String>>,
    pub status: Option<HookRunStatus>,
    /// Runs whose status has this outcome.
    pub outcome: Option<HookOutcome>,
    pub source: Option<HookSourceKind>,
    /// The hook's name.
    pub hook: Option<String>,
    /// The project (workdir).
    pub project: Option<String>,
    /// A session: runs of the graph run with this id, or fired by an event whose payload names
    /// this `session_id`.
    pub session: Option<String>,
    /// Only runs fired at or after this instant.
    pub since: Option<Timestamp>,
    /// At most this many, the newest.
    pub last: usize,
}

/// A hook run's outcome in SQL: the one recorded (a sync hook's), else its status's, `CASE
/// status WHEN 'completed' THEN 'applied' ... END`, from [`HookRunStatus::outcome`].
fn outcome_sql() -> String {
    let mut sql = String::from("COALESCE(outcome, CASE status");
    for status in HookRunStatus::ALL {
        if let Some(outcome) = status.outcome() {
            sql.push_str(&format!(" WHEN '{status}' THEN '{outcome}'"));
        }
    }
    sql.push_str(" END)");
    sql
}

/// Named parameters of a statement.
type Bound<'a> = Vec<(&'static str, Param<'a>)>;

/// One parameter's value.
type Param<'a> = Box<dyn sql::ToSql + 'a>;

/// A filter's value as a parameter, when it is given.
fn boxed<'a, T: sql::ToSql + 'a>(value: Option<T>) -> Option<Param<'a>> {
    value.map(|v| Box::new(v) as Param<'a>)
}

impl HookRunFilter {
    /// The `WHERE` clause of the filter and its named parameters: only the filters given, so
    /// the query planner can use an index for them (`:x IS NULL OR col = :x` kept every index
    /// out of reach: a graph view asking for a run's few hook runs read every hook run on record).
    fn clause(&self, dialect: Dialect) -> (String, Bound<'_>) {
        let mut terms: Vec<String> = Vec::new();
        let mut params: Bound<'_> = Vec::new();
        let outcome = format!("({})", outcome_sql());
        let equal: [(&str, &'static str, Option<Param<'_>>); 8] = [
            ("graph_id", ":graph_id", boxed(self.graph_id.as_ref())),
            ("run_id", ":run_id", boxed(self.run_id.as_ref())),
            ("event", ":event", boxed(self.event.as_ref())),
            ("status", ":status", boxed(self.status.map(Sql))),
            (&outcome, ":outcome", boxed(self.outcome.map(Sql))),
            ("source", ":source", boxed(self.source.map(Sql))),
            ("hook_name", ":hook", boxed(self.hook.as_ref())),
            ("project", ":project", boxed(self.project.as_ref())),
        ];
        for (column, name, value) in equal {
            if let Some(value) = value {
                terms.push(format!("{column} = {name}"));
                params.push((name, value));
            }
        }
        if let Some(events) = &self.events {
            terms.push(dialect.in_json_list("event", ":events"));
            params.push((":events", Box::new(Value::from(events.clone()).to_string())));
        }
        if let Some(since) = self.since {
            terms.push("fired_at >= :since".to_string());
            params.push((":since", Box::new(At(since))));
        }
        if let Some(session) = &self.session {
            let session_of = dialect.json_text("f.payload", "session_id");
            terms.push(format!(
                "(run_id = :session OR EXISTS (
                   SELECT 1 FROM feed f WHERE f.id = hook_runs.feed_id
                     AND {session_of} = :session))"
            ));
            params.push((":session", Box::new(session)));
        }
        let clause = if terms.is_empty() {
            "TRUE".to_string()
        } else {
            terms.join(" AND ")
        };
        (clause, params)
    }
}

/// A fresh hook-run id: 32 lowercase hex digits, the microseconds since 1970 (16 digits) then
/// 64 random bits. Hook runs are recorded in bursts; ids that grow with time keep the primary
/// key's inserts on its last page instead of one random page each, so a commit of many hook
/// runs writes far fewer pages. (Hook-run ids are never shortened or typed as prefixes.)
fn time_ordered_id() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        });
    let (_, random) = uuid::Uuid::new_v4().as_u64_pair();
    format!("{micros:016x}{random:016x}")
}

impl Rd<'_> {
    /// Hook runs matching the filter, newest first; the runs of one event (which share their
    /// `fired_at`) last recorded first, so their reverse is firing order.
    pub fn hook_runs(&self, filter: &HookRunFilter) -> Result<Vec<HookRun>, StoreError> {
        let (clause, mut params) = filter.clause(self.dialect());
        let order = self.dialect().insertion_order();
        let statement = format!(
            "SELECT {COLUMNS} FROM hook_runs WHERE {clause} ORDER BY fired_at DESC, {order} DESC LIMIT :last"
        );
        params.push((
            ":last",
            Box::new(i64::try_from(filter.last).unwrap_or(i64::MAX)),
        ));
        let named: Vec<(&str, &dyn sql::ToSql)> = params
            .iter()
            .map(|(name, value)| (*name, &**value))
            .collect();
        let runs = self.query_map_named(&statement, named.as_slice(), from_row)?;
        Ok(runs)
    }

    /// How many hook runs match the filter (`last` aside).
    pub fn count_hook_runs(&self, filter: &HookRunFilter) -> Result<usize, StoreError> {
        let (clause, params) = filter.clause(self.dialect());
        let named: Vec<(&str, &dyn sql::ToSql)> = params
            .iter()
            .map(|(name, value)| (*name, &**value))
            .collect();
        let count: i64 = self
            .query_map_named(
                &format!("SELECT count(*) FROM hook_runs WHERE {clause}"),
                named.as_slice(),
                |row| row.get(0),
            )?
            .pop()
            .unwrap_or(0);
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The hook runs with these ids, in the order given; an id with no record is left out.
    pub fn hook_runs_by_id(&self, ids: &[String]) -> Result<Vec<HookRun>, StoreError> {
        let statement = format!("SELECT {COLUMNS} FROM hook_runs WHERE id = ?1");
        let mut runs = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(run) = self.query_opt(&statement, params![id], from_row)? {
                runs.push(run);
            }
        }
        Ok(runs)
    }

    /// A graph's stored hooks map as JSON text; `None` when there is no such graph.
    pub fn graph_hooks_json(&self, graph_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.query_opt(
            "SELECT hooks FROM graphs WHERE id = ?1",
            params![graph_id],
            |row| row.get(0),
        )?)
    }
}

impl Tx<'_> {
    /// Records hooks as fired, in order, all of them or (on an error) none; returns their new
    /// record ids, in the same order.
    pub fn insert_hook_runs(&self, fired: &[&Fired]) -> Result<Vec<String>, StoreError> {
        if let [one] = fired {
            return Ok(vec![self.insert_hook_run(one)?]);
        }
        self.execute("SAVEPOINT insert_hook_runs", params![])?;
        let inserted = fired
            .iter()
            .map(|one| self.insert_hook_run(one))
            .collect::<Result<Vec<_>, _>>();
        if inserted.is_err() {
            self.execute("ROLLBACK TO insert_hook_runs", params![])?;
        }
        self.execute("RELEASE insert_hook_runs", params![])?;
        inserted
    }

    fn insert_hook_run(&self, fired: &Fired) -> Result<String, StoreError> {
        let id = time_ordered_id();
        let (status, started_at, plugin) = if fired.dropped.is_some() {
            (HookRunStatus::Dropped, None, None)
        } else if fired.running {
            (
                HookRunStatus::Running,
                Some(super::now()),
                fired.plugin.as_ref(),
            )
        } else {
            (HookRunStatus::Queued, None, None)
        };
        let finished_at = fired.dropped.as_ref().map(|_| At(fired.fired_at));
        self.execute("INSERT INTO hook_runs (id, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, status, test, fired_at, started_at, plugin, plugin_version, plugin_sha256,
                                        source, hook_name, dispatch_depth, feed_id, project, error, finished_at, node)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)", params![
                id,
                fired.graph_id,
                fired.graph_name,
                fired.run_id,
                fired.event,
                i64::try_from(fired.hook_index).unwrap_or(i64::MAX),
                &*fired.hook_config,
                fired.spec_id,
                fired.mode,
                Sql(status),
                fired.test,
                At(fired.fired_at),
                started_at,
                plugin.map(|p| p.name.as_str()),
                plugin.map(|p| p.version.as_str()),
                plugin.map(|p| p.sha256.as_str()),
                Sql(fired.source),
                fired.hook_name,
                fired.dispatch_depth,
                fired.feed_id,
                fired.project,
                fired.dropped,
                finished_at,
                self.node()
            ])?;
        Ok(id)
    }

    /// Records the sync hook runs of one decision, each as it ended (they ran before their
    /// action, which waited for them); returns their ids in order.
    pub fn insert_sync_hook_runs(&self, runs: &[SyncHookRun]) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::with_capacity(runs.len());
        for run in runs {
            let id = time_ordered_id();
            let fired = &run.fired;
            let plugin = run.plugin.as_ref();
            let finished = &run.finished;
            self.execute("INSERT INTO hook_runs (id, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, status, test, fired_at, started_at, plugin, plugin_version, plugin_sha256,
                                            source, hook_name, dispatch_depth, feed_id, project, error, finished_at, summary, output, rendered, duration_ms,
                                            dispatch, required, outcome, patch_applied, node)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)", params![
                    id,
                    fired.graph_id,
                    fired.graph_name,
                    fired.run_id,
                    fired.event,
                    i64::try_from(fired.hook_index).unwrap_or(i64::MAX),
                    &*fired.hook_config,
                    fired.spec_id,
                    fired.mode,
                    Sql(finished.status),
                    fired.test,
                    At(fired.fired_at),
                    run.started_at.map(At),
                    plugin.map(|p| p.name.as_str()),
                    plugin.map(|p| p.version.as_str()),
                    plugin.map(|p| p.sha256.as_str()),
                    Sql(fired.source),
                    fired.hook_name,
                    fired.dispatch_depth,
                    fired.feed_id,
                    fired.project,
                    finished.error,
                    super::now(),
                    finished.summary,
                    finished.output,
                    finished.rendered.as_ref().map(Value::to_string),
                    finished.duration_ms,
                    Sql(Dispatch::Sync),
                    run.required,
                    Sql(run.outcome),
                    run.patch_applied.as_ref().map(Value::to_string),
                    self.node(),
                ])?;
            ids.push(id);
        }
        Ok(ids)
    }

    /// Marks a queued hook run as running, with the executor about to run it. False when it
    /// is no longer queued (a shutdown interrupted it): it must not run.
    pub fn start_hook_run(&self, id: &str, plugin: Option<&PluginRef>) -> Result<bool, StoreError> {
        let changed = self.execute("UPDATE hook_runs SET status = ?2, started_at = ?3, plugin = ?4, plugin_version = ?5, plugin_sha256 = ?6
                 WHERE id = ?1 AND status = ?7", params![
                id,
                Sql(HookRunStatus::Running),
                super::now(),
                plugin.map(|p| p.name.as_str()),
                plugin.map(|p| p.version.as_str()),
                plugin.map(|p| p.sha256.as_str()),
                Sql(HookRunStatus::Queued)
            ])?;
        Ok(changed == 1)
    }

    /// Records how a running hook run ended. False when it was no longer running (a shutdown
    /// marked it interrupted meanwhile); that record is left as it is.
    pub fn finish_hook_run(&self, id: &str, finished: &Finished) -> Result<bool, StoreError> {
        if !finished.status.is_finished() {
            return Err(StoreError::Internal(anyhow::anyhow!(
                "hook run {id} cannot end as `{}`, which is not a final status",
                finished.status
            )));
        }
        let changed = self.execute("UPDATE hook_runs SET status = ?2, summary = ?3, error = ?4, output = ?5, rendered = ?6, finished_at = ?7, duration_ms = ?8
                 WHERE id = ?1 AND status = ?9", params![
                id,
                Sql(finished.status),
                finished.summary,
                finished.error,
                finished.output,
                finished.rendered.as_ref().map(Value::to_string),
                super::now(),
                finished.duration_ms,
                Sql(HookRunStatus::Running)
            ])?;
        Ok(changed == 1)
    }

    /// Marks every queued or running hook run interrupted, with `why` as its error (at
    /// start-up and shutdown); they are never re-run on their own. Returns how many.
    pub fn interrupt_unfinished_hook_runs(&self, why: &str) -> Result<usize, StoreError> {
        Ok(self.execute(
            "UPDATE hook_runs SET status = ?1, error = ?2, finished_at = ?3
                 WHERE status IN (?4, ?5) AND (node = ?6 OR node IS NULL OR ?7 <> 0)",
            params![
                Sql(HookRunStatus::Interrupted),
                why,
                super::now(),
                Sql(HookRunStatus::Queued),
                Sql(HookRunStatus::Running),
                self.node(),
                self.exclusive()
            ],
        )?)
    }
}
