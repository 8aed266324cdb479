//! Numbered schema migrations. `PRAGMA user_version` records how many have been applied; each
//! runs in its own transaction, so a crash leaves the schema at the old or the new version.
//! Append new migrations; never edit one that has shipped.
//!
//! The list is PostgreSQL's too. Its schema starts at migration `BASELINE` (`pg/schema.rs`)
//! (`pg/schema.sql`, the schema as that migration left it); every migration after that is a
//! [`Migration::Twin`], written once for each backend, and a test fails on one that is not.
//!
//! A CHECK over a set of values is written `col = 'a' OR col = 'b' ...`, never `col IN ('a',
//! 'b', ...)`: SQLite checks an IN list of more than two values by building a temporary b-tree
//! of it for every row written, which cost about 2 µs a write on this project's VM (a third of
//! a small insert). Migration 13 rewrote the lists earlier migrations made; a test fails on a
//! new one.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use regex::Regex;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, Transaction};

/// One step of the schema.
enum Migration {
    /// SQL run as it is.
    Sql(&'static str),
    /// A step SQL alone cannot say.
    Code(fn(&Transaction) -> Result<()>),
    /// A step after PostgreSQL's baseline: SQLite's SQL and PostgreSQL's.
    Twin {
        sqlite: &'static str,
        postgres: &'static str,
    },
}
use Migration::{Code, Sql};

const MIGRATIONS: &[Migration] = &[
    // 1: installed plugins and queued session messages.
    Sql(r#"
    CREATE TABLE plugins (
        name         TEXT PRIMARY KEY,
        version      TEXT NOT NULL,
        sha256       TEXT NOT NULL,
        manifest     TEXT NOT NULL,          -- JSON of the plugin's describe()
        granted      TEXT NOT NULL,          -- JSON array of granted capabilities, pinned to sha256
        builtin      INTEGER NOT NULL,
        enabled      INTEGER NOT NULL,
        installed_at TEXT NOT NULL
    );
    CREATE TABLE messages (
        id           TEXT PRIMARY KEY,
        target_kind  TEXT NOT NULL CHECK (target_kind IN ('id', 'name')),
        target       TEXT NOT NULL,
        text         TEXT NOT NULL,
        provenance   TEXT NOT NULL,          -- JSON: graph id, event, run, hook index, spec
        origin       TEXT NOT NULL,          -- 'hook' for messages a hook queued
        plugin       TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'undeliverable')),
        created_at   TEXT NOT NULL
    );
    CREATE INDEX messages_pending ON messages (status, created_at);
    "#),
    // 2: the engine -- specs, graphs, queues, runs and node runs.
    Sql(r#"
    CREATE TABLE specs (
        id           TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        body         TEXT NOT NULL,
        workdir      TEXT,                   -- optional tag for filtering the backlog
        summary      TEXT,                   -- one line, set when a run completes the spec
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL
    );
    CREATE TABLE graphs (
        id                 TEXT PRIMARY KEY,
        name               TEXT NOT NULL UNIQUE,
        workdir            TEXT NOT NULL,
        nodes              TEXT NOT NULL,    -- JSON array of {name, ...executor config}
        allow_dirty_start  INTEGER NOT NULL DEFAULT 0,
        status             TEXT NOT NULL CHECK (status IN ('idle', 'running', 'paused', 'completed', 'failed')),
        blocker            TEXT,
        on_completed       TEXT,             -- JSON: one completion hook config (the pre-map shape)
        current_run_id     TEXT,
        created_at         TEXT NOT NULL,
        updated_at         TEXT NOT NULL
    );
    CREATE TABLE graph_specs (
        graph_id  TEXT NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
        spec_id   TEXT NOT NULL REFERENCES specs (id),
        position  INTEGER NOT NULL,
        PRIMARY KEY (graph_id, spec_id)
    );
    CREATE TABLE queues (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        created_at  TEXT NOT NULL
    );
    CREATE TABLE queue_members (
        queue_id     TEXT NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
        spec_id      TEXT NOT NULL REFERENCES specs (id),
        position     INTEGER NOT NULL,
        group_label  TEXT,
        PRIMARY KEY (queue_id, spec_id)
    );
    CREATE TABLE runs (
        id           TEXT PRIMARY KEY,
        graph_id     TEXT NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
        workdir      TEXT NOT NULL,
        queue_id     TEXT REFERENCES queues (id) ON DELETE SET NULL,
        status       TEXT NOT NULL CHECK (status IN ('running', 'paused', 'completed', 'failed', 'interrupted', 'reset')),
        blocker      TEXT,
        summary      TEXT,
        -- how the next spec starts: NULL (from the first node, guarded), or a directed start
        start_node   TEXT,
        started_at   TEXT NOT NULL,
        finished_at  TEXT
    );
    CREATE INDEX runs_by_graph ON runs (graph_id, started_at);
    CREATE TABLE run_specs (
        run_id           TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        spec_id          TEXT NOT NULL,      -- history outlives a deleted spec
        ordinal          INTEGER NOT NULL,   -- order in which the run reached the spec
        group_label      TEXT,
        status           TEXT NOT NULL CHECK (status IN ('running', 'blocked', 'completed', 'failed', 'skipped', 'interrupted')),
        next_node        INTEGER NOT NULL DEFAULT 0,
        summary          TEXT,
        harness_session  TEXT,
        started_at       TEXT NOT NULL,
        finished_at      TEXT,
        PRIMARY KEY (run_id, spec_id)
    );
    CREATE TABLE node_runs (
        id               TEXT PRIMARY KEY,
        run_id           TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        graph_id         TEXT NOT NULL,
        spec_id          TEXT NOT NULL,
        node             TEXT NOT NULL,
        node_index       INTEGER NOT NULL,
        mode             TEXT NOT NULL,
        plugin           TEXT,
        plugin_version   TEXT,
        plugin_sha256    TEXT,
        status           TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'blocked', 'interrupted')),
        summary          TEXT,
        reason           TEXT,               -- failure reason or blocker
        detail           TEXT,
        harness_session  TEXT,
        resume_session   TEXT,
        started_at       TEXT NOT NULL,
        finished_at      TEXT,
        duration_ms      INTEGER
    );
    CREATE INDEX node_runs_by_run ON node_runs (run_id, started_at);
    CREATE INDEX node_runs_by_graph ON node_runs (graph_id, started_at);
    CREATE INDEX run_specs_by_ordinal ON run_specs (run_id, ordinal);
    CREATE INDEX graph_specs_by_position ON graph_specs (graph_id, position);
    CREATE INDEX queue_members_by_position ON queue_members (queue_id, position);
    CREATE INDEX run_specs_by_spec ON run_specs (spec_id, status);
    CREATE INDEX node_runs_running ON node_runs (status) WHERE status = 'running';
    "#),
    // 3: hooks become an event-keyed map (the single `on_completed` config moves into it),
    // hook-run records, interactive sessions and message delivery.
    Sql(r#"
    ALTER TABLE graphs ADD COLUMN hooks TEXT NOT NULL DEFAULT '{}';
    UPDATE graphs SET hooks = json_object('on_completed', json_array(json(on_completed)))
     WHERE on_completed IS NOT NULL AND json_valid(on_completed);
    ALTER TABLE graphs DROP COLUMN on_completed;
    CREATE TABLE hook_runs (
        id               TEXT PRIMARY KEY,
        graph_id         TEXT NOT NULL,
        graph_name       TEXT NOT NULL,
        run_id           TEXT,
        event            TEXT NOT NULL CHECK (event IN ('on_completed', 'on_failed', 'on_blocked', 'on_spec_completed')),
        hook_index       INTEGER NOT NULL,
        hook_config      TEXT NOT NULL,      -- JSON: the exact config that fired
        spec_id          TEXT,
        mode             TEXT,
        plugin           TEXT,
        plugin_version   TEXT,
        plugin_sha256    TEXT,
        rendered         TEXT,               -- JSON: {"config": rendered config, "markers": values}
        status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'timed_out', 'interrupted')),
        summary          TEXT,
        error            TEXT,
        output           TEXT,               -- tail of the executor's detail
        test             INTEGER NOT NULL DEFAULT 0,
        fired_at         TEXT NOT NULL,
        started_at       TEXT,
        finished_at      TEXT,
        duration_ms      INTEGER
    );
    CREATE INDEX hook_runs_by_graph ON hook_runs (graph_id, fired_at);
    CREATE INDEX hook_runs_by_run ON hook_runs (run_id, fired_at);
    CREATE INDEX hook_runs_by_time ON hook_runs (fired_at);
    CREATE TABLE sessions (
        id                TEXT PRIMARY KEY,
        name              TEXT NOT NULL,
        status            TEXT NOT NULL CHECK (status IN ('live', 'finished')),
        conversation_id   TEXT,              -- the harness's own conversation id, when known
        tmux_target       TEXT,              -- deliver by typing into this tmux pane
        tmux_socket       TEXT,
        created_at        TEXT NOT NULL,
        updated_at        TEXT NOT NULL
    );
    CREATE INDEX sessions_by_name ON sessions (name, status);
    ALTER TABLE messages ADD COLUMN session_id TEXT;      -- the session the message is for
    ALTER TABLE messages ADD COLUMN error TEXT;
    ALTER TABLE messages ADD COLUMN delivered_at TEXT;
    CREATE INDEX messages_by_session ON messages (session_id, created_at);
    CREATE TABLE notifications (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,
        message     TEXT NOT NULL,
        message_id  TEXT,
        created_at  TEXT NOT NULL
    );
    "#),
    // Digests of compiled plugin artifacts, recorded when this daemon wrote them: a cached
    // artifact is native code and is loaded only when its bytes still match.
    Sql(r#"
    CREATE TABLE compiled_artifacts (
        file        TEXT PRIMARY KEY,        -- <component sha256>-<engine key>.cwasm
        sha256      TEXT NOT NULL,           -- sha256 of the artifact's bytes
        created_at  TEXT NOT NULL
    );
    "#),
    // 5: a message is marked `delivering` before it is typed into a tmux pane, so a delivery
    // cut off by a crash is visible. SQLite cannot alter a CHECK: the table is rebuilt.
    Sql(r#"
    CREATE TABLE messages_new (
        id            TEXT PRIMARY KEY,
        target_kind   TEXT NOT NULL CHECK (target_kind IN ('id', 'name')),
        target        TEXT NOT NULL,
        text          TEXT NOT NULL,
        provenance    TEXT NOT NULL,         -- JSON: graph id, event, run, hook index, spec
        origin        TEXT NOT NULL,         -- 'hook' for messages a hook queued
        plugin        TEXT NOT NULL,
        status        TEXT NOT NULL CHECK (status IN ('pending', 'delivering', 'delivered', 'undeliverable')),
        created_at    TEXT NOT NULL,
        session_id    TEXT,                  -- the session the message is for
        error         TEXT,
        delivered_at  TEXT
    );
    INSERT INTO messages_new (id, target_kind, target, text, provenance, origin, plugin, status,
                              created_at, session_id, error, delivered_at)
         SELECT id, target_kind, target, text, provenance, origin, plugin, status,
                created_at, session_id, error, delivered_at
           FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_new RENAME TO messages;
    -- The delivery scheduler's lookups (a session's next pending message, the sessions with
    -- pending messages) read these indexes, never the rows with their long texts.
    CREATE INDEX messages_pending ON messages (status, session_id, created_at, id);
    CREATE INDEX messages_by_session ON messages (session_id, created_at, id);
    "#),
    // 6: a graph's definition has a version (edits may be conditional on it), and the
    // generation of the driver allowed to work on its current run.
    Sql(r#"
    ALTER TABLE graphs ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE graphs ADD COLUMN driver_lease INTEGER NOT NULL DEFAULT 0;
    "#),
    // 7: a run's specs by status: the spec a run is on is found without walking every spec
    // the run reached (the driver asks at every step; a 1,000-spec run made that quadratic),
    // and `graph get` counts a run's specs per result from the index alone.
    Sql(r#"
    CREATE INDEX run_specs_by_status ON run_specs (run_id, status);
    "#),
    // 8: one event system. The feed keeps every event with its envelope; a run remembers who
    // started it (its events carry that actor); hook runs come from any source (a graph's
    // hooks or canopy.toml), are named, and know their dispatch depth. The hook-run table is
    // rebuilt: its event is any taxonomy event now, and a hook run need not belong to a graph.
    Sql(r#"
    CREATE TABLE feed (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,   -- the cursor: never reused
        node           TEXT NOT NULL,
        project        TEXT,
        target         TEXT,
        event          TEXT NOT NULL,
        family         TEXT NOT NULL,
        timestamp      TEXT NOT NULL,
        actor          TEXT NOT NULL,
        dispatch_depth INTEGER NOT NULL DEFAULT 0,
        payload        TEXT NOT NULL
    );
    CREATE INDEX feed_by_time ON feed (timestamp);
    ALTER TABLE runs ADD COLUMN actor TEXT NOT NULL DEFAULT 'user';
    ALTER TABLE runs ADD COLUMN dispatch_depth INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE hook_runs_new (
        id               TEXT PRIMARY KEY,
        source           TEXT NOT NULL DEFAULT 'graph' CHECK (source IN ('graph', 'config')),
        hook_name        TEXT NOT NULL DEFAULT '',
        graph_id         TEXT,
        graph_name       TEXT,
        run_id           TEXT,
        event            TEXT NOT NULL,
        hook_index       INTEGER NOT NULL,
        hook_config      TEXT NOT NULL,
        spec_id          TEXT,
        mode             TEXT,
        plugin           TEXT,
        plugin_version   TEXT,
        plugin_sha256    TEXT,
        rendered         TEXT,
        status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'timed_out', 'interrupted', 'dropped')),
        summary          TEXT,
        error            TEXT,
        output           TEXT,
        test             INTEGER NOT NULL DEFAULT 0,
        fired_at         TEXT NOT NULL,
        started_at       TEXT,
        finished_at      TEXT,
        duration_ms      INTEGER,
        dispatch_depth   INTEGER NOT NULL DEFAULT 0,
        feed_id          INTEGER,
        project          TEXT
    );
    INSERT INTO hook_runs_new (id, hook_name, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, plugin, plugin_version, plugin_sha256, rendered, status, summary, error, output, test, fired_at, started_at, finished_at, duration_ms)
        SELECT h.id, h.graph_name || '.' || h.event || '[' || h.hook_index || ']', h.graph_id, h.graph_name, h.run_id, h.event, h.hook_index, h.hook_config, h.spec_id, h.mode, h.plugin, h.plugin_version, h.plugin_sha256, h.rendered, h.status, h.summary, h.error, h.output, h.test, h.fired_at, h.started_at, h.finished_at, h.duration_ms
        FROM hook_runs h;
    UPDATE hook_runs_new SET project = (SELECT workdir FROM runs r WHERE r.id = hook_runs_new.run_id);
    DROP TABLE hook_runs;
    ALTER TABLE hook_runs_new RENAME TO hook_runs;
    CREATE INDEX hook_runs_by_graph ON hook_runs (graph_id, fired_at);
    CREATE INDEX hook_runs_by_run ON hook_runs (run_id, fired_at);
    CREATE INDEX hook_runs_by_time ON hook_runs (fired_at);
    CREATE INDEX hook_runs_by_project ON hook_runs (project, fired_at);
    CREATE INDEX hook_runs_unfinished ON hook_runs (status) WHERE status IN ('queued', 'running');
    "#),
    // 9: crons -- one receipt per firing (written before anything is spawned), and each
    // cron's state kept across restarts (paused, and the scheduled time accounted through, from
    // which firings missed while the daemon was down are counted).
    Sql(r#"
    CREATE TABLE cron_receipts (
        run_id                   TEXT PRIMARY KEY,
        cron                     TEXT NOT NULL,
        node                     TEXT NOT NULL,
        trigger                  TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'catch_up')),
        scheduled_at             TEXT,
        status                   TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'timed_out', 'skipped', 'refused', 'missed', 'interrupted_by_restart', 'interrupted_unknown')),
        exit_code                INTEGER,
        output                   TEXT,
        error                    TEXT,
        missed_count             INTEGER,
        original_effects_unknown INTEGER NOT NULL DEFAULT 0,
        actor                    TEXT NOT NULL,
        created_at               TEXT NOT NULL,
        started_at               TEXT,
        finished_at              TEXT,
        duration_ms              INTEGER
    );
    CREATE INDEX cron_receipts_by_cron ON cron_receipts (cron, created_at);
    CREATE INDEX cron_receipts_unfinished ON cron_receipts (status) WHERE status = 'running';
    CREATE TABLE cron_state (
        name               TEXT PRIMARY KEY,
        paused             INTEGER NOT NULL DEFAULT 0,
        accounted_through  TEXT
    );
    "#),
    // 10: webhook deliveries -- one row per authenticated request, written before it is
    // answered (its body kept up to the hook's max_body_bytes), then moved through its
    // handler's run. `accepted` rows are the hooks' queues, and survive a crash.
    Sql(r#"
    CREATE TABLE webhook_deliveries (
        id             TEXT PRIMARY KEY,
        scope          TEXT NOT NULL,        -- 'global' or the project's name
        hook           TEXT NOT NULL,
        handler        TEXT NOT NULL,
        node           TEXT NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ('accepted', 'ignored', 'running', 'completed', 'failed', 'timed_out', 'interrupted', 'interrupted_unknown')),
        reason         TEXT,                 -- why the hook's rules ignored it
        method         TEXT NOT NULL,
        path           TEXT NOT NULL,
        query          TEXT,
        content_type   TEXT,
        headers        TEXT NOT NULL,        -- JSON [[name, value]]: selected headers, never auth ones
        size           INTEGER NOT NULL,
        body           BLOB NOT NULL,
        redelivery_of  TEXT,
        test           INTEGER NOT NULL DEFAULT 0,
        received_at    TEXT NOT NULL,
        started_at     TEXT,
        finished_at    TEXT,
        duration_ms    INTEGER,
        error          TEXT,
        output         TEXT,
        result         TEXT                  -- JSON: the spec made, or the executor that ran and its summary
    );
    CREATE INDEX webhook_deliveries_by_hook ON webhook_deliveries (scope, hook, received_at);
    CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (received_at);
    CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (scope, hook, received_at) WHERE status IN ('accepted', 'running');
    "#),
    // 11: project hooks. What each project's checkout was last seen at (its HEAD and its
    // tags), so a restart fires for what changed while the daemon was down and for nothing it
    // had seen; and hook runs may come from a project (`source = 'project'`). SQLite cannot
    // alter a CHECK: the hook-run table is rebuilt, with its indexes as migration 8 made them.
    Sql(r#"
    CREATE TABLE project_state (
        name         TEXT PRIMARY KEY,       -- the project's name in canopy.toml
        checkout     TEXT NOT NULL,          -- the checkout it was seen at (a new one is a new baseline)
        head_sha     TEXT,                   -- NULL: no commit yet
        branch       TEXT,
        observed_at  TEXT NOT NULL
    );
    CREATE TABLE project_tags (
        project     TEXT NOT NULL REFERENCES project_state (name) ON DELETE CASCADE,
        tag         TEXT NOT NULL,
        commit_sha  TEXT NOT NULL,
        PRIMARY KEY (project, tag)
    );
    CREATE TABLE hook_runs_new (
        id               TEXT PRIMARY KEY,
        source           TEXT NOT NULL DEFAULT 'graph' CHECK (source IN ('graph', 'config', 'project')),
        hook_name        TEXT NOT NULL DEFAULT '',
        graph_id         TEXT,
        graph_name       TEXT,
        run_id           TEXT,
        event            TEXT NOT NULL,
        hook_index       INTEGER NOT NULL,
        hook_config      TEXT NOT NULL,
        spec_id          TEXT,
        mode             TEXT,
        plugin           TEXT,
        plugin_version   TEXT,
        plugin_sha256    TEXT,
        rendered         TEXT,
        status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'timed_out', 'interrupted', 'dropped')),
        summary          TEXT,
        error            TEXT,
        output           TEXT,
        test             INTEGER NOT NULL DEFAULT 0,
        fired_at         TEXT NOT NULL,
        started_at       TEXT,
        finished_at      TEXT,
        duration_ms      INTEGER,
        dispatch_depth   INTEGER NOT NULL DEFAULT 0,
        feed_id          INTEGER,
        project          TEXT
    );
    INSERT INTO hook_runs_new (id, source, hook_name, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, plugin, plugin_version, plugin_sha256, rendered, status, summary, error, output, test, fired_at, started_at, finished_at, duration_ms, dispatch_depth, feed_id, project)
        SELECT id, source, hook_name, graph_id, graph_name, run_id, event, hook_index, hook_config, spec_id, mode, plugin, plugin_version, plugin_sha256, rendered, status, summary, error, output, test, fired_at, started_at, finished_at, duration_ms, dispatch_depth, feed_id, project
        FROM hook_runs ORDER BY rowid;
    DROP TABLE hook_runs;
    ALTER TABLE hook_runs_new RENAME TO hook_runs;
    CREATE INDEX hook_runs_by_graph ON hook_runs (graph_id, fired_at);
    CREATE INDEX hook_runs_by_run ON hook_runs (run_id, fired_at);
    CREATE INDEX hook_runs_by_time ON hook_runs (fired_at);
    CREATE INDEX hook_runs_by_project ON hook_runs (project, fired_at);
    CREATE INDEX hook_runs_unfinished ON hook_runs (status) WHERE status IN ('queued', 'running');
    "#),
    // 12: how many specs a run reached, by status, kept by triggers as run_specs changes: a
    // graph view reads a handful of rows instead of counting every spec of the run.
    Sql(r#"
    CREATE TABLE run_spec_tally (
        run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        status  TEXT NOT NULL,
        specs   INTEGER NOT NULL,
        PRIMARY KEY (run_id, status)
    ) WITHOUT ROWID;
    INSERT INTO run_spec_tally (run_id, status, specs)
        SELECT run_id, status, COUNT(*) FROM run_specs GROUP BY run_id, status;
    CREATE TRIGGER run_spec_tally_insert AFTER INSERT ON run_specs BEGIN
        INSERT INTO run_spec_tally (run_id, status, specs) VALUES (NEW.run_id, NEW.status, 1)
            ON CONFLICT (run_id, status) DO UPDATE SET specs = specs + 1;
    END;
    CREATE TRIGGER run_spec_tally_update AFTER UPDATE OF run_id, status ON run_specs
        WHEN OLD.run_id IS NOT NEW.run_id OR OLD.status IS NOT NEW.status BEGIN
        UPDATE run_spec_tally SET specs = specs - 1 WHERE run_id = OLD.run_id AND status = OLD.status;
        INSERT INTO run_spec_tally (run_id, status, specs) VALUES (NEW.run_id, NEW.status, 1)
            ON CONFLICT (run_id, status) DO UPDATE SET specs = specs + 1;
    END;
    CREATE TRIGGER run_spec_tally_delete AFTER DELETE ON run_specs BEGIN
        UPDATE run_spec_tally SET specs = specs - 1 WHERE run_id = OLD.run_id AND status = OLD.status;
    END;
    "#),
    // 13: every CHECK over a list of values compares one by one instead (see the module's
    // docs).
    Code(checks_without_in_lists),
    // 14: a hook run's source is checked in Rust (`HookSourceKind`, read back through it), not by
    // a CHECK that a new hook source would have to widen by rebuilding the table: it is dropped.
    Code(hook_source_checked_in_rust),
    // 15: sync hooks. A hook run says how it was dispatched (`sync` decides before its action,
    // `async` reacts after), whether it was required, and, for a sync hook, the outcome it had
    // on its action (`denied`, `rejected`, ...) and the patch it applied.
    Sql(r#"
    ALTER TABLE hook_runs ADD COLUMN dispatch TEXT NOT NULL DEFAULT 'async';
    ALTER TABLE hook_runs ADD COLUMN required INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE hook_runs ADD COLUMN outcome TEXT;
    ALTER TABLE hook_runs ADD COLUMN patch_applied TEXT;
    "#),
    // 16: a sync hook after one that denied is not run: its status is `skipped`.
    Code(hook_runs_may_be_skipped),
    // 17: a cron firing a sync hook denied is recorded `denied`.
    Code(cron_firings_may_be_denied),
    // 18: so is a webhook delivery.
    Code(webhook_deliveries_may_be_denied),
    // 19: a delivery keeps its sender's own id (`X-GitHub-Delivery`), so a retry or a replay of
    // it is answered with the first one instead of running again.
    Sql(r#"
    ALTER TABLE webhook_deliveries ADD COLUMN sender_delivery_id TEXT;
    CREATE INDEX webhook_deliveries_by_sender ON webhook_deliveries (scope, hook, sender_delivery_id, received_at)
        WHERE sender_delivery_id IS NOT NULL;
    "#),
    // 20: `graph cancel` stops a run: the graph, the run, its spec in flight and its running
    // node run are recorded `cancelled`.
    Code(runs_may_be_cancelled),
    // 21: a spec whose agent hit a usage limit (and its node run) is `limit_blocked`: the run
    // waits for the reset instead of failing.
    Code(specs_may_be_limit_blocked),
    // 22: a run paused on a usage limit says when it goes on by itself.
    Sql(r#"
    ALTER TABLE runs ADD COLUMN resumes_at TEXT;
    "#),
    // 23: several daemons on one database. Each daemon (a node) keeps a row it renews while it
    // lives; the graph whose run a daemon drives names that node and until when its lease holds,
    // so another node can take the run over when the lease runs out (`lease_until`: Unix
    // milliseconds, compared as numbers). A hook run names the node
    // that ran it; a cron's schedule is accounted for per node (each node fires its own).
    Migration::Twin {
        sqlite: r#"
    CREATE TABLE nodes (
        name          TEXT PRIMARY KEY,
        roles         TEXT NOT NULL DEFAULT '[]',
        pid           INTEGER NOT NULL,
        version       TEXT NOT NULL,
        api_url       TEXT,
        lease_ms      INTEGER NOT NULL,
        started_at    TEXT NOT NULL,
        heartbeat_at  TEXT NOT NULL,
        stopped_at    TEXT
    );
    ALTER TABLE graphs ADD COLUMN lease_node TEXT;
    ALTER TABLE graphs ADD COLUMN lease_until INTEGER;
    ALTER TABLE hook_runs ADD COLUMN node TEXT;
    CREATE TABLE cron_marks (
        cron               TEXT NOT NULL,
        node               TEXT NOT NULL,
        accounted_through  TEXT NOT NULL,
        PRIMARY KEY (cron, node)
    );
    "#,
        postgres: r#"
    CREATE TABLE nodes (
        name          TEXT COLLATE "C" PRIMARY KEY,
        roles         TEXT COLLATE "C" NOT NULL DEFAULT '[]',
        pid           BIGINT NOT NULL,
        version       TEXT COLLATE "C" NOT NULL,
        api_url       TEXT COLLATE "C",
        lease_ms      BIGINT NOT NULL,
        started_at    TEXT COLLATE "C" NOT NULL,
        heartbeat_at  TEXT COLLATE "C" NOT NULL,
        stopped_at    TEXT COLLATE "C"
    );
    ALTER TABLE graphs ADD COLUMN lease_node TEXT COLLATE "C";
    ALTER TABLE graphs ADD COLUMN lease_until BIGINT;
    ALTER TABLE hook_runs ADD COLUMN node TEXT COLLATE "C";
    CREATE TABLE cron_marks (
        cron               TEXT COLLATE "C" NOT NULL,
        node               TEXT COLLATE "C" NOT NULL,
        accounted_through  TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (cron, node)
    );
    "#,
    },
    // 24: an installed plugin's component, kept in the database as well as in the data dir,
    // so that every daemon on a shared database can run it (a daemon writes it to its own
    // data dir when it is missing there). Built-ins are in every canopy binary: not kept.
    Migration::Twin {
        sqlite: r#"
    CREATE TABLE plugin_components (
        sha256     TEXT PRIMARY KEY,
        component  BLOB NOT NULL
    );
    "#,
        postgres: r#"
    CREATE TABLE plugin_components (
        sha256     TEXT COLLATE "C" PRIMARY KEY,
        component  BYTEA NOT NULL
    );
    "#,
    },
    // 25: a graph may name the node (daemon) its runs must use: its workdir lives there.
    Migration::Twin {
        sqlite: r#"
    ALTER TABLE graphs ADD COLUMN node TEXT;
    "#,
        postgres: r#"
    ALTER TABLE graphs ADD COLUMN node TEXT COLLATE "C";
    "#,
    },
];

/// Widens the status CHECKs of run specs and node runs (as migration 20 left them) by
/// `limit_blocked`: every stored row still fits.
fn specs_may_be_limit_blocked(tx: &Transaction) -> Result<()> {
    const TABLES: [&str; 2] = ["run_specs", "node_runs"];
    const LAST: &str = "OR status = 'cancelled')";
    let mut widened = Vec::new();
    rewrite_tables(tx, |name, sql| {
        if !TABLES.contains(&name) {
            return sql.to_string();
        }
        let rewritten = sql.replacen(
            LAST,
            "OR status = 'cancelled' OR status = 'limit_blocked')",
            1,
        );
        if rewritten != sql {
            widened.push(name.to_string());
        }
        rewritten
    })?;
    for table in TABLES {
        anyhow::ensure!(
            widened.iter().any(|w| w == table),
            "the status CHECK of table {table} is not the one migration 20 wrote"
        );
    }
    Ok(())
}

/// Widens the status CHECKs (as migration 13 wrote them) of graphs, runs, run specs and node
/// runs by `cancelled`: every stored row still fits.
fn runs_may_be_cancelled(tx: &Transaction) -> Result<()> {
    const LAST: [(&str, &str); 4] = [
        ("graphs", "status = 'failed')"),
        ("runs", "status = 'reset')"),
        ("run_specs", "status = 'interrupted')"),
        ("node_runs", "status = 'interrupted')"),
    ];
    let mut widened = Vec::new();
    rewrite_tables(tx, |name, sql| {
        let Some((_, last)) = LAST.iter().find(|(table, _)| *table == name) else {
            return sql.to_string();
        };
        let open = last.trim_end_matches(')');
        let rewritten = sql.replacen(last, &format!("{open} OR status = 'cancelled')"), 1);
        if rewritten != sql {
            widened.push(name.to_string());
        }
        rewritten
    })?;
    // Each table's CHECK must have been found: a schema this step does not know is an error,
    // not a silent no-op that a cancel would trip over later.
    for (table, _) in LAST {
        anyhow::ensure!(
            widened.iter().any(|w| w == table),
            "the status CHECK of table {table} is not the one migration 13 wrote"
        );
    }
    Ok(())
}

/// Widens the CHECK on `webhook_deliveries.status` (as migration 13 wrote it) by `denied`.
fn webhook_deliveries_may_be_denied(tx: &Transaction) -> Result<()> {
    rewrite_tables(tx, |name, sql| {
        if name == "webhook_deliveries" {
            sql.replacen(
                "OR status = 'interrupted_unknown')",
                "OR status = 'interrupted_unknown' OR status = 'denied')",
                1,
            )
        } else {
            sql.to_string()
        }
    })
}

/// Widens the CHECK on `cron_receipts.status` (as migration 13 wrote it) by `denied`.
fn cron_firings_may_be_denied(tx: &Transaction) -> Result<()> {
    rewrite_tables(tx, |name, sql| {
        if name == "cron_receipts" {
            sql.replacen(
                "OR status = 'interrupted_unknown')",
                "OR status = 'interrupted_unknown' OR status = 'denied')",
                1,
            )
        } else {
            sql.to_string()
        }
    })
}

/// Widens the CHECK on `hook_runs.status` (as migration 13 wrote it) by `skipped`: every
/// stored row still fits.
fn hook_runs_may_be_skipped(tx: &Transaction) -> Result<()> {
    rewrite_tables(tx, |name, sql| {
        if name == "hook_runs" {
            sql.replacen(
                "OR status = 'dropped')",
                "OR status = 'dropped' OR status = 'skipped')",
                1,
            )
        } else {
            sql.to_string()
        }
    })
}

/// `CHECK (status IN ('a', 'b'))`, its column and its list of quoted values.
static CHECK_IN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"CHECK \((\w+) IN \(('[^']*'(?:\s*,\s*'[^']*')*)\)\)").expect("a valid pattern")
});

