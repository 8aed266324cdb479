//! What each project's checkout was last seen at (`project_state`, `project_tags`): its HEAD
//! and its tags. The project watcher compares what it reads from git with this, and records
//! what it saw in the same write as the events the difference makes: a restart fires for what
//! changed while the daemon was down, and for nothing it had seen.

use std::collections::BTreeMap;

use crate::sql::{Conn, Queries, params};

use super::times::At;
use super::{Rd, StoreError, Tx};
use canopy_model::time::Timestamp;

/// A checkout as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckoutState {
    /// The checkout's path it was seen at.
    pub checkout: String,
    /// The commit HEAD pointed at; `None` in a repository with no commit yet.
    pub head_sha: Option<String>,
    /// The branch checked out, when HEAD was on one.
    pub branch: Option<String>,
    /// Every tag, with the commit it points at.
    pub tags: BTreeMap<String, String>,
}

impl Rd<'_> {
    /// What a project's checkout was last seen at; `None` before its first observation.
    pub fn project_state(&self, name: &str) -> Result<Option<CheckoutState>, StoreError> {
        let Some((checkout, head_sha, branch)) = self.query_opt(
            "SELECT checkout, head_sha, branch FROM project_state WHERE name = ?1",
            params![name],
            |row| {
                Ok((
                    row.get::<String>(0)?,
                    row.get::<Option<String>>(1)?,
                    row.get::<Option<String>>(2)?,
                ))
            },
        )?
        else {
            return Ok(None);
        };
        let tags: BTreeMap<String, String> = self
            .query_map(
                "SELECT tag, commit_sha FROM project_tags WHERE project = ?1",
                params![name],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?
            .into_iter()
            .collect();
        Ok(Some(CheckoutState {
            checkout,
            head_sha,
            branch,
            tags,
        }))
    }
}

/// A project's hook that was running at some point since a given time: the likely cause of a
/// change seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookActivity {
    pub hook_name: String,
    /// The dispatch depth of the event that fired it.
    pub dispatch_depth: u32,
}

impl Rd<'_> {
    /// The deepest of project `name`'s hook runs (not test runs) that ran at some point since
    /// `since`: running now, or ended since. Of several as deep, one still running,
    /// else the last to end (the one most likely to have made the change: two hooks of one
    /// event fire together, and the one that commits ends after its commit).
    pub fn project_hook_activity(
        &self,
        name: &str,
        since: Timestamp,
    ) -> Result<Option<HookActivity>, StoreError> {
        let prefix = format!("{name}/");
        Ok(self.query_opt("SELECT hook_name, dispatch_depth FROM hook_runs
                  WHERE source = 'project' AND substr(hook_name, 1, length(?1)) = ?1
                    AND (status = 'running' OR (started_at IS NOT NULL AND finished_at >= ?2))
                  ORDER BY dispatch_depth DESC, coalesce(finished_at, '9') DESC, fired_at DESC LIMIT 1", params![prefix, At(since)], |row| {
                Ok(HookActivity {
                    hook_name: row.get(0)?,
                    dispatch_depth: row.get(1)?,
                })
            })?)
    }
}

