//! The built-in `docs-maintenance` executor: keeps a project's docs in step with what shipped.
//!
//! On each call it
//! 1. appends a dated entry listing the completed specs (`{{completed_specs}}`: name and one-line
//!    summary each) to a changelog under the docs path (`docs/CHANGELOG.md` by default, created
//!    if missing) -- deterministic, works offline;
//! 2. when a `platform` is configured, runs that agent in the workdir, asking it to review the
//!    closed specs, the resulting code and the docs, and to update the docs to match;
//! 3. checks with `git status` that the call changed only files under `docs_paths`, and fails
//!    naming every other path it touched;
//! 4. commits the doc files it changed (`commit = true`, the default), so the graph's next run
//!    does not find its workdir dirty and pause on the dirty-tree guard. Only the paths this
//!    call changed are committed; anything that was dirty before is left as it was.
//!
//! Capabilities: `fs-read` (the workdir), `fs-write:docs` (the changelog), `process` (git and
//! the agent). Nothing more.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use canopy_plugin_sdk::agent::{AgentRequest, run_agent};
use canopy_plugin_sdk::{
    Command, Config, Escape, Executor, Invocation, Manifest, Outcome, export_executor, run_command,
};
use serde::Deserialize;

/// The subpath of the workdir this plugin may write.
const WRITABLE: &str = "docs";

fn default_docs_paths() -> Vec<String> {
    vec!["docs".to_string(), "README.md".to_string()]
}

fn default_changelog() -> String {
    "docs/CHANGELOG.md".to_string()
}

/// Config of the `docs-maintenance` mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocsConfig {
    /// Paths (relative to the workdir) that hold documentation; only these may change.
    #[serde(default = "default_docs_paths")]
    docs_paths: Vec<String>,
    /// The changelog file, under `docs/`.
    #[serde(default = "default_changelog")]
    changelog: String,
    /// Agent platform to run for the review; none: only the changelog is written.
    #[serde(default)]
    platform: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    effort: Option<String>,
    /// Extra instructions appended to the review prompt.
    #[serde(default)]
    prompt: Option<String>,
    /// Commit the doc files this call changed (in a git workdir).
    #[serde(default = "default_commit")]
    commit: bool,
}

fn default_commit() -> bool {
    true
}

impl DocsConfig {
    fn check(&self) -> Result<(), String> {
        if self.docs_paths.is_empty() {
            return Err("field `docs_paths` must name at least one path".to_string());
        }
        for (index, path) in self.docs_paths.iter().enumerate() {
            relative_path(path).map_err(|err| format!("field `docs_paths[{index}]`: {err}"))?;
        }
        relative_path(&self.changelog).map_err(|err| format!("field `changelog`: {err}"))?;
        if !under(&self.changelog, WRITABLE) {
            return Err(format!(
                "field `changelog` must be a file under `{WRITABLE}/` (the only place this plugin may write), got `{}`",
                self.changelog
            ));
        }
        if !self
            .docs_paths
            .iter()
            .any(|docs| under(&self.changelog, docs))
        {
            return Err(format!(
                "field `changelog` (`{}`) must lie under one of `docs_paths`",
                self.changelog
            ));
        }
        Ok(())
    }
}

/// A relative path without `..`, `.` or empty segments.
fn relative_path(path: &str) -> Result<(), String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() || trimmed.starts_with('/') {
        return Err(format!(
            "`{path}` must be a relative path inside the workdir"
        ));
    }
    if trimmed
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "`{path}` must not contain `.`, `..` or empty segments"
        ));
    }
    Ok(())
}

/// True when `path` is `root` or inside it.
fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

struct DocsMaintenance;

