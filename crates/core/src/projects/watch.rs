//! The project watcher: one task per configured project, noticing when its checkout's HEAD
//! moves to a new commit (`project.checkout_updated`) and when a new tag appears
//! (`project.tag_pushed`).
//!
//! It reads the checkout with `git` (each call bounded by [`GIT_TIMEOUT`]) when a filesystem
//! notification says the git dir's `HEAD`, `packed-refs` or `refs/` changed, and every
//! `poll_secs` (30 s by default) in case a notification was missed. What it reads is compared
//! with what the store says it last saw ([`canopy_store::projects`]), and the difference is
//! recorded as events **in the same write** that records what was seen, so the hooks an event
//! fires and the state that made it are durable together:
//!
//! - the first observation of a checkout (or of a project whose `checkout` changed) records a
//!   baseline and fires nothing;
//! - after a restart, what changed while the daemon was down fires once; what it had seen,
//!   never again.
//!
//! The watcher cannot know who moved the checkout. A change seen while one of the project's own
//! hooks ran (since the watcher's previous look) is recorded as that hook's, one dispatch level
//! deeper, so a hook that commits to its own checkout ends at `max_dispatch_depth` like any
//! hook loop; any other change is the user's. At most [`MAX_NEW_TAGS`] tags fire per observation (a first fetch of a large
//! repository's tags is recorded as seen without firing hundreds of hooks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::sync::{mpsc, oneshot};

use super::Project;
use crate::bus::Bus;
use canopy_model::events::project::{CheckoutUpdated, TagPushed};
use canopy_model::events::{Actor, Cause, Event};
use canopy_model::time::Timestamp;
use canopy_store::projects::CheckoutState;

/// How long one `git` call may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the watcher waits after a notification for the rest of a burst (a commit writes
/// several files) before it reads the checkout.
const SETTLE: Duration = Duration::from_millis(150);

/// Tags read from a checkout at most.
pub const MAX_TAGS: usize = 100_000;

/// New tags that fire `project.tag_pushed` in one observation at most; the rest are recorded
/// as seen.
pub const MAX_NEW_TAGS: usize = 100;

/// Bytes of a `git` call's output read at most.
const MAX_GIT_OUTPUT: usize = 32 * 1024 * 1024;

/// The watchers running, one per project with a checkout.
pub struct Watchers {
    bus: Bus,
    drain: crate::drain::Drain,
    running: Mutex<BTreeMap<String, Running>>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers").finish_non_exhaustive()
    }
}

struct Running {
    project: Project,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Watchers {
    /// No watcher yet; [`Watchers::apply`] starts them. A watcher reads nothing once the
    /// daemon's drain has closed (a planned stop): what changes then is seen at the next start.
    pub fn new(bus: Bus, drain: crate::drain::Drain) -> Self {
        Self {
            bus,
            drain,
            running: Mutex::new(BTreeMap::new()),
        }
    }

    /// Watches exactly these projects: starts the new ones, stops the ones gone, restarts the
    /// ones whose checkout or interval changed. Returns how many run.
    pub fn apply(&self, projects: &[Project]) -> usize {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, r)| !projects.iter().any(|p| &p.name == *name && *p == r.project))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(old) = running.remove(&name) {
                let _ = old.stop.send(());
                tracing::info!(project = %name, "project watcher stopped");
            }
        }
        let identity = self.bus.daemon_hooks().identity.clone();
        for project in projects {
            if running.contains_key(&project.name) {
                continue;
            }
            if !identity.runs(&project.nodes, &project.roles_permitted) {
                // Another node watches it (`nodes` / `roles_permitted`): its checkout lives
                // there, and its lifecycle hooks run there.
                tracing::info!(project = %project.name, node = %identity.node, "project not watched on this node: its `nodes` / `roles_permitted` name others");
                continue;
            }
            let (stop, stopped) = oneshot::channel();
            let task = tokio::spawn(watch(
                self.bus.clone(),
                self.drain.clone(),
                project.clone(),
                stopped,
            ));
            tracing::info!(project = %project.name, checkout = %project.checkout.display(), "project watcher started");
            running.insert(
                project.name.clone(),
                Running {
                    project: project.clone(),
                    stop,
                    task,
                },
            );
        }
        running.len()
    }

    /// Stops every watcher and waits for them (at a stop): none records anything after this.
    pub async fn stop(&self) {
        let all: Vec<Running> = {
            let mut running = self
                .running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::take(&mut *running).into_values().collect()
        };
        let mut tasks = Vec::with_capacity(all.len());
        for one in all {
            let _ = one.stop.send(());
            tasks.push((one.project.name, one.task));
        }
        // A watcher in the middle of a git call or a write finishes it first: at most a git
        // call's timeout and a write.
        let deadline = tokio::time::Instant::now() + GIT_TIMEOUT * 2;
        for (name, mut task) in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                tracing::warn!(project = %name, "a project watcher did not stop in time; it was cut short");
            }
        }
    }
}

