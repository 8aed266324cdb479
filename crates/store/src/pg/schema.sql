-- Canopy's schema on PostgreSQL: the SQLite schema at its migration 22, column for column.
-- Both keep the same values in the same classes (see sql.rs): ids, names, times (RFC 3339),
-- states and JSON as text, counts and flags as 64-bit integers. Text compares byte by byte
-- (COLLATE "C"), as SQLite's does: ids, times and names order the same on both.
-- The three tables read in insertion order have a `seq` column where SQLite has its rowid.

CREATE TABLE compiled_artifacts (
    file        TEXT COLLATE "C" PRIMARY KEY,
    sha256      TEXT COLLATE "C" NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE cron_receipts (
    run_id                   TEXT COLLATE "C" PRIMARY KEY,
    cron                     TEXT COLLATE "C" NOT NULL,
    node                     TEXT COLLATE "C" NOT NULL,
    trigger                  TEXT COLLATE "C" NOT NULL CHECK (trigger = 'schedule' OR trigger = 'manual' OR trigger = 'catch_up'),
    scheduled_at             TEXT COLLATE "C",
    status                   TEXT COLLATE "C" NOT NULL CHECK (status = 'running' OR status = 'completed' OR status = 'failed' OR status = 'timed_out' OR status = 'skipped' OR status = 'refused' OR status = 'missed' OR status = 'interrupted_by_restart' OR status = 'interrupted_unknown' OR status = 'denied'),
    exit_code                BIGINT,
    output                   TEXT COLLATE "C",
    error                    TEXT COLLATE "C",
    missed_count             BIGINT,
    original_effects_unknown BIGINT NOT NULL DEFAULT 0,
    actor                    TEXT COLLATE "C" NOT NULL,
    created_at               TEXT COLLATE "C" NOT NULL,
    started_at               TEXT COLLATE "C",
    finished_at              TEXT COLLATE "C",
    duration_ms              BIGINT,
    seq                      BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE cron_state (
    name               TEXT COLLATE "C" PRIMARY KEY,
    paused             BIGINT NOT NULL DEFAULT 0,
    accounted_through  TEXT COLLATE "C"
);
CREATE TABLE feed (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node           TEXT COLLATE "C" NOT NULL,
    project        TEXT COLLATE "C",
    target         TEXT COLLATE "C",
    event          TEXT COLLATE "C" NOT NULL,
    family         TEXT COLLATE "C" NOT NULL,
    timestamp      TEXT COLLATE "C" NOT NULL,
    actor          TEXT COLLATE "C" NOT NULL,
    dispatch_depth BIGINT NOT NULL DEFAULT 0,
    payload        TEXT COLLATE "C" NOT NULL
);
CREATE TABLE specs (
    id           TEXT COLLATE "C" PRIMARY KEY,
    name         TEXT COLLATE "C" NOT NULL,
    body         TEXT COLLATE "C" NOT NULL,
    workdir      TEXT COLLATE "C",
    summary      TEXT COLLATE "C",
    created_at   TEXT COLLATE "C" NOT NULL,
    updated_at   TEXT COLLATE "C" NOT NULL
);
CREATE TABLE graphs (
    id                 TEXT COLLATE "C" PRIMARY KEY,
    name               TEXT COLLATE "C" NOT NULL UNIQUE,
    workdir            TEXT COLLATE "C" NOT NULL,
    nodes              TEXT COLLATE "C" NOT NULL,
    allow_dirty_start  BIGINT NOT NULL DEFAULT 0,
    status             TEXT COLLATE "C" NOT NULL CHECK (status = 'idle' OR status = 'running' OR status = 'paused' OR status = 'completed' OR status = 'failed' OR status = 'cancelled'),
    blocker            TEXT COLLATE "C",
    current_run_id     TEXT COLLATE "C",
    created_at         TEXT COLLATE "C" NOT NULL,
    updated_at         TEXT COLLATE "C" NOT NULL,
    hooks              TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    version            BIGINT NOT NULL DEFAULT 1,
    driver_lease       BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE graph_specs (
    graph_id  TEXT COLLATE "C" NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
    spec_id   TEXT COLLATE "C" NOT NULL REFERENCES specs (id),
    position  BIGINT NOT NULL,
    PRIMARY KEY (graph_id, spec_id)
);
CREATE TABLE hook_runs (
    id               TEXT COLLATE "C" PRIMARY KEY,
    source           TEXT COLLATE "C" NOT NULL DEFAULT 'graph',
    hook_name        TEXT COLLATE "C" NOT NULL DEFAULT '',
    graph_id         TEXT COLLATE "C",
    graph_name       TEXT COLLATE "C",
    run_id           TEXT COLLATE "C",
    event            TEXT COLLATE "C" NOT NULL,
    hook_index       BIGINT NOT NULL,
    hook_config      TEXT COLLATE "C" NOT NULL,
    spec_id          TEXT COLLATE "C",
    mode             TEXT COLLATE "C",
    plugin           TEXT COLLATE "C",
    plugin_version   TEXT COLLATE "C",
    plugin_sha256    TEXT COLLATE "C",
    rendered         TEXT COLLATE "C",
    status           TEXT COLLATE "C" NOT NULL CHECK (status = 'queued' OR status = 'running' OR status = 'completed' OR status = 'failed' OR status = 'timed_out' OR status = 'interrupted' OR status = 'dropped' OR status = 'skipped'),
    summary          TEXT COLLATE "C",
    error            TEXT COLLATE "C",
    output           TEXT COLLATE "C",
    test             BIGINT NOT NULL DEFAULT 0,
    fired_at         TEXT COLLATE "C" NOT NULL,
    started_at       TEXT COLLATE "C",
    finished_at      TEXT COLLATE "C",
    duration_ms      BIGINT,
    dispatch_depth   BIGINT NOT NULL DEFAULT 0,
    feed_id          BIGINT,
    project          TEXT COLLATE "C",
    dispatch         TEXT COLLATE "C" NOT NULL DEFAULT 'async',
    required         BIGINT NOT NULL DEFAULT 0,
    outcome          TEXT COLLATE "C",
    patch_applied    TEXT COLLATE "C",
    seq              BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE messages (
    id            TEXT COLLATE "C" PRIMARY KEY,
    target_kind   TEXT COLLATE "C" NOT NULL CHECK (target_kind = 'id' OR target_kind = 'name'),
    target        TEXT COLLATE "C" NOT NULL,
    text          TEXT COLLATE "C" NOT NULL,
    provenance    TEXT COLLATE "C" NOT NULL,
    origin        TEXT COLLATE "C" NOT NULL,
    plugin        TEXT COLLATE "C" NOT NULL,
    status        TEXT COLLATE "C" NOT NULL CHECK (status = 'pending' OR status = 'delivering' OR status = 'delivered' OR status = 'undeliverable'),
    created_at    TEXT COLLATE "C" NOT NULL,
    session_id    TEXT COLLATE "C",
    error         TEXT COLLATE "C",
    delivered_at  TEXT COLLATE "C"
);
CREATE TABLE queues (
    id          TEXT COLLATE "C" PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE runs (
    id              TEXT COLLATE "C" PRIMARY KEY,
    graph_id        TEXT COLLATE "C" NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
    workdir         TEXT COLLATE "C" NOT NULL,
    queue_id        TEXT COLLATE "C" REFERENCES queues (id) ON DELETE SET NULL,
    status          TEXT COLLATE "C" NOT NULL CHECK (status = 'running' OR status = 'paused' OR status = 'completed' OR status = 'failed' OR status = 'interrupted' OR status = 'reset' OR status = 'cancelled'),
    blocker         TEXT COLLATE "C",
    summary         TEXT COLLATE "C",
    start_node      TEXT COLLATE "C",
    started_at      TEXT COLLATE "C" NOT NULL,
    finished_at     TEXT COLLATE "C",
    actor           TEXT COLLATE "C" NOT NULL DEFAULT 'user',
    dispatch_depth  BIGINT NOT NULL DEFAULT 0,
    resumes_at      TEXT COLLATE "C"
);
CREATE TABLE node_runs (
    id               TEXT COLLATE "C" PRIMARY KEY,
    run_id           TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    graph_id         TEXT COLLATE "C" NOT NULL,
    spec_id          TEXT COLLATE "C" NOT NULL,
    node             TEXT COLLATE "C" NOT NULL,
    node_index       BIGINT NOT NULL,
    mode             TEXT COLLATE "C" NOT NULL,
    plugin           TEXT COLLATE "C",
    plugin_version   TEXT COLLATE "C",
    plugin_sha256    TEXT COLLATE "C",
    status           TEXT COLLATE "C" NOT NULL CHECK (status = 'running' OR status = 'completed' OR status = 'failed' OR status = 'blocked' OR status = 'interrupted' OR status = 'cancelled' OR status = 'limit_blocked'),
    summary          TEXT COLLATE "C",
    reason           TEXT COLLATE "C",
    detail           TEXT COLLATE "C",
    harness_session  TEXT COLLATE "C",
    resume_session   TEXT COLLATE "C",
    started_at       TEXT COLLATE "C" NOT NULL,
    finished_at      TEXT COLLATE "C",
    duration_ms      BIGINT
);
CREATE TABLE notifications (
    id          TEXT COLLATE "C" PRIMARY KEY,
    kind        TEXT COLLATE "C" NOT NULL,
    message     TEXT COLLATE "C" NOT NULL,
    message_id  TEXT COLLATE "C",
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE plugins (
    name         TEXT COLLATE "C" PRIMARY KEY,
    version      TEXT COLLATE "C" NOT NULL,
    sha256       TEXT COLLATE "C" NOT NULL,
    manifest     TEXT COLLATE "C" NOT NULL,
    granted      TEXT COLLATE "C" NOT NULL,
    builtin      BIGINT NOT NULL,
    enabled      BIGINT NOT NULL,
    installed_at TEXT COLLATE "C" NOT NULL
);
CREATE TABLE project_state (
    name         TEXT COLLATE "C" PRIMARY KEY,
    checkout     TEXT COLLATE "C" NOT NULL,
    head_sha     TEXT COLLATE "C",
    branch       TEXT COLLATE "C",
    observed_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE project_tags (
    project     TEXT COLLATE "C" NOT NULL REFERENCES project_state (name) ON DELETE CASCADE,
    tag         TEXT COLLATE "C" NOT NULL,
    commit_sha  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (project, tag)
);
CREATE TABLE queue_members (
    queue_id     TEXT COLLATE "C" NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    spec_id      TEXT COLLATE "C" NOT NULL REFERENCES specs (id),
    position     BIGINT NOT NULL,
    group_label  TEXT COLLATE "C",
    PRIMARY KEY (queue_id, spec_id)
);
CREATE TABLE run_spec_tally (
    run_id  TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    status  TEXT COLLATE "C" NOT NULL,
    specs   BIGINT NOT NULL,
    PRIMARY KEY (run_id, status)
);
CREATE TABLE run_specs (
    run_id           TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    spec_id          TEXT COLLATE "C" NOT NULL,
    ordinal          BIGINT NOT NULL,
    group_label      TEXT COLLATE "C",
    status           TEXT COLLATE "C" NOT NULL CHECK (status = 'running' OR status = 'blocked' OR status = 'completed' OR status = 'failed' OR status = 'skipped' OR status = 'interrupted' OR status = 'cancelled' OR status = 'limit_blocked'),
    next_node        BIGINT NOT NULL DEFAULT 0,
    summary          TEXT COLLATE "C",
    harness_session  TEXT COLLATE "C",
    started_at       TEXT COLLATE "C" NOT NULL,
    finished_at      TEXT COLLATE "C",
    PRIMARY KEY (run_id, spec_id)
);
CREATE TABLE sessions (
    id                TEXT COLLATE "C" PRIMARY KEY,
    name              TEXT COLLATE "C" NOT NULL,
    status            TEXT COLLATE "C" NOT NULL CHECK (status = 'live' OR status = 'finished'),
    conversation_id   TEXT COLLATE "C",
    tmux_target       TEXT COLLATE "C",
    tmux_socket       TEXT COLLATE "C",
    created_at        TEXT COLLATE "C" NOT NULL,
    updated_at        TEXT COLLATE "C" NOT NULL
);
CREATE TABLE webhook_deliveries (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    scope               TEXT COLLATE "C" NOT NULL,
    hook                TEXT COLLATE "C" NOT NULL,
    handler             TEXT COLLATE "C" NOT NULL,
    node                TEXT COLLATE "C" NOT NULL,
    status              TEXT COLLATE "C" NOT NULL CHECK (status = 'accepted' OR status = 'ignored' OR status = 'running' OR status = 'completed' OR status = 'failed' OR status = 'timed_out' OR status = 'interrupted' OR status = 'interrupted_unknown' OR status = 'denied'),
    reason              TEXT COLLATE "C",
    method              TEXT COLLATE "C" NOT NULL,
    path                TEXT COLLATE "C" NOT NULL,
    query               TEXT COLLATE "C",
    content_type        TEXT COLLATE "C",
    headers             TEXT COLLATE "C" NOT NULL,
    size                BIGINT NOT NULL,
    body                BYTEA NOT NULL,
    redelivery_of       TEXT COLLATE "C",
    test                BIGINT NOT NULL DEFAULT 0,
    received_at         TEXT COLLATE "C" NOT NULL,
    started_at          TEXT COLLATE "C",
    finished_at         TEXT COLLATE "C",
    duration_ms         BIGINT,
    error               TEXT COLLATE "C",
    output              TEXT COLLATE "C",
    result              TEXT COLLATE "C",
    sender_delivery_id  TEXT COLLATE "C",
    seq                 BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX cron_receipts_by_cron ON cron_receipts (cron, created_at);
CREATE INDEX cron_receipts_unfinished ON cron_receipts (status) WHERE status = 'running';
CREATE INDEX feed_by_time ON feed (timestamp);
CREATE INDEX graph_specs_by_position ON graph_specs (graph_id, position);
CREATE INDEX hook_runs_by_graph ON hook_runs (graph_id, fired_at);
CREATE INDEX hook_runs_by_project ON hook_runs (project, fired_at);
CREATE INDEX hook_runs_by_run ON hook_runs (run_id, fired_at);
CREATE INDEX hook_runs_by_time ON hook_runs (fired_at);
CREATE INDEX hook_runs_unfinished ON hook_runs (status) WHERE status IN ('queued', 'running');
CREATE INDEX messages_by_session ON messages (session_id, created_at, id);
CREATE INDEX messages_pending ON messages (status, session_id, created_at, id);
CREATE INDEX node_runs_by_graph ON node_runs (graph_id, started_at);
CREATE INDEX node_runs_by_run ON node_runs (run_id, started_at);
CREATE INDEX node_runs_running ON node_runs (status) WHERE status = 'running';
CREATE INDEX queue_members_by_position ON queue_members (queue_id, position);
CREATE INDEX run_specs_by_ordinal ON run_specs (run_id, ordinal);
CREATE INDEX run_specs_by_spec ON run_specs (spec_id, status);
CREATE INDEX run_specs_by_status ON run_specs (run_id, status);
CREATE INDEX runs_by_graph ON runs (graph_id, started_at);
CREATE INDEX sessions_by_name ON sessions (name, status);
CREATE INDEX webhook_deliveries_by_hook ON webhook_deliveries (scope, hook, received_at);
CREATE INDEX webhook_deliveries_by_sender ON webhook_deliveries (scope, hook, sender_delivery_id, received_at)
    WHERE sender_delivery_id IS NOT NULL;
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (received_at);
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (scope, hook, received_at) WHERE status IN ('accepted', 'running');

-- How many specs each run reached, by status, kept as run_specs changes (SQLite's triggers of
-- migration 12): a row leaving a status counts down, a row entering one counts up.
CREATE FUNCTION run_spec_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE run_spec_tally SET specs = specs - 1 WHERE run_id = OLD.run_id AND status = OLD.status;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO run_spec_tally (run_id, status, specs) VALUES (NEW.run_id, NEW.status, 1)
            ON CONFLICT (run_id, status) DO UPDATE SET specs = run_spec_tally.specs + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_spec_tally_insert AFTER INSERT ON run_specs
    FOR EACH ROW EXECUTE FUNCTION run_spec_tally();
CREATE TRIGGER run_spec_tally_update AFTER UPDATE OF run_id, status ON run_specs
    FOR EACH ROW WHEN (OLD.run_id IS DISTINCT FROM NEW.run_id OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION run_spec_tally();
CREATE TRIGGER run_spec_tally_delete AFTER DELETE ON run_specs
    FOR EACH ROW EXECUTE FUNCTION run_spec_tally();
