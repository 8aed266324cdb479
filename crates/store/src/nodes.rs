//! The daemons sharing the database (`nodes`): each registers itself under its node name when
//! it starts, renews its heartbeat (and, in the same write, the leases on the runs it drives)
//! while it lives, and says when it stopped. On SQLite there is one; on PostgreSQL, as many as
//! share the database.

use std::time::Duration;

use canopy_model::time::Timestamp;

use crate::sql::{self, Conn, Queries, Row, params};

use super::times::{At, time, time_opt};
use super::{Rd, StoreError, Tx};

/// A daemon as it registered itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub name: String,
    pub roles: Vec<String>,
    pub pid: u32,
    /// Its canopy version.
    pub version: String,
    /// Where its API listens.
    pub api_url: Option<String>,
    /// How long a lease it holds lasts without a heartbeat.
    pub lease: Duration,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    /// When it stopped cleanly; `None` while it runs, or after it died.
    pub stopped_at: Option<Timestamp>,
}

impl NodeRecord {
    /// Whether the daemon is lost at `now`: no heartbeat for longer than its lease, and no
    /// clean stop (it died, hung, or lost the database).
    pub fn lost(&self, now: Timestamp) -> bool {
        self.stopped_at.is_none() && now.duration_since(self.heartbeat_at) > self.lease
    }
}

/// What a starting daemon registers.
#[derive(Debug, Clone)]
pub struct NewNode<'a> {
    pub roles: &'a [String],
    pub version: &'a str,
    pub api_url: Option<&'a str>,
    pub lease: Duration,
}

/// A graph whose run a node drives, as `canopy nodes` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub node: String,
    pub graph_id: String,
    pub graph_name: String,
    pub run_id: Option<String>,
    /// When the lease runs out unless renewed (Unix milliseconds).
    pub until_ms: i64,
}

const COLUMNS: &str =
    "name, roles, pid, version, api_url, lease_ms, started_at, heartbeat_at, stopped_at";

fn from_row(row: &Row<'_>) -> sql::Result<NodeRecord> {
    let roles: String = row.get(1)?;
    let pid: i64 = row.get(2)?;
    let lease_ms: i64 = row.get(5)?;
    Ok(NodeRecord {
        name: row.get(0)?,
        roles: serde_json::from_str(&roles).map_err(|e| sql::Error::column(1, e.into()))?,
        pid: u32::try_from(pid).unwrap_or(0),
        version: row.get(3)?,
        api_url: row.get(4)?,
        lease: Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0)),
        started_at: time(row, 6)?,
        heartbeat_at: time(row, 7)?,
        stopped_at: time_opt(row, 8)?,
    })
}

fn millis(span: Duration) -> i64 {
    i64::try_from(span.as_millis()).unwrap_or(i64::MAX)
}

impl Rd<'_> {
    /// Every daemon that has used the database, by name.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        Ok(self.query_map(
            &format!("SELECT {COLUMNS} FROM nodes ORDER BY name"),
            params![],
            from_row,
        )?)
    }

    /// The other daemons on a shared database that count as lost now (see
    /// [`NodeRecord::lost`]): what they left unfinished is for the living to record. None on
    /// SQLite, whose one daemon recovers everything at start.
    pub fn lost_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        if self.exclusive() {
            return Ok(Vec::new());
        }
        let now = Timestamp::now();
        Ok(self
            .nodes()?
            .into_iter()
            .filter(|node| node.name != self.node() && node.lost(now))
            .collect())
    }

    /// The leases held on running graphs, by node, then graph name.
    pub fn held_leases(&self) -> Result<Vec<HeldLease>, StoreError> {
        Ok(self.query_map(
            "SELECT lease_node, id, name, current_run_id, lease_until FROM graphs
                 WHERE status = 'running' AND lease_node IS NOT NULL ORDER BY lease_node, name",
            params![],
            |row| {
                Ok(HeldLease {
                    node: row.get(0)?,
                    graph_id: row.get(1)?,
                    graph_name: row.get(2)?,
                    run_id: row.get(3)?,
                    until_ms: row.get::<Option<i64>>(4)?.unwrap_or(0),
                })
            },
        )?)
    }
}