/// One project's watcher, until `stop` fires.
async fn watch(
    bus: Bus,
    drain: crate::drain::Drain,
    project: Project,
    mut stop: oneshot::Receiver<()>,
) {
    // One pending wake is enough: the watcher reads the whole state each time.
    let (wake, mut woken) = mpsc::channel::<()>(1);
    let mut notifier: Option<notify::RecommendedWatcher> = None;
    // The last problem logged, so a checkout that stays missing is not logged every interval.
    let mut last_problem: Option<String> = None;
    // When the previous look began: a hook of the project that ran since may have made what
    // this one sees.
    let mut previous_look = Timestamp::now();
    // Whether setting up notifications failed (logged once until they work again).
    let mut notify_failed = false;
    loop {
        if !drain.is_closed() {
            let look = Timestamp::now();
            let since = std::mem::replace(&mut previous_look, look);
            let outcome = async {
                let dirs = git_dirs(&project.checkout).await?;
                if notifier.is_none() {
                    // Without notifications (an inotify watch limit reached, say) the checkout
                    // is still read every poll_secs.
                    match notify_on(&dirs, wake.clone()) {
                        Ok(watcher) => {
                            notifier = Some(watcher);
                            notify_failed = false;
                        }
                        Err(err) => {
                            if !notify_failed {
                                tracing::warn!(project = %project.name, error = %format!("{err:#}"), "no filesystem notifications for the project's checkout; it is read every poll_secs only");
                            }
                            notify_failed = true;
                        }
                    }
                }
                observe(&bus, &project, &dirs, since).await
            }
            .await;
            match outcome {
                Ok(()) => {
                    if last_problem.take().is_some() {
                        tracing::info!(project = %project.name, "the project's checkout can be read again");
                    }
                }
                Err(err) => {
                    let text = format!("{err:#}");
                    if last_problem.as_ref() != Some(&text) {
                        tracing::warn!(project = %project.name, checkout = %project.checkout.display(), error = %text, "cannot read the project's checkout; trying again every poll_secs");
                    }
                    last_problem = Some(text);
                    // The checkout may have been replaced; watch it anew once it is back.
                    notifier = None;
                }
            }
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = woken.recv() => {
                tokio::time::sleep(SETTLE).await;
                while woken.try_recv().is_ok() {}
            }
            () = tokio::time::sleep(project.poll) => {}
        }
    }
}

/// Where a checkout's git data is: its own git dir (`HEAD`) and the common one (`refs/`,
/// `packed-refs`), which differ for a linked worktree.
#[derive(Debug, Clone)]
struct GitDirs {
    /// The checkout, canonical.
    checkout: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
}

async fn git_dirs(checkout: &Path) -> Result<GitDirs> {
    let real = tokio::fs::canonicalize(checkout)
        .await
        .with_context(|| format!("checkout {} is not there", checkout.display()))?;
    let out = git(
        &real,
        &["rev-parse", "--absolute-git-dir", "--git-common-dir"],
    )
    .await?
    .ok_or_else(|| anyhow!("{} is not a git checkout", real.display()))?;
    let mut lines = out.lines();
    let (Some(git_dir), Some(common)) = (lines.next(), lines.next()) else {
        bail!("git rev-parse gave no git dir for {}", real.display());
    };
    let git_dir = PathBuf::from(git_dir);
    let common_dir = if Path::new(common).is_absolute() {
        PathBuf::from(common)
    } else {
        real.join(common)
    };
    Ok(GitDirs {
        checkout: real,
        git_dir,
        common_dir,
    })
}