impl Executor for DocsMaintenance {
    fn describe() -> Manifest {
        Manifest::new("docs-maintenance", env!("CARGO_PKG_VERSION"))
            .mode("docs-maintenance")
            .capability("fs-read")
            .capability(format!("fs-write:{WRITABLE}"))
            .capability("process")
            .template("prompt", Escape::Plain)
            .config_schema(serde_json::json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "docs_paths": { "type": "array", "items": { "type": "string" }, "default": ["docs", "README.md"] },
                    "changelog": { "type": "string", "default": "docs/CHANGELOG.md" },
                    "platform": { "type": "string" },
                    "model": { "type": "string" },
                    "effort": { "type": "string" },
                    "prompt": { "type": "string", "description": "extra instructions for the review agent" },
                    "commit": { "type": "boolean", "default": true, "description": "commit the doc files this call changed, so the next run starts on a clean tree" }
                }
            }))
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        let config: DocsConfig = config.parse()?;
        config.check()?;
        if let Some(platform) = &config.platform {
            canopy_plugin_sdk::agent_platform(platform)
                .map_err(|err| format!("field `platform`: {err}"))?;
        }
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: DocsConfig = invocation.config()?;
        config.check()?;
        let workdir = invocation.workdir().trim_end_matches('/').to_string();
        let before = dirty_paths(&workdir)?;

        let completed = invocation.marker("completed_specs").unwrap_or("(none)");
        let graph = invocation.marker("graph_name").unwrap_or("(none)");
        let entry = changelog_entry(&today(), graph, completed);
        append_changelog(&workdir, &config.changelog, &entry)?;
        let mut detail = format!("appended to {}:\n{entry}", config.changelog);

        if let Some(platform) = &config.platform {
            // The config's `timeout_minutes` is the host's: it arrives as the call's deadline.
            // The agent stops 2 s before it, to leave time for the changelog check and commit.
            let timeout_ms = invocation.deadline_ms().saturating_sub(2_000).max(1);
            let run = run_agent(&AgentRequest {
                platform: platform.clone(),
                prompt: review_prompt(&config, graph, completed),
                model: config.model.clone(),
                effort: config.effort.clone(),
                resume: None,
                cwd: workdir.clone(),
                timeout_ms,
                env: vec![(
                    "CANOPY_HOOK_COMPLETED_SPECS".to_string(),
                    completed.to_string(),
                )],
            })?;
            let outcome = run.outcome()?;
            detail.push_str(&format!("\nagent `{platform}`:\n{}", run.exit.stdout));
            if !matches!(outcome.status(), canopy_plugin_sdk::Status::Completed) {
                return Ok(outcome.with_detail(detail));
            }
        }

        let after = dirty_paths(&workdir)?;
        if let (Some(before), Some(after)) = (&before, &after) {
            let strays: Vec<&String> = after
                .iter()
                .filter(|(path, stamp)| before.get(*path) != Some(stamp))
                .map(|(path, _)| path)
                .filter(|path| !config.docs_paths.iter().any(|docs| under(path, docs)))
                .collect();
            if !strays.is_empty() {
                let list: Vec<&str> = strays.iter().map(|p| p.as_str()).collect();
                return Ok(Outcome::failed(format!(
                    "docs maintenance changed files outside docs_paths ({}): {}",
                    config.docs_paths.join(", "),
                    list.join(", ")
                ))
                .with_detail(detail));
            }
        }
        let count = completed
            .lines()
            .filter(|l| !l.trim().is_empty() && *l != "(none)")
            .count();
        let mut summary = format!("recorded {count} completed spec(s) in {}", config.changelog);
        if let (true, Some(before), Some(after)) = (config.commit, &before, &after) {
            let changed: Vec<String> = after
                .iter()
                .filter(|(path, stamp)| before.get(*path) != Some(stamp))
                .map(|(path, _)| path.clone())
                .collect();
            if !changed.is_empty() {
                let commit = commit_docs(&workdir, graph, &changed)?;
                detail.push_str(&format!(
                    "
committed {}: {commit}",
                    changed.join(", ")
                ));
                summary.push_str(&format!(", committed as {commit}"));
            }
        }
        Ok(Outcome::completed()
            .with_summary(summary)
            .with_detail(detail))
    }
}

/// The review prompt handed to the agent.
fn review_prompt(config: &DocsConfig, graph: &str, completed: &str) -> String {
    let mut prompt = format!(
        "You maintain the documentation of this repository. Graph `{graph}` just completed these specs \
         (name and one-line summary each):\n\n{completed}\n\nReview those specs, the code that resulted \
         and the current docs, then update the docs so they describe what actually shipped. Change only \
         files under: {}. Do not touch any other file.",
        config.docs_paths.join(", ")
    );
    if let Some(extra) = &config.prompt {
        prompt.push_str("\n\n");
        prompt.push_str(extra);
    }
    prompt
}