impl Tx<'_> {
    /// Records what a project's checkout was seen at, replacing what was recorded before: the
    /// tags gone are forgotten (one that comes back is new again), the new ones added.
    pub fn save_project_state(
        &self,
        name: &str,
        before: Option<&CheckoutState>,
        now: &CheckoutState,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO project_state (name, checkout, head_sha, branch, observed_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET checkout = excluded.checkout,
                 head_sha = excluded.head_sha, branch = excluded.branch,
                 observed_at = excluded.observed_at",
            params![name, now.checkout, now.head_sha, now.branch, super::now()],
        )?;
        let empty = BTreeMap::new();
        let old = before
            .filter(|b| b.checkout == now.checkout)
            .map_or(&empty, |b| &b.tags);
        if before.is_some_and(|b| b.checkout != now.checkout) {
            self.execute("DELETE FROM project_tags WHERE project = ?1", params![name])?;
        }
        for tag in old.keys().filter(|t| !now.tags.contains_key(*t)) {
            self.execute(
                "DELETE FROM project_tags WHERE project = ?1 AND tag = ?2",
                params![name, tag],
            )?;
        }
        for (tag, sha) in &now.tags {
            if old.get(tag) != Some(sha) {
                self.execute(
                    "INSERT INTO project_tags (project, tag, commit_sha) VALUES (?1, ?2, ?3)
                     ON CONFLICT (project, tag) DO UPDATE SET commit_sha = excluded.commit_sha",
                    params![name, tag, sha],
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn state(checkout: &str, head: &str, tags: &[(&str, &str)]) -> CheckoutState {
        CheckoutState {
            checkout: checkout.into(),
            head_sha: Some(head.into()),
            branch: Some("main".into()),
            tags: tags
                .iter()
                .map(|(t, s)| ((*t).to_string(), (*s).to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_saved_state_reads_back_with_tags_gone_forgotten() {
        crate::each_backend::check(a_saved_state_reads_back_with_tags_gone_forgotten_on);
    }

    fn a_saved_state_reads_back_with_tags_gone_forgotten_on(store: &crate::Store) {
        assert_eq!(
            store.read_blocking(|rd| rd.project_state("web")).unwrap(),
            None
        );
        let first = state("/w", "a1", &[("v1", "a1"), ("v2", "a1")]);
        let saved = first.clone();
        store
            .write_blocking(move |tx| tx.save_project_state("web", None, &saved))
            .unwrap();
        assert_eq!(
            store.read_blocking(|rd| rd.project_state("web")).unwrap(),
            Some(first.clone())
        );
        let second = state("/w", "b2", &[("v2", "b2"), ("v3", "b2")]);
        let (before, saved) = (first.clone(), second.clone());
        store
            .write_blocking(move |tx| tx.save_project_state("web", Some(&before), &saved))
            .unwrap();
        assert_eq!(
            store.read_blocking(|rd| rd.project_state("web")).unwrap(),
            Some(second.clone())
        );
        // Another checkout: its tags replace the old one's whole.
        let third = state("/x", "c3", &[("w1", "c3")]);
        let (before, saved) = (second, third.clone());
        store
            .write_blocking(move |tx| tx.save_project_state("web", Some(&before), &saved))
            .unwrap();
        assert_eq!(
            store.read_blocking(|rd| rd.project_state("web")).unwrap(),
            Some(third)
        );
    }

    #[test]
    fn of_two_hooks_fired_together_the_last_to_end_is_taken_for_the_change() {
        crate::each_backend::check(
            of_two_hooks_fired_together_the_last_to_end_is_taken_for_the_change_on,
        );
    }

    fn of_two_hooks_fired_together_the_last_to_end_is_taken_for_the_change_on(
        store: &crate::Store,
    ) {
        store
            .write_blocking(|tx| {
                for (id, index, finished) in [
                    ("a", 0, "2026-12-06T01:00:02Z"),
                    ("b", 1, "2026-12-06T01:00:05Z"),
                ] {
                    tx.execute(
                        "INSERT INTO hook_runs (id, source, hook_name, event, hook_index, hook_config, status, fired_at, started_at, finished_at)
                         VALUES (?1, 'project', ?2, 'project.checkout_updated', ?3, '{}', 'completed', '2026-12-06T01:00:00Z', '2026-12-06T01:00:00Z', ?4)",
                        params![id, format!("web/checkout_updated[{index}]"), index, finished],
                    )?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let cause = store
            .read_blocking(|rd| {
                rd.project_hook_activity("web", "2026-12-06T00:59:00Z".parse().unwrap())
            })
            .unwrap();
        assert_eq!(
            cause.map(|c| c.hook_name).as_deref(),
            Some("web/checkout_updated[1]")
        );
    }

    #[test]
    fn the_hook_run_table_takes_project_hook_runs_and_keeps_old_rows() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        super::super::migrations::apply(&mut conn).unwrap();
        conn.execute(
            "INSERT INTO hook_runs (id, source, hook_name, event, hook_index, hook_config, status, fired_at)
             VALUES ('a', 'project', 'web/tag_pushed[0]', 'project.tag_pushed', 0, '{}', 'queued', 'now')",
            [],
        )
        .unwrap();
        let bad = conn.execute(
            "INSERT INTO hook_runs (id, source, hook_name, event, hook_index, hook_config, status, fired_at)
             VALUES ('b', 'elsewhere', 'x', 'e', 0, '{}', 'queued', 'now')",
            [],
        );
        // The source is checked in Rust (a new source is one variant of `HookSourceKind`, no
        // table rebuild): the table takes the row, the type refuses the value.
        assert!(bad.is_ok(), "{bad:?}");
        let refused = "elsewhere"
            .parse::<canopy_model::records::hook_runs::HookSourceKind>()
            .unwrap_err();
        assert!(refused.contains("graph, config, project"), "{refused}");
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'hook_runs' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            indexes,
            [
                "hook_runs_by_graph",
                "hook_runs_by_project",
                "hook_runs_by_run",
                "hook_runs_by_time",
                "hook_runs_unfinished"
            ]
        );
    }
}