/// Watches the git dirs; each change to `HEAD`, `packed-refs` or under `refs/` wakes the
/// watcher.
fn notify_on(dirs: &GitDirs, wake: mpsc::Sender<()>) -> Result<notify::RecommendedWatcher> {
    use notify::{RecursiveMode, Watcher as _};
    let refs = dirs.common_dir.join("refs");
    let refs_in_handler = refs.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(event) => event.paths.iter().any(|path| {
                path.starts_with(&refs_in_handler)
                    || path
                        .file_name()
                        .is_some_and(|name| name == "HEAD" || name == "packed-refs")
            }),
            // A lost notification: read the checkout, to be sure.
            Err(_) => true,
        };
        if relevant {
            // Full: a wake is pending already.
            let _ = wake.try_send(());
        }
    })
    .context("cannot start filesystem notifications")?;
    watcher
        .watch(&dirs.git_dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dirs.git_dir.display()))?;
    if dirs.common_dir != dirs.git_dir {
        watcher
            .watch(&dirs.common_dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch {}", dirs.common_dir.display()))?;
    }
    watcher
        .watch(&refs, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", refs.display()))?;
    Ok(watcher)
}

/// Runs `git` in `dir` (never prompting, taking no optional lock, bounded in time and output):
/// `Some(stdout)` when it succeeded, `None` when it exited 1 (git's "not found" for the
/// queries used here), an error otherwise.
async fn git(dir: &Path, args: &[&str]) -> Result<Option<String>> {
    use tokio::io::AsyncReadExt as _;
    let mut child = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        // The checkout is found from `dir` alone, whatever the daemon was started with.
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_COMMON_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot run git")?;
    let mut stdout = child.stdout.take().context("git's stdout")?;
    let mut stderr = child.stderr.take().context("git's stderr")?;
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let limit = u64::try_from(MAX_GIT_OUTPUT).unwrap_or(u64::MAX);
        let mut stdout = (&mut stdout).take(limit);
        let mut stderr = (&mut stderr).take(64 * 1024);
        let (read_out, read_err) =
            tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err),);
        read_out.context("cannot read git's output")?;
        read_err.context("cannot read git's errors")?;
        let status = child.wait().await.context("cannot wait for git")?;
        Ok::<_, anyhow::Error>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(GIT_TIMEOUT, run).await.map_err(|_| {
        anyhow!(
            "git {} took longer than {}s in {}",
            args.join(" "),
            GIT_TIMEOUT.as_secs(),
            dir.display()
        )
    })??;
    match status.code() {
        Some(0) => Ok(Some(String::from_utf8_lossy(&out).into_owned())),
        Some(1) => Ok(None),
        _ => bail!(
            "git {} failed in {} ({status}): {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&err).trim()
        ),
    }
}