/// One changelog entry: a dated heading and a bullet per completed spec.
fn changelog_entry(date: &str, graph: &str, completed: &str) -> String {
    let mut entry = format!("## {date} — {graph}\n\n");
    let lines: Vec<&str> = completed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "(none)")
        .collect();
    if lines.is_empty() {
        entry.push_str("- no spec completed\n");
    }
    for line in lines {
        entry.push_str(&format!("- {line}\n"));
    }
    entry
}

fn append_changelog(workdir: &str, changelog: &str, entry: &str) -> Result<(), String> {
    let path = format!("{workdir}/{changelog}");
    if let Some((dir, _)) = path.rsplit_once('/') {
        std::fs::create_dir_all(dir).map_err(|err| format!("cannot create `{dir}`: {err}"))?;
    }
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(format!("cannot read `{changelog}`: {err}")),
    };
    let mut text = String::new();
    match existing {
        None => text.push_str("# Changelog\n\n"),
        Some(old) if !old.is_empty() && !old.ends_with("\n\n") => {
            text.push_str(if old.ends_with('\n') { "\n" } else { "\n\n" });
        }
        Some(_) => {}
    }
    text.push_str(entry);
    canopy_plugin_sdk::fs::append(&path, text.as_bytes())
}

/// Commits exactly `paths` (and nothing else staged) in `workdir`; returns the short commit id.
/// A repo without a configured identity gets Canopy's, so the commit never fails for that.
fn commit_docs(workdir: &str, graph: &str, paths: &[String]) -> Result<String, String> {
    let git = |args: Vec<String>| {
        run_command(
            &Command::new("git")
                .args(args)
                .cwd(workdir)
                .timeout_ms(30_000),
        )
    };
    let identity = git(vec!["config".into(), "user.email".into()])?;
    let mut commit: Vec<String> = Vec::new();
    if !identity.success() || identity.stdout.trim().is_empty() {
        commit.extend([
            "-c".into(),
            "user.name=Canopy docs-maintenance".into(),
            "-c".into(),
            "user.email=docs-maintenance@canopy.invalid".into(),
        ]);
    }
    let mut add = vec!["add".to_string(), "--".to_string()];
    add.extend(paths.iter().cloned());
    let added = git(add)?;
    if !added.success() {
        return Err(format!(
            "git add of the docs failed: {}",
            added.stderr.trim()
        ));
    }
    commit.extend([
        "commit".into(),
        "--quiet".into(),
        "--no-verify".into(),
        "-m".into(),
        format!("docs: changelog of graph {graph} (Canopy docs-maintenance)"),
        "--".into(),
    ]);
    commit.extend(paths.iter().cloned());
    let committed = git(commit)?;
    if !committed.success() {
        return Err(format!(
            "git commit of the docs failed (set `commit` to false to leave them uncommitted): {}",
            committed.stderr.trim()
        ));
    }
    let head = git(vec!["rev-parse".into(), "--short".into(), "HEAD".into()])?;
    Ok(head.stdout.trim().to_string())
}

/// Paths git reports as changed, each with a (size, mtime) stamp when the file exists.
type DirtyPaths = BTreeMap<String, Option<(u64, u128)>>;

/// Dirty paths (relative) with a size/mtime stamp, or `None` when the workdir is not a git repo.
fn dirty_paths(workdir: &str) -> Result<Option<DirtyPaths>, String> {
    let exit = run_command(
        &Command::new("git")
            .args(["status", "--porcelain=v1", "-z", "--untracked-files=all"])
            .cwd(workdir)
            .timeout_ms(30_000),
    )?;
    if !exit.success() {
        return Ok(None);
    }
    let mut paths = BTreeMap::new();
    let mut fields = exit.stdout.split('\0').filter(|f| !f.is_empty());
    while let Some(field) = fields.next() {
        let (status, path) = field.split_at(field.len().min(3));
        if status.starts_with('R') || status.starts_with('C') {
            fields.next(); // the rename's source path
        }
        let stamp = std::fs::metadata(format!("{workdir}/{path}"))
            .ok()
            .map(|meta| {
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (meta.len(), modified)
            });
        paths.insert(path.to_string(), stamp);
    }
    Ok(Some(paths))
}

/// Today's date (UTC) as `YYYY-MM-DD`.
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

export_executor!(DocsMaintenance);
