//! Running crons: one scheduler task per served cron, a receipt per firing written before
//! anything is spawned, overlap rules, misses counted at start, and the end of every firing
//! recorded before a planned stop lets the daemon go.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::task::AbortHandle;

use super::{CatchUp, Cron, Overlap};
use crate::bus::Bus;
use crate::hooks::decide::{DecisionRecord, Question, Verdict};
use crate::runner::{self, Job, Kind, Ran};
use canopy_executors::plugins::{Ending, StopSwitch, WorkConfig};
use canopy_model::events::{self, Actor, Cause, Event};
use canopy_model::records::crons::{CronActivity, CronView, Receipt, ReceiptStatus, Trigger};
use canopy_model::time;
use canopy_model::work::Provenance;
use canopy_store::crons::{NewReceipt, ReceiptEnd};
use canopy_store::{Store, StoreError};

/// The markers a cron's action may use.
pub const CRON_MARKERS: &[&str] = &["cron_name", "run_id", "scheduled_at", "node", "workdir"];

/// Bytes of a firing's output kept in its receipt.
pub const OUTPUT_LIMIT: usize = 16 * 1024;

/// Misses counted at most, per cron and start.
const MISSED_CAP: u64 = 1_000_000;

/// How long before its scheduled second a firing is prepared: its receipt written, its
/// executor instance set up and its config rendered, so that its process starts on the second
/// (the host holds the spawn until then).
const LEAD: Duration = Duration::from_millis(250);

/// What went wrong with a cron request.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error("no cron named `{name}`; {}", known_crons(.known))]
    Unknown { name: String, known: Vec<String> },
    #[error("cron `{name}` does not run on this node ({why})")]
    NotServed { name: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn known_crons(names: &[String]) -> String {
    if names.is_empty() {
        "canopy.toml configures no crons".to_string()
    } else {
        format!("configured crons: {}", names.join(", "))
    }
}

/// One firing in progress.
struct Firing {
    run_id: String,
    switch: StopSwitch,
    /// Set when the next firing replaced this one (`overlap = "replace"`).
    replaced_by: Mutex<Option<String>>,
}

/// The daemon's crons.
#[derive(Clone)]
pub struct Crons {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    plugins: canopy_executors::plugins::PluginHost,
    bus: Bus,
    /// Where an action with no `cwd` runs.
    data_dir: PathBuf,
    keep_days: u32,
    crons: RwLock<Vec<Arc<Cron>>>,
    /// The paused crons (kept in the store; read here on every firing).
    paused: Mutex<std::collections::HashSet<String>>,
    tasks: Mutex<Vec<AbortHandle>>,
    running: Mutex<HashMap<String, Vec<Arc<Firing>>>>,
}

impl std::fmt::Debug for Crons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crons").finish_non_exhaustive()
    }
}