/// One single-quoted SQL value of such a list.
static QUOTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"'[^']*'").expect("a valid pattern"));

/// `sql` with each `CHECK (col IN ('a', 'b'))` written `CHECK (col = 'a' OR col = 'b')`.
fn compare_one_by_one(sql: &str) -> String {
    CHECK_IN
        .replace_all(sql, |found: &regex::Captures<'_>| {
            let column = &found[1];
            // Each quoted value whole: one may hold a comma.
            let tests: Vec<String> = QUOTED
                .find_iter(&found[2])
                .map(|value| format!("{column} = {}", value.as_str()))
                .collect();
            format!("CHECK ({})", tests.join(" OR "))
        })
        .into_owned()
}

/// Rewrites the CHECKs of every table as [`compare_one_by_one`] does. The two forms allow the
/// same values, so every stored row passes both.
fn checks_without_in_lists(tx: &Transaction) -> Result<()> {
    rewrite_tables(tx, |_, sql| compare_one_by_one(sql))
}

/// The CHECK on `hook_runs.source`, as migration 13 left it.
static SOURCE_CHECK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r" CHECK \(source = '[^']*'(?: OR source = '[^']*')*\)").expect("a valid pattern")
});

/// Drops the CHECK on `hook_runs.source`: a constraint removed, every stored row still fits.
fn hook_source_checked_in_rust(tx: &Transaction) -> Result<()> {
    rewrite_tables(tx, |name, sql| {
        if name == "hook_runs" {
            SOURCE_CHECK.replace(sql, "").into_owned()
        } else {
            sql.to_string()
        }
    })
}