/// Reads a checkout's HEAD, branch and tags.
async fn read_checkout(dirs: &GitDirs) -> Result<CheckoutState> {
    let dir = &dirs.checkout;
    let head_sha = git(dir, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .await?
        .map(|out| out.trim().to_string())
        .filter(|sha| !sha.is_empty());
    let branch = git(dir, &["symbolic-ref", "--quiet", "--short", "HEAD"])
        .await?
        .map(|out| out.trim().to_string())
        .filter(|b| !b.is_empty());
    let count = format!("--count={MAX_TAGS}");
    let listing = git(
        dir,
        &[
            "for-each-ref",
            &count,
            "--format=%(objectname) %(*objectname) %(refname:strip=2)",
            "refs/tags",
        ],
    )
    .await?
    .unwrap_or_default();
    Ok(CheckoutState {
        checkout: dirs.checkout.to_string_lossy().into_owned(),
        head_sha,
        branch,
        tags: parse_tags(&listing),
    })
}

/// `for-each-ref` lines (`<object> <peeled object or nothing> <name>`) as tag → the commit it
/// points at (an annotated tag's peeled commit).
fn parse_tags(listing: &str) -> BTreeMap<String, String> {
    listing
        .lines()
        .filter_map(|line| {
            let (object, rest) = line.split_once(' ')?;
            let (peeled, name) = rest.split_once(' ')?;
            let sha = if peeled.is_empty() { object } else { peeled };
            (!name.is_empty()).then(|| (name.to_string(), sha.to_string()))
        })
        .collect()
}

/// The events that going from `before` to `now` makes, for project `name`: none for a first
/// observation (or a new checkout path), else a `checkout_updated` when HEAD moved and a
/// `tag_pushed` per new tag (at most [`MAX_NEW_TAGS`]).
fn changes(name: &str, before: Option<&CheckoutState>, now: &CheckoutState) -> Vec<Event> {
    let Some(before) = before.filter(|b| b.checkout == now.checkout) else {
        return Vec::new();
    };
    let mut events = Vec::new();
    if let Some(sha) = &now.head_sha
        && now.head_sha != before.head_sha
    {
        events.push(Event::new(&CheckoutUpdated {
            project_name: name.to_string(),
            checkout: now.checkout.clone(),
            commit_sha: sha.clone(),
            previous_sha: before.head_sha.clone(),
            branch: now.branch.clone(),
        }));
    }
    let new: Vec<(&String, &String)> = now
        .tags
        .iter()
        .filter(|(tag, _)| !before.tags.contains_key(*tag))
        .collect();
    if new.len() > MAX_NEW_TAGS {
        tracing::warn!(project = %name, new_tags = new.len(), fired = MAX_NEW_TAGS, "more new tags than fire at once; the rest are recorded as seen");
    }
    for (tag, sha) in new.into_iter().take(MAX_NEW_TAGS) {
        events.push(Event::new(&TagPushed {
            project_name: name.to_string(),
            checkout: now.checkout.clone(),
            tag: tag.clone(),
            commit_sha: sha.clone(),
        }));
    }
    events
}

/// Reads the checkout and, when it differs from what was last seen, records what it is now and
/// the events that makes, in one write; then publishes them (their hooks start).
async fn observe(bus: &Bus, project: &Project, dirs: &GitDirs, since: Timestamp) -> Result<()> {
    let now = read_checkout(dirs).await?;
    let name = project.name.clone();
    let seen = bus
        .store()
        .read(move |rd| rd.project_state(&name))
        .await
        .context("cannot read what the checkout was last seen at")?;
    if seen.as_ref() == Some(&now) {
        return Ok(());
    }
    let (writer, name) = (bus.clone(), project.name.clone());
    let recorded = bus
        .store()
        .write(move |tx| {
            // Read again inside the write: what is recorded is exactly the difference.
            let before = tx.project_state(&name)?;
            let events = changes(&name, before.as_ref(), &now);
            if before.is_none() || before.as_ref().is_some_and(|b| b.checkout != now.checkout) {
                tracing::info!(project = %name, head = now.head_sha.as_deref().unwrap_or("(no commit)"), tags = now.tags.len(), "project checkout baseline recorded; nothing fires for it");
            }
            tx.save_project_state(&name, before.as_ref(), &now)?;
            if events.is_empty() {
                return Ok(crate::bus::Recorded::default());
            }
            let cause = match tx.project_hook_activity(&name, since)? {
                Some(hook) => Cause {
                    actor: Actor::Hook(hook.hook_name),
                    depth: hook.dispatch_depth.saturating_add(1),
                },
                None => Cause::user(),
            };
            writer.record(tx, events, &cause)
        })
        .await
        .context("cannot record the checkout's state")?;
    for envelope in recorded.envelopes() {
        tracing::info!(project = %project.name, event = %envelope.event, target = envelope.target.as_deref().unwrap_or(""), "project event");
    }
    bus.publish(recorded).await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn state(head: Option<&str>, tags: &[(&str, &str)]) -> CheckoutState {
        CheckoutState {
            checkout: "/w".into(),
            head_sha: head.map(str::to_string),
            branch: Some("main".into()),
            tags: tags
                .iter()
                .map(|(t, s)| ((*t).to_string(), (*s).to_string()))
                .collect(),
        }
    }

    fn names(events: &[Event]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| {
                let field = if e.name() == "project.tag_pushed" {
                    "tag"
                } else {
                    "commit_sha"
                };
                (
                    e.name().to_string(),
                    e.payload[field].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_first_observation_or_a_new_checkout_fires_nothing() {
        let now = state(Some("b"), &[("v1", "b")]);
        assert!(changes("web", None, &now).is_empty());
        let mut elsewhere = state(Some("a"), &[]);
        elsewhere.checkout = "/other".into();
        assert!(changes("web", Some(&elsewhere), &now).is_empty());
    }

    #[test]
    fn a_moved_head_and_new_tags_fire_once_each() {
        let before = state(Some("a"), &[("v1", "a")]);
        let now = state(Some("b"), &[("v1", "a"), ("v2", "b"), ("v3", "b")]);
        let events = changes("web", Some(&before), &now);
        assert_eq!(
            names(&events),
            [
                ("project.checkout_updated".to_string(), "b".to_string()),
                ("project.tag_pushed".to_string(), "v2".to_string()),
                ("project.tag_pushed".to_string(), "v3".to_string()),
            ]
        );
        assert_eq!(events[0].payload["previous_sha"], "a");
        assert_eq!(events[0].project.as_deref(), Some("/w"));
        assert!(changes("web", Some(&now), &now).is_empty());
        // A tag deleted fires nothing; HEAD gone (an emptied repository) fires nothing either.
        assert!(changes("web", Some(&now), &state(None, &[("v1", "a")])).is_empty());
    }

    #[test]
    fn new_tags_past_the_cap_do_not_fire() {
        let before = state(Some("a"), &[]);
        let tags: Vec<(String, String)> = (0..MAX_NEW_TAGS + 5)
            .map(|i| (format!("t{i:04}"), "a".to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = tags.iter().map(|(t, s)| (t.as_str(), s.as_str())).collect();
        let events = changes("web", Some(&before), &state(Some("a"), &refs));
        assert_eq!(events.len(), MAX_NEW_TAGS);
    }

    #[test]
    fn annotated_tags_point_at_their_commit() {
        let tags = parse_tags("aaa  v1\nbbb ccc v2-annotated\n\n");
        assert_eq!(tags["v1"], "aaa");
        assert_eq!(tags["v2-annotated"], "ccc");
        assert_eq!(tags.len(), 2);
    }

    /// Runs git in `dir` for a test, with an identity.
    fn git_sync(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@canopy.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@canopy.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[tokio::test]
    async fn a_repository_without_commits_has_no_head_and_a_worktree_its_own_git_dir() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git_sync(&repo, &["init", "-q", "-b", "main"]);
        let dirs = git_dirs(&repo).await.unwrap();
        let empty = read_checkout(&dirs).await.unwrap();
        assert_eq!(empty.head_sha, None);
        assert_eq!(empty.branch.as_deref(), Some("main"));
        assert!(empty.tags.is_empty());

        git_sync(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git_sync(&repo, &["tag", "-a", "v1", "-m", "one"]);
        let head = git_sync(&repo, &["rev-parse", "HEAD"]);
        let linked = dir.path().join("linked");
        git_sync(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                linked.to_str().unwrap(),
            ],
        );
        let dirs = git_dirs(&linked).await.unwrap();
        assert_ne!(dirs.git_dir, dirs.common_dir);
        assert!(dirs.common_dir.join("refs").is_dir(), "{dirs:?}");
        let seen = read_checkout(&dirs).await.unwrap();
        assert_eq!(seen.head_sha.as_deref(), Some(head.as_str()));
        assert_eq!(seen.branch, None, "detached");
        assert_eq!(seen.tags.get("v1"), Some(&head));

        let err = git_dirs(dir.path()).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("not a git repository"),
            "{err:#}"
        );
    }
}