impl Crons {
    /// The crons of `canopy.toml`; nothing runs until [`Crons::start`].
    pub fn new(bus: Bus, data_dir: PathBuf, keep_days: u32, crons: Vec<Cron>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: bus.store().clone(),
                plugins: bus.plugins().clone(),
                bus,
                data_dir,
                keep_days,
                crons: RwLock::new(crons.into_iter().map(Arc::new).collect()),
                paused: Mutex::default(),
                tasks: Mutex::default(),
                running: Mutex::default(),
            }),
        }
    }

    /// At daemon start: receipts a dead daemon left running become `interrupted_unknown`,
    /// firings missed while it was down are recorded (one receipt per cron), a
    /// `catch_up = "once"` cron gets its late run, and the schedulers start.
    pub async fn start(&self) -> Result<(), StoreError> {
        let interrupted = self
            .record_interrupted(|tx| tx.interrupt_unknown_cron_receipts())
            .await?;
        if interrupted > 0 {
            tracing::warn!(
                receipts = interrupted,
                "cron firings running when the daemon died are recorded interrupted_unknown; they are not replayed"
            );
        }
        self.load_paused().await?;
        for cron in self.served() {
            self.account_misses(&cron).await?;
        }
        self.spawn_schedulers();
        Ok(())
    }

    /// On a database shared by several daemons: the firings a lost node left running are
    /// recorded `interrupted_unknown` (with their `cron.interrupted` events) by the node that
    /// noticed, instead of at the lost node's next start. Returns how many.
    pub async fn recover_lost_nodes(&self) -> Result<usize, StoreError> {
        self.record_interrupted(|tx| tx.interrupt_cron_receipts_of_lost_nodes())
            .await
    }

    /// Marks the receipts `interrupt` picks `interrupted_unknown` and records their end
    /// events, in one write; returns how many.
    async fn record_interrupted(
        &self,
        interrupt: fn(&canopy_store::Tx<'_>) -> Result<Vec<Receipt>, StoreError>,
    ) -> Result<usize, StoreError> {
        let bus = self.inner.bus.clone();
        let recorded = self
            .inner
            .store
            .write(move |tx| {
                let ended = interrupt(tx)?;
                let events: Vec<Event> = ended.iter().map(end_event).collect();
                bus.record(tx, events, &Cause::default())
            })
            .await?;
        let interrupted = recorded.events();
        if interrupted > 0 {
            self.inner.bus.publish(recorded).await;
        }
        Ok(interrupted)
    }

    /// Reads which crons are paused.
    async fn load_paused(&self) -> Result<(), StoreError> {
        let names: Vec<String> = self.all().iter().map(|c| c.name().to_string()).collect();
        let paused = self
            .inner
            .store
            .read(move |rd| {
                let mut paused = std::collections::HashSet::new();
                for name in names {
                    if rd.cron_state(&name)?.is_some_and(|s| s.paused) {
                        paused.insert(name);
                    }
                }
                Ok::<_, StoreError>(paused)
            })
            .await?;
        *self
            .inner
            .paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = paused;
        Ok(())
    }

    fn is_paused(&self, name: &str) -> bool {
        self.inner
            .paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    /// Puts a new list of crons in force (a config reload): schedulers restart; firings in
    /// progress go on. A cron new to this daemon starts with no misses.
    pub async fn replace(&self, crons: Vec<Cron>) -> Result<(), StoreError> {
        self.stop_schedulers();
        *self
            .inner
            .crons
            .write()
            .unwrap_or_else(PoisonError::into_inner) = crons.into_iter().map(Arc::new).collect();
        self.load_paused().await?;
        for cron in self.served() {
            let name = cron.name().to_string();
            let now = time::Timestamp::now();
            self.inner
                .store
                .write(move |tx| {
                    if tx.cron_state(&name)?.is_none() {
                        tx.set_cron_accounted(&name, now)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await?;
        }
        self.spawn_schedulers();
        Ok(())
    }

    /// Stops scheduling (a planned stop: firings from now on would be refused anyway).
    pub fn stop_schedulers(&self) {
        for task in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }

    /// The crons in force, served on this node or not.
    pub fn all(&self) -> Vec<Arc<Cron>> {
        self.inner
            .crons
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The crons this node runs.
    fn served(&self) -> Vec<Arc<Cron>> {
        let daemon = self.inner.bus.daemon_hooks();
        self.all()
            .into_iter()
            .filter(|c| c.serves(&daemon.identity))
            .collect()
    }

    fn find(&self, name: &str) -> Result<Arc<Cron>, CronError> {
        let all = self.all();
        all.iter()
            .find(|c| c.name() == name)
            .cloned()
            .ok_or_else(|| CronError::Unknown {
                name: name.to_string(),
                known: all.iter().map(|c| c.name().to_string()).collect(),
            })
    }

    fn spawn_schedulers(&self) {
        let mut tasks = self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for cron in self.served() {
            let crons = self.clone();
            tasks.push(tokio::spawn(async move { crons.schedule(cron).await }).abort_handle());
        }
    }

    /// Counts the firings that passed since the cron last accounted for one, records them
    /// `missed`, and runs one late firing when the cron asks for it.
    async fn account_misses(&self, cron: &Arc<Cron>) -> Result<(), StoreError> {
        let name = cron.name().to_string();
        let state = {
            let name = name.clone();
            self.inner
                .store
                .read(move |rd| rd.cron_state(&name))
                .await?
        };
        let now = Timestamp::now();
        let missed = match &state {
            Some(state) if state.paused => return Ok(()),
            Some(state) => state
                .accounted_through
                .and_then(|since| cron.schedule.between(since.as_jiff(), now, MISSED_CAP)),
            None => None,
        };
        let node = self.inner.bus.node();
        let catch_up = cron.config.catch_up == CatchUp::Once && missed.is_some();
        let bus = self.inner.bus.clone();
        let recorded = self
            .inner
            .store
            .write(move |tx| {
                tx.set_cron_accounted(&name, now.into())?;
                let Some((count, first, last)) = missed else {
                    return Ok(crate::bus::Recorded::default());
                };
                let receipt = tx.insert_cron_receipt(&NewReceipt {
                    run_id: canopy_store::new_id(),
                    cron: name.clone(),
                    node,
                    trigger: Trigger::Schedule,
                    scheduled_at: Some(last.into()),
                    status: ReceiptStatus::Missed,
                    error: Some(format!(
                        "{count} scheduled firing{} passed while the daemon was down (first {first}, last {last}); {}",
                        if count == 1 { "" } else { "s" },
                        if catch_up { "one late run follows (catch_up = \"once\")" } else { "not run" }
                    )),
                    missed_count: Some(i64::try_from(count).unwrap_or(i64::MAX)),
                    actor: Actor::Cron(name.clone()).to_string(),
                    starts_at: None,
                })?;
                let event = Event::new(&events::cron::CronMissed {
                    cron: name.clone(),
                    run_id: receipt.run_id,
                    missed_count: i64::try_from(count).unwrap_or(i64::MAX),
                    first_missed_at: first.into(),
                    last_missed_at: last.into(),
                    catch_up,
                });
                bus.record(tx, [event], &cron_cause(&name))
            })
            .await?;
        if recorded.events() > 0 {
            tracing::warn!(cron = %cron.name(), "scheduled firings passed while the daemon was down; recorded missed");
        }
        self.inner.bus.publish(recorded).await;
        if catch_up {
            self.fire(cron.clone(), Trigger::CatchUp, None, None)
                .await?;
        }
        Ok(())
    }

    /// One cron's scheduler: wakes [`LEAD`] before each scheduled second (plus jitter), fires,
    /// and the firing's process starts on the mark.
    async fn schedule(self, cron: Arc<Cron>) {
        let mut after = Timestamp::now();
        while let Some(next) = cron.schedule.next_after(after) {
            let until_mark = |now: Timestamp| -> Duration {
                next.duration_since(now)
                    .try_into()
                    .unwrap_or(Duration::ZERO)
            };
            let jitter = jitter(cron.jitter);
            let to_mark = until_mark(Timestamp::now()) + jitter;
            let mark = tokio::time::Instant::now() + to_mark;
            let wall_mark = std::time::SystemTime::now() + to_mark;
            tokio::time::sleep_until(mark.checked_sub(LEAD).unwrap_or(mark)).await;
            after = next;
            if self.is_paused(cron.name()) {
                continue;
            }
            if let Err(err) = self
                .fire(
                    cron.clone(),
                    Trigger::Schedule,
                    Some(next),
                    Some((mark, wall_mark)),
                )
                .await
            {
                tracing::error!(cron = %cron.name(), error = %err, "cannot record a cron firing");
            }
        }
    }

    /// `canopy cron run NAME`: fires the cron now, on this node; returns its receipt once it
    /// is written (the action runs on).
    pub async fn run_now(&self, name: &str) -> Result<Receipt, CronError> {
        let cron = self.find(name)?;
        let daemon = self.inner.bus.daemon_hooks();
        if !cron.serves(&daemon.identity) {
            return Err(CronError::NotServed {
                name: name.to_string(),
                why: format!(
                    "this node is `{}` with roles [{}]; the cron's nodes are [{}], roles_permitted [{}]",
                    daemon.identity.node,
                    daemon.identity.roles.join(", "),
                    cron.config.nodes.join(", "),
                    cron.config.roles_permitted.join(", ")
                ),
            });
        }
        Ok(self.fire(cron, Trigger::Manual, None, None).await?)
    }

    /// Records a firing and, when it is admitted, starts its action. The receipt is written
    /// before anything is spawned.
    async fn fire(
        &self,
        cron: Arc<Cron>,
        trigger: Trigger,
        scheduled: Option<Timestamp>,
        not_before: Option<(tokio::time::Instant, std::time::SystemTime)>,
    ) -> Result<Receipt, StoreError> {
        let name = cron.name().to_string();
        let run_id = canopy_store::new_id();
        let admitted = self.inner.bus.drain().admit();
        // Decided and registered under one lock, so two firings cannot both see none running.
        let (status, error, firing) = {
            let mut running = self
                .inner
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let current = running.entry(name.clone()).or_default();
            if admitted.is_none() {
                (
                    ReceiptStatus::Refused,
                    Some(
                        "the daemon is stopping: a planned stop closed cron admission".to_string(),
                    ),
                    None,
                )
            } else if cron.config.overlap == Overlap::Forbid && !current.is_empty() {
                let others: Vec<&str> = current.iter().map(|f| f.run_id.as_str()).collect();
                (
                    ReceiptStatus::Skipped,
                    Some(format!(
                        "the previous firing (run {}) still runs (overlap = \"forbid\")",
                        others.join(", ")
                    )),
                    None,
                )
            } else {
                if cron.config.overlap == Overlap::Replace {
                    for other in current.iter() {
                        *other
                            .replaced_by
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = Some(run_id.clone());
                        other.switch.fire();
                    }
                }
                let firing = Arc::new(Firing {
                    run_id: run_id.clone(),
                    switch: StopSwitch::default(),
                    replaced_by: Mutex::default(),
                });
                current.push(firing.clone());
                (ReceiptStatus::Running, None, Some(firing))
            }
        };
        let new = NewReceipt {
            run_id: run_id.clone(),
            cron: name.clone(),
            node: self.inner.bus.node(),
            trigger,
            scheduled_at: scheduled.map(time::Timestamp::from),
            status,
            error,
            missed_count: None,
            actor: Actor::Cron(name.clone()).to_string(),
            starts_at: not_before.map(|(_, at)| at),
        };
        let bus = self.inner.bus.clone();
        let written = self
            .inner
            .store
            .write(move |tx| {
                let receipt = tx.insert_cron_receipt(&new)?;
                if let Some(at) = new.scheduled_at {
                    tx.set_cron_accounted(&new.cron, at)?;
                }
                let fired = Event::new(&events::cron::CronFired(firing_of(&receipt)));
                let mut events = vec![fired];
                if receipt.status != ReceiptStatus::Running {
                    events.push(end_event(&receipt));
                }
                let recorded = bus.record(tx, events, &cron_cause(&new.cron))?;
                Ok::<_, StoreError>((receipt, recorded))
            })
            .await;
        let (receipt, recorded) = match written {
            Ok(written) => written,
            Err(err) => {
                self.forget(&name, &run_id);
                return Err(err);
            }
        };
        self.inner.bus.publish(recorded).await;
        match (firing, admitted) {
            (Some(firing), Some(admitted)) => {
                let crons = self.clone();
                let written = receipt.clone();
                tokio::spawn(async move {
                    crons
                        .execute(
                            cron,
                            firing,
                            written,
                            scheduled,
                            not_before.map(|(at, _)| at),
                        )
                        .await;
                    drop(admitted);
                });
            }
            _ => {
                tracing::info!(cron = %name, run_id = %run_id, status = %receipt.status, "cron firing not run");
            }
        }
        Ok(receipt)
    }

    fn forget(&self, name: &str, run_id: &str) {
        let mut running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = running.get_mut(name) {
            list.retain(|f| f.run_id != run_id);
        }
    }

    /// Runs a firing's action and records its end.
    async fn execute(
        &self,
        cron: Arc<Cron>,
        firing: Arc<Firing>,
        receipt: Receipt,
        scheduled: Option<Timestamp>,
        not_before: Option<tokio::time::Instant>,
    ) {
        let name = cron.name().to_string();
        let workdir = cron
            .config
            .cwd
            .as_ref()
            .map_or_else(|| self.inner.data_dir.clone(), PathBuf::from);
        let markers = [
            ("cron_name", name.clone()),
            ("run_id", receipt.run_id.clone()),
            (
                "scheduled_at",
                scheduled.map(|t| t.to_string()).unwrap_or_default(),
            ),
            ("node", receipt.node.clone()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let provenance = Provenance {
            graph_id: String::new(),
            graph_name: String::new(),
            run_id: receipt.run_id.clone(),
            event: format!("cron:{name}"),
            hook_index: None,
            spec_id: None,
            // The runner says what kind of work it is.
            ..Default::default()
        };
        // A cron's action is one level below its firing: what it does is the cron's, at depth 1.
        let cause = Cause {
            actor: Actor::Cron(name.clone()),
            depth: 1,
        };
        // The sync hooks on `cron.pre_fire` decide whether the action runs, and may patch it.
        let (work, decision) = self.ask_pre_fire(&cron, &receipt).await;
        let work = match work {
            Ok(work) => work,
            Err(denied) => {
                let end = ReceiptEnd {
                    status: ReceiptStatus::Denied,
                    exit_code: None,
                    output: None,
                    error: Some(denied),
                    duration_ms: 0,
                };
                self.record_end(&cron, &receipt.run_id, end, decision).await;
                self.forget(&name, &receipt.run_id);
                return;
            }
        };
        let job = Job {
            markers,
            supported_markers: Cow::Borrowed(CRON_MARKERS),
            timeout: cron.timeout,
            env: vec![
                ("CANOPY_CRON_NAME".to_string(), name.clone()),
                ("CANOPY_CRON_RUN_ID".to_string(), receipt.run_id.clone()),
            ],
            stop: Some(firing.switch.signal()),
            not_before,
            ..Job::new(Kind::Cron, Ok(work), workdir, provenance, cause)
        };
        let ran = runner::run(&self.inner.plugins, job).await;
        let replaced_by = firing
            .replaced_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let end = ending(ran, replaced_by);
        self.record_end(&cron, &receipt.run_id, end, decision).await;
        self.forget(&name, &receipt.run_id);
    }

    /// Asks the sync hooks on `cron.pre_fire` whether a firing runs its action
    /// ([`crate::hooks::decide`]): the action as they patched it, or why it does not run; and
    /// the decision's hook runs, recorded with the firing's end.
    async fn ask_pre_fire(
        &self,
        cron: &Cron,
        receipt: &Receipt,
    ) -> (Result<WorkConfig, String>, Option<DecisionRecord>) {
        const PRE_FIRE: &str = "cron.pre_fire";
        if !self.inner.bus.asks(PRE_FIRE) {
            return (Ok(cron.work.clone()), None);
        }
        let text = |field: &str| {
            cron.work
                .config()
                .get(field)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        let question = events::cron::CronPreFire {
            firing: firing_of(receipt),
            mode: cron.work.mode.clone(),
            command: text("command"),
            prompt: text("prompt"),
        };
        let question = Question::of(&question, cron_cause(cron.name()));
        let mut decision = self.inner.bus.decide_unrecorded(question).await;
        let record = decision.record.take();
        match decision.verdict {
            Verdict::Deny { hook, reason } => (
                Err(format!("sync hook `{hook}` denied the firing: {reason}")),
                record,
            ),
            Verdict::Allow => (Ok(cron.work.patched(&decision.patch)), record),
        }
    }

    /// Records a firing's end (with the hook runs of the decision that let it run, or not).
    async fn record_end(
        &self,
        cron: &Cron,
        run_id: &str,
        end: ReceiptEnd,
        decision: Option<DecisionRecord>,
    ) {
        let (run_id, name, keep) = (
            run_id.to_string(),
            cron.name().to_string(),
            cron.keep_receipts,
        );
        let oldest = oldest_kept(self.inner.keep_days);
        let bus = self.inner.bus.clone();
        let written = self
            .inner
            .store
            .write(move |tx| {
                let mut recorded = match decision {
                    Some(record) => bus.record_decision(tx, record)?,
                    None => crate::bus::Recorded::default(),
                };
                let Some(receipt) = tx.finish_cron_receipt(&run_id, &end)? else {
                    return Ok(recorded);
                };
                tx.prune_cron_receipts(&name, keep, oldest)?;
                recorded.extend(bus.record(tx, [end_event(&receipt)], &cron_cause(&name))?);
                Ok::<_, StoreError>(recorded)
            })
            .await;
        match written {
            Ok(recorded) => self.inner.bus.publish(recorded).await,
            Err(err) => {
                tracing::error!(cron = %cron.name(), error = %err, "cannot record the end of a cron firing");
            }
        }
    }

    /// At the end of a planned stop: receipts still running (their action did not end within
    /// the force grace) are recorded `interrupted_by_restart`.
    pub async fn record_unfinished(&self) -> Result<usize, StoreError> {
        let bus = self.inner.bus.clone();
        let recorded = self
            .inner
            .store
            .write(move |tx| {
                let mut events = Vec::new();
                for receipt in tx.running_cron_receipts()? {
                    let end = ReceiptEnd {
                        status: ReceiptStatus::InterruptedByRestart,
                        exit_code: None,
                        output: None,
                        error: Some("a planned stop forced it, and it did not end within the force grace; its output was not collected".to_string()),
                        duration_ms: 0,
                    };
                    if let Some(ended) = tx.finish_cron_receipt(&receipt.run_id, &end)? {
                        events.push(end_event(&ended));
                    }
                }
                bus.record(tx, events, &Cause::default())
            })
            .await?;
        let count = recorded.events();
        self.inner.bus.publish(recorded).await;
        Ok(count)
    }

    /// Every cron with its state, next firing and last execution.
    pub async fn list(&self) -> Result<Vec<CronView>, StoreError> {
        let mut views = Vec::new();
        for cron in self.all() {
            views.push(self.view(&cron).await?);
        }
        Ok(views)
    }

    /// One cron, by name.
    pub async fn get(&self, name: &str) -> Result<CronView, CronError> {
        let cron = self.find(name)?;
        Ok(self.view(&cron).await?)
    }

    async fn view(&self, cron: &Cron) -> Result<CronView, StoreError> {
        let name = cron.name().to_string();
        let (state, last) = self
            .inner
            .store
            .read(move |rd| {
                Ok::<_, StoreError>((rd.cron_state(&name)?, rd.last_cron_execution(&name)?))
            })
            .await?;
        let paused = state.is_some_and(|s| s.paused);
        let daemon = self.inner.bus.daemon_hooks();
        let served = cron.serves(&daemon.identity);
        let running: Vec<String> = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cron.name())
            .map(|list| list.iter().map(|f| f.run_id.clone()).collect())
            .unwrap_or_default();
        let state = if !served {
            CronActivity::NotServedHere
        } else if !running.is_empty() {
            CronActivity::Running
        } else if paused {
            CronActivity::Paused
        } else {
            CronActivity::Idle
        };
        Ok(CronView {
            name: cron.name().to_string(),
            schedule: cron.config.schedule.clone(),
            timezone: cron
                .config
                .timezone
                .clone()
                .unwrap_or_else(|| "UTC".to_string()),
            runs: action_summary(&cron.config.action),
            served,
            paused,
            state,
            next_at: (served && !paused)
                .then(|| cron.schedule.next_after(Timestamp::now()))
                .flatten()
                .map(time::Timestamp::from),
            overlap: cron.config.overlap,
            catch_up: cron.config.catch_up,
            timeout_secs: cron.config.timeout_secs,
            running,
            last,
        })
    }

    /// A cron's receipts, newest first.
    pub async fn receipts(&self, name: &str, last: usize) -> Result<Vec<Receipt>, CronError> {
        // A cron taken out of the config keeps its receipts: they are read all the same.
        let known = self.find(name);
        let key = match &known {
            Ok(cron) => cron.name().to_string(),
            Err(_) => name.to_string(),
        };
        let receipts = self
            .inner
            .store
            .read(move |rd| rd.cron_receipts(&key, last))
            .await?;
        match known {
            Err(unknown) if receipts.is_empty() => Err(unknown),
            _ => Ok(receipts),
        }
    }

    /// Pauses or resumes a cron (kept across restarts).
    pub async fn set_paused(&self, name: &str, paused: bool) -> Result<CronView, CronError> {
        let cron = self.find(name)?;
        let key = cron.name().to_string();
        let now = time::Timestamp::now();
        self.inner
            .store
            .write(move |tx| tx.set_cron_paused(&key, paused, now))
            .await?;
        {
            let mut set = self
                .inner
                .paused
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if paused {
                set.insert(cron.name().to_string());
            } else {
                set.remove(cron.name());
            }
        }
        tracing::info!(cron = %cron.name(), paused, "cron {}", if paused { "paused" } else { "resumed" });
        Ok(self.view(&cron).await?)
    }
}

/// How a firing's call ended, as its receipt says.
fn ending(ran: Ran, replaced_by: Option<String>) -> ReceiptEnd {
    let exit_code = ran.report().and_then(|report| report.exit_code);
    let output = ran.output(OUTPUT_LIMIT);
    let (status, error) = match ran.ending {
        Ending::Completed => (ReceiptStatus::Completed, None),
        Ending::Failed(reason) => (ReceiptStatus::Failed, Some(reason)),
        Ending::TimedOut(reason) => (ReceiptStatus::TimedOut, Some(reason)),
        Ending::Interrupted(_) => match replaced_by {
            Some(by) => (
                ReceiptStatus::Failed,
                Some(format!(
                    "replaced by the next firing (run {by}; overlap = \"replace\")"
                )),
            ),
            None => (
                ReceiptStatus::InterruptedByRestart,
                Some(
                    "a planned stop forced it after its drain budget; the output is what it printed until then"
                        .to_string(),
                ),
            ),
        },
        Ending::LimitBlocked(hit) => (ReceiptStatus::Failed, Some(hit.as_failure())),
        Ending::Blocked(blocker) => (
            ReceiptStatus::Failed,
            Some(format!("the action reported blocked: {blocker}")),
        ),
    };
    ReceiptEnd {
        status,
        exit_code,
        output,
        error,
        duration_ms: ran.duration_ms,
    }
}

/// Who a cron's events are caused by.
fn cron_cause(name: &str) -> Cause {
    Cause {
        actor: Actor::Cron(name.to_string()),
        depth: 0,
    }
}

fn firing_of(receipt: &Receipt) -> events::cron::CronFiring {
    events::cron::CronFiring {
        cron: receipt.cron.clone(),
        run_id: receipt.run_id.clone(),
        trigger: receipt.trigger.to_string(),
        scheduled_at: receipt.scheduled_at,
    }
}

/// The `cron.*` event of a receipt that ended.
fn end_event(receipt: &Receipt) -> Event {
    let ended = events::cron::CronEnded {
        firing: firing_of(receipt),
        status: receipt.status,
        exit_code: receipt.exit_code,
        error: receipt.error.clone(),
        duration_ms: receipt.duration_ms,
    };
    if receipt.status == ReceiptStatus::Completed {
        Event::new(&events::cron::CronCompleted(ended))
    } else if receipt.status.is_interrupted() {
        Event::new(&events::cron::CronInterrupted(ended))
    } else {
        Event::new(&events::cron::CronFailed(ended))
    }
}

/// A random delay in `[0, max]`.
fn jitter(max: Duration) -> Duration {
    let max_ms = max.as_millis();
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let draw = getrandom::u64().unwrap_or(0);
    let millis = u128::from(draw) % (max_ms + 1);
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// The oldest receipt time kept by the feed's retention.
fn oldest_kept(keep_days: u32) -> time::Timestamp {
    time::Timestamp::ago(Duration::from_secs(u64::from(keep_days) * 24 * 60 * 60))
}

/// An action in one line, for a listing: its command (first line), its agent platform, its
/// named action or its mode.
fn action_summary(action: &serde_json::Map<String, serde_json::Value>) -> String {
    let text = |key: &str| action.get(key).and_then(serde_json::Value::as_str);
    if let Some(command) = text("command") {
        let first = command.lines().next().unwrap_or_default();
        let more = if command.trim_end().contains('\n') {
            " …"
        } else {
            ""
        };
        return format!("command: {first}{more}");
    }
    if let Some(platform) = text("platform") {
        return format!("agent {platform}");
    }
    if let Some(name) = text("action") {
        return format!("action {name}");
    }
    match text("mode") {
        Some(mode) => format!("mode {mode}"),
        None => "-".to_string(),
    }
}