/// Rewrites the SQL of tables with a CHECK as `rewrite` (given a table's name and SQL) says.
/// Only for changes every stored row passes (a CHECK written another way, or dropped): SQLite's
/// documented way to make one without rebuilding the table is to edit the table's SQL in
/// `sqlite_schema` (with `writable_schema`) and bump the schema version, in one transaction.
fn rewrite_tables(tx: &Transaction, mut rewrite: impl FnMut(&str, &str) -> String) -> Result<()> {
    let tables: Vec<(String, String)> = tx
        .prepare(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%CHECK (%'",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let changed: Vec<(String, String)> = tables
        .into_iter()
        .filter_map(|(name, sql)| {
            let rewritten = rewrite(&name, &sql);
            (rewritten != sql).then_some((name, rewritten))
        })
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let version: i64 = tx.query_row("PRAGMA schema_version", [], |row| row.get(0))?;
    // A connection in defensive mode may not write sqlite_schema (a build of SQLite can make
    // it the default): this one step turns it off, and back on after if it was.
    let defensive = tx.db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE)?;
    tx.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, false)?;
    tx.pragma_update(None, "writable_schema", "ON")?;
    let rewritten = changed.iter().try_for_each(|(name, sql)| {
        tx.execute(
            "UPDATE sqlite_schema SET sql = ?2 WHERE type = 'table' AND name = ?1",
            [name, sql],
        )
        .map(drop)
        .with_context(|| format!("cannot rewrite the CHECKs of table {name}"))
    });
    let bumped = rewritten.and_then(|()| {
        tx.pragma_update(None, "schema_version", version + 1)
            .context("cannot bump the schema version")
    });
    tx.pragma_update(None, "writable_schema", "OFF")?;
    tx.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, defensive)?;
    bumped
}