impl Tx<'_> {
    /// Registers this daemon under its node name (again, after a restart: its row is
    /// replaced).
    pub fn register_node(&self, new: &NewNode<'_>) -> Result<(), StoreError> {
        let now = Timestamp::now();
        let roles = serde_json::to_string(new.roles)
            .map_err(|e| StoreError::Internal(anyhow::Error::new(e)))?;
        self.execute(
            "INSERT INTO nodes (name, roles, pid, version, api_url, lease_ms, started_at, heartbeat_at, stopped_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, NULL)
             ON CONFLICT (name) DO UPDATE SET roles = excluded.roles, pid = excluded.pid,
                 version = excluded.version, api_url = excluded.api_url, lease_ms = excluded.lease_ms,
                 started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
            params![
                self.node(),
                roles,
                i64::from(std::process::id()),
                new.version,
                new.api_url,
                millis(new.lease),
                At(now)
            ],
        )?;
        Ok(())
    }

    /// This daemon is alive: its heartbeat, and the leases on the runs it drives, renewed to
    /// `lease` from now. Returns how many leases it holds.
    pub fn heartbeat(&self, lease: Duration) -> Result<usize, StoreError> {
        self.execute(
            "UPDATE nodes SET heartbeat_at = ?2, stopped_at = NULL WHERE name = ?1",
            params![self.node(), At(Timestamp::now())],
        )?;
        self.renew_leases(lease)
    }

    /// The hook runs that daemons now lost left queued or running (a node is lost when no
    /// heartbeat came for longer than its lease and it did not stop cleanly): marked
    /// interrupted, as that daemon would at its next start, which may never come (a machine
    /// retired). Returns how many. Nothing on SQLite: its one daemon recovers everything at
    /// start.
    pub fn interrupt_hook_runs_of_lost_nodes(&self) -> Result<usize, StoreError> {
        let now = Timestamp::now();
        let mut interrupted = 0;
        for node in self.lost_nodes()? {
            let why = format!(
                "node `{}`, which ran this hook, stopped (no heartbeat since {}) before it finished",
                node.name, node.heartbeat_at
            );
            interrupted += self.execute(
                "UPDATE hook_runs SET status = 'interrupted', error = ?2, finished_at = ?3
                     WHERE node = ?1 AND status IN ('queued', 'running')",
                params![node.name, why, At(now)],
            )?;
        }
        Ok(interrupted)
    }

    /// This daemon stopped cleanly.
    pub fn node_stopped(&self) -> Result<(), StoreError> {
        self.execute(
            "UPDATE nodes SET stopped_at = ?2 WHERE name = ?1",
            params![self.node(), At(Timestamp::now())],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use crate::Store;
    use crate::sql::{Conn, Queries, params};
    use canopy_model::time::Timestamp;

    /// Two stores of one database, working for nodes `a` and `b`, on each backend.
    fn pairs() -> Vec<(&'static str, Store, Store, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("canopy.db");
        let sqlite = (
            "sqlite",
            Store::open_as(&file, "a").unwrap(),
            Store::open_as(&file, "b").unwrap(),
            Some(dir),
        );
        let url = crate::pg::cluster::scratch_database().unwrap();
        let postgres = (
            "postgres",
            Store::open_postgres(&url, "a").unwrap(),
            Store::open_postgres(&url, "b").unwrap(),
            None,
        );
        vec![sqlite, postgres]
    }

    fn running_graph(store: &Store, id: &str) {
        let id = id.to_string();
        store
            .write_blocking(move |tx| {
                tx.execute(
                    "INSERT INTO graphs (id, name, workdir, nodes, status, created_at, updated_at)
                         VALUES (?1, ?1, '/tmp', '[]', 'running', ?2, ?2)",
                    params![id, crate::now()],
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
    }

    fn expired(store: &Store) -> Vec<(String, String)> {
        store.write_blocking(|tx| tx.expired_leases()).unwrap()
    }

    #[test]
    fn a_lease_is_another_nodes_to_take_over_only_once_it_runs_out() {
        for (backend, a, b, _dir) in pairs() {
            eprintln!("on {backend}:");
            running_graph(&a, "g1");
            let generation = a
                .write_blocking(|tx| tx.hold_driver_lease("g1", Duration::from_secs(15)))
                .unwrap();
            assert_eq!(generation, 1);
            // Held and fresh: no node may take it.
            assert_eq!(expired(&b), []);
            // A's lease ran out a second ago (its daemon died): b may; a itself never takes
            // over its own run (its driver may still be at work).
            a.write_blocking(|tx| {
                tx.execute(
                    "UPDATE graphs SET lease_until = lease_until - 16000 WHERE id = 'g1'",
                    params![],
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
            assert_eq!(expired(&a), []);
            assert_eq!(expired(&b), [("g1".to_string(), "a".to_string())]);
            // A heartbeat renews it.
            assert_eq!(
                a.write_blocking(|tx| tx.heartbeat(Duration::from_secs(15)))
                    .unwrap(),
                1
            );
            assert_eq!(expired(&b), []);
            let leases = b.read_blocking(|rd| rd.held_leases()).unwrap();
            assert_eq!(leases.len(), 1);
            assert_eq!(
                (leases[0].node.as_str(), leases[0].graph_name.as_str()),
                ("a", "g1")
            );
            // Voiding it (an interrupt, a reset) leaves no holder and a new generation.
            let void = b.write_blocking(|tx| tx.take_driver_lease("g1")).unwrap();
            assert_eq!(void, 2);
            assert_eq!(b.read_blocking(|rd| rd.held_leases()).unwrap(), []);
        }
    }

    /// On PostgreSQL, a node claiming expired leases while another holds its claim open skips
    /// the claimed rows instead of waiting for them: each run is taken over by one node.
    #[test]
    fn two_nodes_claiming_at_once_never_claim_the_same_run() {
        let url = crate::pg::cluster::scratch_database().unwrap();
        let a = Store::open_postgres(&url, "a").unwrap();
        let b = Store::open_postgres(&url, "b").unwrap();
        let c = Store::open_postgres(&url, "c").unwrap();
        for id in ["g1", "g2"] {
            running_graph(&a, id);
            let id = id.to_string();
            a.write_blocking(move |tx| {
                tx.hold_driver_lease(&id, Duration::ZERO)?;
                tx.execute(
                    "UPDATE graphs SET lease_until = lease_until - 1000 WHERE id = ?1",
                    params![id],
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
        }
        let (claimed, hold) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            b.write_blocking(move |tx| {
                let mine = tx.expired_leases()?;
                claimed.send(mine.clone()).unwrap();
                // The claim stays open until c has looked.
                released.recv().unwrap();
                Ok::<_, crate::StoreError>(mine)
            })
            .unwrap()
        });
        let by_b = hold.recv().unwrap();
        assert_eq!(by_b.len(), 2);
        // C finds the two runs claimed, and does not wait for b's transaction to end.
        assert_eq!(expired(&c), []);
        release.send(()).unwrap();
        holder.join().unwrap();
    }

    /// Stores for nodes `a` and `b` of one fresh PostgreSQL database, both registered.
    fn registered_pair() -> (Store, Store) {
        let url = crate::pg::cluster::scratch_database().unwrap();
        let a = Store::open_postgres(&url, "a").unwrap();
        let b = Store::open_postgres(&url, "b").unwrap();
        for store in [&a, &b] {
            store
                .write_blocking(|tx| {
                    tx.register_node(&super::NewNode {
                        roles: &[],
                        version: "0.1.0",
                        api_url: None,
                        lease: Duration::from_secs(15),
                    })
                })
                .unwrap();
        }
        (a, b)
    }

    /// Node `a`'s last heartbeat was a minute ago: it counts as lost.
    fn lose_a(store: &Store) {
        let old = crate::times::At(Timestamp::now().saturating_sub(Duration::from_secs(60)));
        store
            .write_blocking(move |tx| {
                tx.execute(
                    "UPDATE nodes SET heartbeat_at = ?1 WHERE name = 'a'",
                    params![old],
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
    }

    /// A hook run a daemon left running when it died is marked interrupted by another once
    /// that daemon counts as lost, and not before.
    #[test]
    fn a_lost_nodes_unfinished_hook_runs_are_interrupted_by_another() {
        let (a, b) = registered_pair();
        a.write_blocking(|tx| {
            tx.execute(
                "INSERT INTO hook_runs (id, event, hook_index, hook_config, status, fired_at, node)
                     VALUES ('h1', 'on_completed', 0, '{}', 'running', ?1, 'a')",
                params![crate::now()],
            )
            .map_err(crate::StoreError::from)
        })
        .unwrap();
        let interrupt = |store: &Store| {
            store
                .write_blocking(|tx| tx.interrupt_hook_runs_of_lost_nodes())
                .unwrap()
        };
        // A is alive: its hook run is its own.
        assert_eq!(interrupt(&b), 0);
        lose_a(&a);
        assert_eq!(interrupt(&b), 1);
        let (status, error): (String, String) = b
            .read_blocking(|rd| {
                rd.query_row(
                    "SELECT status, error FROM hook_runs WHERE id = 'h1'",
                    params![],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
        assert_eq!(status, "interrupted");
        assert!(
            error.starts_with("node `a`, which ran this hook, stopped"),
            "{error}"
        );
        assert_eq!(interrupt(&b), 0);
    }

    /// Likewise a cron firing a lost node left running: recorded `interrupted_unknown` by
    /// another node, naming it, once; the lost node finds nothing left at its next start.
    #[test]
    fn a_lost_nodes_running_cron_firings_are_interrupted_by_another() {
        let (a, b) = registered_pair();
        let new = crate::crons::NewReceipt {
            run_id: "r1".into(),
            cron: "nightly".into(),
            node: "a".into(),
            trigger: canopy_model::records::crons::Trigger::Schedule,
            scheduled_at: None,
            status: canopy_model::records::crons::ReceiptStatus::Running,
            error: None,
            missed_count: None,
            actor: "cron:nightly".into(),
            starts_at: None,
        };
        a.write_blocking(move |tx| tx.insert_cron_receipt(&new))
            .unwrap();
        let interrupt = |store: &Store| {
            store
                .write_blocking(|tx| tx.interrupt_cron_receipts_of_lost_nodes())
                .unwrap()
        };
        // A is alive: its firing is its own.
        assert!(interrupt(&b).is_empty());
        lose_a(&a);
        let ended = interrupt(&b);
        assert_eq!(ended.len(), 1);
        assert_eq!(
            ended[0].status,
            canopy_model::records::crons::ReceiptStatus::InterruptedUnknown
        );
        let error = ended[0].error.clone().unwrap_or_default();
        assert!(
            error.starts_with("node `a`, which ran this firing, stopped"),
            "{error}"
        );
        assert!(interrupt(&b).is_empty());
        // A, started again, has nothing of its own left running.
        assert!(
            a.write_blocking(|tx| tx.interrupt_unknown_cron_receipts())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_node_registers_beats_and_stops() {
        crate::each_backend::check(|store| {
            let roles = vec!["worker".to_string()];
            store
                .write_blocking(move |tx| {
                    tx.register_node(&super::NewNode {
                        roles: &roles,
                        version: "0.1.0",
                        api_url: Some("http://127.0.0.1:1"),
                        lease: Duration::from_secs(15),
                    })
                })
                .unwrap();
            let nodes = store.read_blocking(|rd| rd.nodes()).unwrap();
            assert_eq!(nodes.len(), 1);
            let node = &nodes[0];
            assert_eq!(node.name, crate::LOCAL_NODE);
            assert_eq!(node.roles, ["worker"]);
            assert_eq!(node.lease, Duration::from_secs(15));
            assert_eq!(node.pid, std::process::id());
            assert_eq!(node.stopped_at, None);
            store.write_blocking(|tx| tx.node_stopped()).unwrap();
            let nodes = store.read_blocking(|rd| rd.nodes()).unwrap();
            assert!(nodes[0].stopped_at.is_some());
            // A beat says it runs again (a daemon of this name started).
            store
                .write_blocking(|tx| tx.heartbeat(Duration::from_secs(15)))
                .unwrap();
            let nodes = store.read_blocking(|rd| rd.nodes()).unwrap();
            assert_eq!(nodes[0].stopped_at, None);
        });
    }
}