/// Applies every migration the database has not seen yet.
pub fn apply(conn: &mut Connection) -> Result<()> {
    // Before the first table of a new database (or by one rewrite of an older one): pruned
    // rows give their space back (see `store::retention`).
    super::retention::ensure_incremental_vacuum(conn)?;
    apply_until(conn, MIGRATIONS.len())
}

/// Applies the migrations the database has not seen yet, up to schema version `last`.
fn apply_until(conn: &mut Connection, last: usize) -> Result<()> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if current > MIGRATIONS.len() {
        anyhow::bail!(
            "the database is at schema version {current}, newer than this canopy ({}); use a newer canopy",
            MIGRATIONS.len()
        );
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().take(last).skip(current) {
        let version = index + 1;
        let tx = conn.transaction()?;
        match migration {
            Sql(sql) | Migration::Twin { sqlite: sql, .. } => {
                tx.execute_batch(sql).map_err(anyhow::Error::from)
            }
            Code(step) => step(&tx),
        }
        .with_context(|| format!("migration {version} failed"))?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

/// The schema version this build migrates to.
pub fn latest() -> usize {
    MIGRATIONS.len()
}

/// PostgreSQL's form of migration `version` (from 1), when it has one: only the steps after
/// its baseline do.
pub(crate) fn postgres_step(version: usize) -> Option<&'static str> {
    match MIGRATIONS.get(version.checked_sub(1)?)? {
        Migration::Twin { postgres, .. } => Some(postgres),
        Sql(_) | Code(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_record_the_version() -> Result<()> {
        let mut conn = Connection::open_in_memory()?;
        apply(&mut conn)?;
        apply(&mut conn)?;
        let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        assert_eq!(version, latest());
        Ok(())
    }

    fn table_sql(conn: &Connection) -> Result<Vec<(String, String)>> {
        Ok(conn
            .prepare(
                "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND sql IS NOT NULL",
            )?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn add_message(
        conn: &Connection,
        id: &str,
        kind: &str,
        status: &str,
    ) -> rusqlite::Result<usize> {
        conn.execute(
            "INSERT INTO messages (id, target_kind, target, text, provenance, origin, plugin, status, created_at)
             VALUES (?1, ?2, 'worker', 'hello', '{}', 'hook', 'agent', ?3, 'now')",
            [id, kind, status],
        )
    }

    #[test]
    fn a_list_is_rewritten_value_by_value_and_other_sql_is_left_alone() {
        assert_eq!(
            compare_one_by_one(
                "a TEXT CHECK (a IN ('x', 'y,z','w')), b TEXT CHECK (b IN ('p')), c TEXT CHECK (length(c) > 1)"
            ),
            "a TEXT CHECK (a = 'x' OR a = 'y,z' OR a = 'w'), b TEXT CHECK (b = 'p'), c TEXT CHECK (length(c) > 1)"
        );
        // A quote inside a value is left as it was rather than split.
        let quoted = "a TEXT CHECK (a IN ('it''s', 'x'))";
        assert_eq!(compare_one_by_one(quoted), quoted);
    }

    #[test]
    fn no_check_tests_an_in_list_and_the_checks_still_refuse_what_they_did() -> Result<()> {
        let mut conn = Connection::open_in_memory()?;
        apply(&mut conn)?;
        let tables = table_sql(&conn)?;
        let checked: Vec<&String> = tables
            .iter()
            .filter(|(_, sql)| sql.contains("CHECK ("))
            .map(|(name, _)| name)
            .collect();
        assert!(checked.len() >= 9, "tables with CHECKs: {checked:?}");
        let in_list = Regex::new(r"CHECK \(\w+ (NOT )?IN \(")?;
        for (name, sql) in &tables {
            assert!(
                !in_list.is_match(sql),
                "table {name} checks an IN list (write `col = 'a' OR col = 'b'`): {sql}"
            );
        }
        assert!(tables.iter().any(|(name, sql)| name == "webhook_deliveries"
            && sql.contains(
                "CHECK (status = 'accepted' OR status = 'ignored' OR status = 'running'"
            )));
        add_message(&conn, "m1", "name", "pending")?;
        add_message(&conn, "m2", "id", "undeliverable")?;
        for (kind, status) in [("name", "sent"), ("alias", "pending"), ("name", "")] {
            let refused = add_message(&conn, "m3", kind, status);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("CHECK constraint failed")),
                "{kind}/{status}: {refused:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn a_database_made_before_the_rewrite_keeps_its_rows_and_passes_the_integrity_check()
    -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.db");
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        apply_until(&mut conn, 12)?;
        let before = table_sql(&conn)?;
        assert!(
            before
                .iter()
                .any(|(_, sql)| sql.contains("status IN ('pending', 'delivering'"))
        );
        add_message(&conn, "kept", "name", "delivered")?;
        drop(conn);

        let mut conn = Connection::open(&path)?;
        // As a SQLite built defensive by default would open it: the step still rewrites.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        apply_until(&mut conn, 13)?;
        assert!(conn.db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE)?);
        // Another connection, as the daemon's readers are, sees the new schema.
        let other = Connection::open(&path)?;
        for conn in [&conn, &other] {
            let check: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
            assert_eq!(check, "ok");
            let status: String =
                conn.query_row("SELECT status FROM messages WHERE id = 'kept'", [], |row| {
                    row.get(0)
                })?;
            assert_eq!(status, "delivered");
            let refused = add_message(conn, "bad", "name", "lost");
            assert!(refused.is_err(), "{refused:?}");
        }
        let after = table_sql(&other)?;
        assert_eq!(after.len(), before.len());
        for ((name, old), (new_name, new)) in before.iter().zip(&after) {
            assert_eq!(name, new_name);
            assert_eq!(new, &compare_one_by_one(old), "table {name}");
        }
        Ok(())
    }

    /// A hook run of a source the constraint did not list is written after migration 14, and
    /// the rows and other CHECKs of the table are as they were.
    #[test]
    fn the_hook_run_source_is_no_longer_a_check_and_the_table_keeps_its_rows() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.db");
        let mut conn = Connection::open(&path)?;
        apply_until(&mut conn, 13)?;
        let insert = |conn: &Connection, id: &str, source: &str, status: &str| {
            conn.execute(
                "INSERT INTO hook_runs (id, source, event, hook_index, hook_config, status, fired_at)
                 VALUES (?1, ?2, 'spec.completed', 0, '{}', ?3, '2026-01-01T00:00:00Z')",
                [id, source, status],
            )
        };
        insert(&conn, "old", "project", "completed")?;
        assert!(insert(&conn, "new", "runtime", "queued").is_err());
        apply(&mut conn)?;
        let other = Connection::open(&path)?;
        let check: String = other.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
        assert_eq!(check, "ok");
        let sql: String = other.query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'hook_runs'",
            [],
            |row| row.get(0),
        )?;
        assert!(!sql.contains("source ="), "{sql}");
        assert!(sql.contains("status = 'queued'"), "{sql}");
        insert(&other, "new", "runtime", "queued")?;
        assert!(insert(&other, "bad", "graph", "lost").is_err());
        let kept: String =
            other.query_row("SELECT source FROM hook_runs WHERE id = 'old'", [], |row| {
                row.get(0)
            })?;
        assert_eq!(kept, "project");
        Ok(())
    }
}
