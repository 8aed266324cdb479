//! The TUI's state and its reducer: a message in (a key, a feed event, an API answer), the state
//! changed and the [`Command`]s to carry out (API reads and actions) out. Nothing here does I/O,
//! so every behaviour is a unit test away.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use serde_json::{Value, json};

use canopy_model::events::Envelope;
pub use canopy_model::records::graphs::GraphStatus;
pub use canopy_model::records::hook_runs::HookRun;
pub use canopy_model::records::queues::Queue;
pub use canopy_model::records::runs::{NodeRun, NodeRunStatus};
pub use canopy_model::records::sessions::Session;
pub use canopy_model::records::specs::Spec;
pub use canopy_model::records::views::GraphView;

/// A graph as `GET /api/graphs/{name}` shows it.
pub type Graph = GraphView;

/// What the TUI asks of a graph's view.
pub trait GraphExt {
    /// Paused with a blocker: the graph waits for a person.
    fn is_blocked(&self) -> bool;
    /// The node run in progress, if any.
    fn running_node(&self) -> Option<&NodeRun>;
    /// The spec's name for an id of this graph's progress.
    fn spec_name(&self, id: &str) -> Option<&str>;
}

impl GraphExt for GraphView {
    fn is_blocked(&self) -> bool {
        self.graph.status == GraphStatus::Paused && self.graph.blocker.is_some()
    }

    fn running_node(&self) -> Option<&NodeRun> {
        self.current_run
            .as_ref()?
            .node_runs
            .iter()
            .rev()
            .find(|n| n.status == NodeRunStatus::Running)
    }

    fn spec_name(&self, id: &str) -> Option<&str> {
        self.progress
            .iter()
            .find(|p| p.spec_id == id)
            .map(|p| p.spec_name.as_str())
    }
}

/// What the TUI reads from the API, one kind per route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Specs,
    Graphs,
    Graph(String),
    Queues,
    Sessions,
    HookRuns(String),
}

impl Resource {
    /// What it is, in words.
    pub fn describe(&self) -> String {
        match self {
            Self::Specs => "the specs".into(),
            Self::Graphs => "the graphs".into(),
            Self::Graph(name) => format!("graph {name}"),
            Self::Queues => "the queues".into(),
            Self::Sessions => "the sessions".into(),
            Self::HookRuns(graph) => format!("the hook runs of graph {graph}"),
        }
    }
}

/// An API answer for a [`Resource`].
#[derive(Debug, Clone, PartialEq)]
pub enum Loaded {
    Specs(Vec<Spec>),
    Graphs(Vec<Graph>),
    /// `None`: the graph is gone (404).
    Graph(Option<Box<Graph>>),
    Queues(Vec<Queue>),
    Sessions(Vec<Session>),
    HookRuns(Vec<HookRun>),
}

/// A feed event, reduced to what decides what to re-read.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    pub event: String,
    pub target: Option<String>,
    pub payload: Value,
}

impl FeedEvent {
    /// From an envelope of `GET /api/feed`.
    pub fn from_envelope(envelope: Envelope) -> Self {
        Self {
            event: envelope.event,
            target: envelope.target,
            payload: envelope.payload,
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        self.payload[name].as_str().map(str::to_string)
    }
}

/// Everything the event loop hands the app.
#[derive(Debug)]
pub enum Msg {
    Key(KeyEvent),
    /// The terminal changed size (a redraw is all it takes).
    Resize,
    /// A second passed while something shows elapsed time.
    Tick,
    /// The live feed is connected (again): everything is read anew.
    Connected,
    /// The daemon went away or refused the feed, in words.
    Disconnected(String),
    Feed(FeedEvent),
    /// A read's answer; `seq` orders answers to reads of the same resource.
    Loaded {
        resource: Resource,
        seq: u64,
        answer: Result<Loaded, String>,
    },
    /// A control call's answer: the graph's new view, or the daemon's refusal.
    Controlled {
        graph: String,
        action: String,
        seq: u64,
        answer: Result<Box<Graph>, String>,
    },
    /// A node run's stored output.
    Output {
        node_run: String,
        answer: Result<String, String>,
    },
}

/// What the app asks the data layer to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Load {
        resource: Resource,
        seq: u64,
    },
    /// `POST /api/graphs/{graph}/control` with `body`.
    Control {
        graph: String,
        body: Value,
        seq: u64,
    },
    Output {
        node_run: String,
    },
    Quit,
}

/// A row of the sidebar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// A project (a workdir); `None` is the specs and queues tied to no workdir.
    Project(Option<String>),
    Header(Section),
    Spec(String),
    Graph(String),
    Queue(String),
    Session(String),
    /// Nothing under a section.
    Empty(Section),
}

impl Row {
    fn selectable(&self) -> bool {
        !matches!(self, Row::Header(_) | Row::Empty(_))
    }
}

/// The sections under the selected project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Backlog,
    Graphs,
    Queues,
    Sessions,
}

impl Section {
    /// Its heading in the sidebar.
    pub fn title(self) -> &'static str {
        match self {
            Self::Backlog => "Backlog",
            Self::Graphs => "Graphs",
            Self::Queues => "Queues",
            Self::Sessions => "Sessions",
        }
    }
}

/// The ways `continue` can go on.
pub const CONTINUE_MODES: [(&str, &str); 3] = [
    ("plain", "go on where the run stopped"),
    ("skip_next_spec", "skip the blocked (or next) spec"),
    ("run_from_node", "start the spec again at a node..."),
];

/// A pop-up over the panes; keys go to it first.
#[derive(Debug, Clone, PartialEq)]
pub enum Modal {
    Help,
    Blocker {
        graph: String,
    },
    /// Run: the bound specs (`None`) or a queue.
    RunPicker {
        graph: String,
        options: Vec<(Option<String>, String)>,
        index: usize,
    },
    ContinuePicker {
        graph: String,
        index: usize,
    },
    NodePicker {
        graph: String,
        index: usize,
    },
    ConfirmReset {
        graph: String,
    },
    ConfirmCancel {
        graph: String,
    },
    /// The current run's node runs: (id, label).
    OutputPicker {
        graph: String,
        options: Vec<(String, String)>,
        index: usize,
    },
    Output {
        title: String,
        text: Option<String>,
        scroll: u16,
    },
}

/// How a status-line message reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Error,
}

/// The connection to the daemon's live feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting,
    Live,
    Down(String),
}

/// The whole state of the TUI.
#[derive(Debug)]
pub struct App {
    pub specs: Vec<Spec>,
    pub graphs: BTreeMap<String, Graph>,
    pub queues: Vec<Queue>,
    pub sessions: Vec<Session>,
    pub hook_runs: HashMap<String, Vec<HookRun>>,
    /// The project whose sections show (a workdir; `None`: no workdir).
    pub project: Option<Option<String>>,
    /// The focused row (kept by identity across data changes).
    pub focus: Option<Row>,
    pub filter: String,
    pub filtering: bool,
    /// Rows the main pane is scrolled down by (back to the top when the focus moves).
    pub scroll: u16,
    pub modal: Option<Modal>,
    pub status: Option<(Level, String)>,
    /// The graph and action the status line reports on (`run web: now running`): kept up to
    /// date as that graph's status changes.
    announced: Option<(String, String)>,
    pub link: Link,
    pub quit: bool,
    /// The newest read asked for and applied, per resource.
    asked: HashMap<Resource, u64>,
    applied: HashMap<Resource, u64>,
    seq: u64,
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}

impl App {
    /// An empty app, waiting for the feed to connect.
    pub fn new() -> Self {
        Self {
            specs: Vec::new(),
            graphs: BTreeMap::new(),
            queues: Vec::new(),
            sessions: Vec::new(),
            hook_runs: HashMap::new(),
            project: None,
            focus: None,
            filter: String::new(),
            filtering: false,
            scroll: 0,
            modal: None,
            status: None,
            announced: None,
            link: Link::Connecting,
            quit: false,
            asked: HashMap::new(),
            applied: HashMap::new(),
            seq: 0,
        }
    }

    /// The projects: distinct workdirs of graphs and specs, sorted; `None` last when a spec or
    /// queue has no workdir.
    pub fn projects(&self) -> Vec<Option<String>> {
        let mut dirs: BTreeSet<String> = self
            .graphs
            .values()
            .map(|g| g.graph.workdir.clone())
            .collect();
        let mut loose = false;
        for spec in &self.specs {
            match &spec.workdir {
                Some(dir) => {
                    dirs.insert(dir.clone());
                }
                None => loose = true,
            }
        }
        let mut projects: Vec<Option<String>> = dirs.into_iter().map(Some).collect();
        if loose || self.queues.iter().any(|q| self.queue_project(q).is_empty()) {
            projects.push(None);
        }
        projects
    }

    /// The selected project, defaulting to the first.
    pub fn current_project(&self) -> Option<Option<String>> {
        let projects = self.projects();
        match &self.project {
            Some(p) if projects.contains(p) => Some(p.clone()),
            _ => projects.into_iter().next(),
        }
    }

    /// The workdirs a queue's members are tagged with (empty: none).
    fn queue_project(&self, queue: &Queue) -> BTreeSet<Option<String>> {
        queue
            .members
            .iter()
            .filter_map(|m| self.specs.iter().find(|s| s.id == m.spec_id))
            .map(|s| s.workdir.clone())
            .collect()
    }

    fn matches(&self, text: &str) -> bool {
        self.filter.is_empty() || text.to_lowercase().contains(&self.filter.to_lowercase())
    }

    /// The backlog of the selected project (filtered).
    pub fn backlog(&self) -> Vec<&Spec> {
        let Some(project) = self.current_project() else {
            return Vec::new();
        };
        self.specs
            .iter()
            .filter(|s| s.workdir == project && self.matches(&s.name))
            .collect()
    }

    /// The graphs of the selected project (filtered).
    pub fn project_graphs(&self) -> Vec<&Graph> {
        let Some(project) = self.current_project() else {
            return Vec::new();
        };
        self.graphs
            .values()
            .filter(|g| Some(&g.graph.workdir) == project.as_ref() && self.matches(&g.graph.name))
            .collect()
    }

    /// The queues holding a spec of the selected project, or (for no project) none tagged.
    pub fn project_queues(&self) -> Vec<&Queue> {
        let Some(project) = self.current_project() else {
            return Vec::new();
        };
        self.queues
            .iter()
            .filter(|q| {
                let dirs = self.queue_project(q);
                let mine = match &project {
                    Some(_) => dirs.contains(&project),
                    None => dirs.is_empty() || dirs.contains(&None),
                };
                mine && self.matches(&q.name)
            })
            .collect()
    }

    /// The sessions (they carry no workdir: every project shows them all), filtered.
    pub fn visible_sessions(&self) -> Vec<&Session> {
        self.sessions
            .iter()
            .filter(|s| self.matches(if s.name.is_empty() { &s.id } else { &s.name }))
            .collect()
    }

    /// The sidebar's rows, top to bottom.
    pub fn rows(&self) -> Vec<Row> {
        let current = self.current_project();
        let mut rows = Vec::new();
        for project in self.projects() {
            let selected = Some(&project) == current.as_ref();
            rows.push(Row::Project(project));
            if !selected {
                continue;
            }
            let sections: [(Section, Vec<Row>); 4] = [
                (
                    Section::Backlog,
                    self.backlog()
                        .iter()
                        .map(|s| Row::Spec(s.id.clone()))
                        .collect(),
                ),
                (
                    Section::Graphs,
                    self.project_graphs()
                        .iter()
                        .map(|g| Row::Graph(g.graph.name.clone()))
                        .collect(),
                ),
                (
                    Section::Queues,
                    self.project_queues()
                        .iter()
                        .map(|q| Row::Queue(q.id.clone()))
                        .collect(),
                ),
                (
                    Section::Sessions,
                    self.visible_sessions()
                        .iter()
                        .map(|s| Row::Session(s.id.clone()))
                        .collect(),
                ),
            ];
            for (section, items) in sections {
                rows.push(Row::Header(section));
                if items.is_empty() {
                    rows.push(Row::Empty(section));
                }
                rows.extend(items);
            }
        }
        rows
    }

    /// The index of the focused row (the first selectable one when the focus is gone).
    pub fn cursor(&self, rows: &[Row]) -> Option<usize> {
        self.focus
            .as_ref()
            .and_then(|f| rows.iter().position(|r| r == f))
            .or_else(|| rows.iter().position(Row::selectable))
    }

    /// The graph the main pane shows: the focused one.
    pub fn focused_graph(&self) -> Option<&Graph> {
        match self.focused_row()? {
            Row::Graph(name) => self.graphs.get(&name),
            _ => None,
        }
    }

    /// The row the cursor is on.
    pub fn focused_row(&self) -> Option<Row> {
        let rows = self.rows();
        self.cursor(&rows).map(|i| rows[i].clone())
    }

    /// Whether something on screen shows a time that moves (a node running now).
    pub fn needs_tick(&self) -> bool {
        self.focused_graph()
            .is_some_and(|g| g.running_node().is_some())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn load(&mut self, resource: Resource) -> Command {
        let seq = self.next_seq();
        self.asked.insert(resource.clone(), seq);
        Command::Load { resource, seq }
    }

    fn say(&mut self, level: Level, text: impl Into<String>) {
        self.status = Some((level, text.into()));
        self.announced = None;
    }

    /// Brings an announced `{action} {graph}: now {status}` up to the graph's status.
    fn refresh_announced(&mut self) {
        if let Some((graph, action)) = &self.announced
            && let Some(view) = self.graphs.get(graph)
        {
            self.status = Some((
                Level::Info,
                format!("{action} {graph}: now {}", view.graph.status.as_str()),
            ));
        }
    }

    /// Applies one message; returns what to do about it.
    pub fn update(&mut self, msg: Msg) -> Vec<Command> {
        match msg {
            Msg::Key(key) => self.key(key),
            Msg::Resize | Msg::Tick => Vec::new(),
            Msg::Connected => {
                let was_down = matches!(self.link, Link::Down(_));
                self.link = Link::Live;
                if was_down {
                    self.say(Level::Info, "reconnected to the daemon");
                }
                let mut commands = vec![
                    self.load(Resource::Specs),
                    self.load(Resource::Graphs),
                    self.load(Resource::Queues),
                    self.load(Resource::Sessions),
                ];
                if let Some(Row::Graph(name)) = self.focused_row() {
                    commands.push(self.load(Resource::HookRuns(name)));
                }
                commands
            }
            Msg::Disconnected(why) => {
                // What it does first: a long reason (a data dir's path) runs past the width of
                // the status line, and cut there it hid that the TUI keeps trying.
                self.say(Level::Error, format!("reconnecting... ({why})"));
                self.link = Link::Down(why);
                Vec::new()
            }
            Msg::Feed(event) => self.feed(&event),
            Msg::Loaded {
                resource,
                seq,
                answer,
            } => self.loaded(resource, seq, answer),
            Msg::Controlled {
                graph,
                action,
                seq,
                answer,
            } => match answer {
                Ok(view) => {
                    self.say(
                        Level::Info,
                        format!("{action} {graph}: now {}", view.graph.status.as_str()),
                    );
                    self.announced = Some((graph.clone(), action));
                    self.loaded(Resource::Graph(graph), seq, Ok(Loaded::Graph(Some(view))))
                }
                Err(why) => {
                    self.say(Level::Error, format!("{action} {graph} refused: {why}"));
                    Vec::new()
                }
            },
            Msg::Output { node_run, answer } => {
                if let Some(Modal::Output { text, title, .. }) = &mut self.modal {
                    match answer {
                        Ok(output) => *text = Some(output),
                        Err(why) => {
                            *text = Some(String::new());
                            self.status = Some((
                                Level::Error,
                                format!("cannot read the output of node run {node_run}: {why}"),
                            ));
                            *title = format!("{title} (unreadable)");
                        }
                    }
                }
                Vec::new()
            }
        }
    }

    /// A feed event: re-read just what it changed.
    fn feed(&mut self, event: &FeedEvent) -> Vec<Command> {
        let name = event.event.as_str();
        let family = name.split('.').next().unwrap_or_default();
        let mut commands = Vec::new();
        match family {
            "graph" => {
                let Some(graph) = event.target.clone().or_else(|| event.field("graph_name")) else {
                    return commands;
                };
                if name == "graph.deleted" {
                    self.graphs.remove(&graph);
                    return commands;
                }
                commands.push(self.load(Resource::Graph(graph.clone())));
                if name.starts_with("graph.run.") {
                    commands.push(self.load(Resource::Queues));
                    if self.hook_runs.contains_key(&graph) {
                        commands.push(self.load(Resource::HookRuns(graph)));
                    }
                }
            }
            "node" => {
                if let Some(graph) = event.field("graph_name") {
                    commands.push(self.load(Resource::Graph(graph)));
                }
            }
            "spec" => match name {
                "spec.created" | "spec.updated" | "spec.deleted" => {
                    commands.push(self.load(Resource::Specs));
                    commands.push(self.load(Resource::Queues));
                }
                _ => {
                    commands.push(self.load(Resource::Specs));
                    commands.push(self.load(Resource::Queues));
                    if let Some(graph) = event.field("graph_name") {
                        commands.push(self.load(Resource::Graph(graph)));
                    }
                }
            },
            "hook" => {
                // A graph's hook is named `<graph>.<key>[<index>]`.
                let graph = event
                    .field("hook_name")
                    .filter(|_| event.field("source").as_deref() == Some("graph"))
                    .and_then(|h| h.rsplit_once('.').map(|(g, _)| g.to_string()));
                if let Some(graph) = graph
                    && self.hook_runs.contains_key(&graph)
                {
                    commands.push(self.load(Resource::HookRuns(graph)));
                }
            }
            "session" => commands.push(self.load(Resource::Sessions)),
            _ => {}
        }
        commands
    }

    fn loaded(
        &mut self,
        resource: Resource,
        seq: u64,
        answer: Result<Loaded, String>,
    ) -> Vec<Command> {
        // An answer older than one applied already (two reads crossed) changes nothing.
        if self.applied.get(&resource).is_some_and(|&done| done > seq) {
            return Vec::new();
        }
        self.applied.insert(resource.clone(), seq);
        let loaded = match answer {
            Ok(loaded) => loaded,
            Err(why) => {
                self.say(
                    Level::Error,
                    format!("cannot read {}: {why}", resource.describe()),
                );
                return Vec::new();
            }
        };
        let mut commands = Vec::new();
        match loaded {
            Loaded::Specs(specs) => self.specs = specs,
            Loaded::Graphs(graphs) => {
                let mut fresh = BTreeMap::new();
                for graph in graphs {
                    let resource = Resource::Graph(graph.graph.name.clone());
                    // A graph read alone and answered after this list was asked stays.
                    match (
                        self.applied.get(&resource),
                        self.graphs.remove(&graph.graph.name),
                    ) {
                        (Some(&done), Some(newer)) if done > seq => {
                            fresh.insert(newer.graph.name.clone(), newer);
                        }
                        _ => {
                            self.applied.insert(resource, seq);
                            fresh.insert(graph.graph.name.clone(), graph);
                        }
                    }
                }
                self.graphs = fresh;
            }
            Loaded::Graph(Some(graph)) => {
                self.graphs.insert(graph.graph.name.clone(), *graph);
            }
            Loaded::Graph(None) => {
                if let Resource::Graph(name) = &resource {
                    self.graphs.remove(name);
                }
            }
            Loaded::Queues(queues) => self.queues = queues,
            Loaded::Sessions(sessions) => self.sessions = sessions,
            Loaded::HookRuns(runs) => {
                if let Resource::HookRuns(graph) = resource {
                    self.hook_runs.insert(graph, runs);
                }
            }
        }
        self.refresh_announced();
        commands.extend(self.focus_changed());
        commands
    }

    /// After the focus or the data moved: read the focused graph's hook runs once.
    fn focus_changed(&mut self) -> Vec<Command> {
        match self.focused_row() {
            Some(Row::Graph(name))
                if !self.hook_runs.contains_key(&name)
                    && !self.asked.contains_key(&Resource::HookRuns(name.clone())) =>
            {
                vec![self.load(Resource::HookRuns(name))]
            }
            _ => Vec::new(),
        }
    }

    fn move_focus(&mut self, down: bool, steps: usize) {
        let rows = self.rows();
        let Some(mut at) = self.cursor(&rows) else {
            return;
        };
        for _ in 0..steps {
            let next = if down {
                rows.iter()
                    .enumerate()
                    .skip(at + 1)
                    .find(|(_, r)| r.selectable())
            } else {
                rows.iter()
                    .enumerate()
                    .take(at)
                    .rev()
                    .find(|(_, r)| r.selectable())
            };
            match next {
                Some((i, _)) => at = i,
                None => break,
            }
        }
        let focus = Some(rows[at].clone());
        if focus != self.focus {
            self.scroll = 0;
        }
        self.focus = focus;
    }

    fn key(&mut self, key: KeyEvent) -> Vec<Command> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return vec![Command::Quit];
        }
        if let Some(modal) = self.modal.take() {
            return self.modal_key(modal, key);
        }
        if self.filtering {
            match key.code {
                KeyCode::Esc => {
                    self.filter.clear();
                    self.filtering = false;
                }
                KeyCode::Enter => self.filtering = false,
                KeyCode::Down => self.move_focus(true, 1),
                KeyCode::Up => self.move_focus(false, 1),
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            return self.focus_changed();
        }
        match key.code {
            KeyCode::Char('q') => {
                self.quit = true;
                return vec![Command::Quit];
            }
            KeyCode::Char('?') => self.modal = Some(Modal::Help),
            KeyCode::Char('/') => {
                self.filtering = true;
            }
            KeyCode::Esc => {
                self.filter.clear();
                self.status = None;
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_focus(true, 1),
            KeyCode::Up | KeyCode::Char('k') => self.move_focus(false, 1),
            KeyCode::PageDown => self.move_focus(true, 10),
            KeyCode::PageUp => self.move_focus(false, 10),
            KeyCode::Char('J') => self.scroll = self.scroll.saturating_add(5),
            KeyCode::Char('K') => self.scroll = self.scroll.saturating_sub(5),
            KeyCode::Enter | KeyCode::Char(' ') => {
                if let Some(Row::Project(project)) = self.focused_row() {
                    self.project = Some(project.clone());
                    self.focus = Some(Row::Project(project));
                }
            }
            KeyCode::Char('b') => self.blocker(),
            KeyCode::Char('r') => self.with_graph("run", |app, graph| {
                let mut options = vec![(None, "its bound specs".to_string())];
                for queue in app.project_queues() {
                    let pending = queue.members.iter().filter(|m| m.pending).count();
                    options.push((
                        Some(queue.id.clone()),
                        format!("queue {} ({pending} pending)", queue.name),
                    ));
                }
                Modal::RunPicker {
                    graph,
                    options,
                    index: 0,
                }
            }),
            KeyCode::Char('c') => self.with_graph("continue", |_, graph| Modal::ContinuePicker {
                graph,
                index: 0,
            }),
            KeyCode::Char('x') => {
                self.with_graph("reset", |_, graph| Modal::ConfirmReset { graph })
            }
            KeyCode::Char('s') => {
                self.with_graph("cancel", |_, graph| Modal::ConfirmCancel { graph })
            }
            KeyCode::Char('o') => self.with_graph("open a node run's output", |app, graph| {
                let options = app
                    .graphs
                    .get(&graph)
                    .and_then(|g| {
                        let run = g.current_run.as_ref()?;
                        Some(
                            run.node_runs
                                .iter()
                                .map(|n| {
                                    let spec = g.spec_name(&n.spec_id).unwrap_or("-");
                                    (n.id.clone(), format!("{} on {spec}: {}", n.node, n.status))
                                })
                                .collect::<Vec<_>>(),
                        )
                    })
                    .unwrap_or_default();
                let index = options.len().saturating_sub(1);
                Modal::OutputPicker {
                    graph,
                    options,
                    index,
                }
            }),
            _ => {}
        }
        self.focus_changed()
    }

    /// Opens `modal` for the focused graph, or says that a graph must be focused.
    fn with_graph(&mut self, what: &str, modal: impl FnOnce(&Self, String) -> Modal) {
        match self.focused_row() {
            Some(Row::Graph(name)) => {
                // What the status line said before is not about this pop-up.
                if self
                    .status
                    .as_ref()
                    .is_some_and(|(level, _)| *level == Level::Error)
                {
                    self.status = None;
                }
                self.modal = Some(modal(self, name));
            }
            _ => self.say(
                Level::Error,
                format!("to {what}, select a graph first (under Graphs)"),
            ),
        }
    }

    /// `b`: the focused graph's blocker, or else the first blocked graph's (focused).
    fn blocker(&mut self) {
        if let Some(Row::Graph(name)) = self.focused_row()
            && self
                .graphs
                .get(&name)
                .is_some_and(|g| g.graph.blocker.is_some())
        {
            self.modal = Some(Modal::Blocker { graph: name });
            return;
        }
        let blocked = self
            .graphs
            .values()
            .find(|g| g.is_blocked())
            .map(|g| (g.graph.name.clone(), g.graph.workdir.clone()));
        match blocked {
            Some((name, workdir)) => {
                self.project = Some(Some(workdir));
                self.filter.clear();
                self.focus = Some(Row::Graph(name.clone()));
                self.modal = Some(Modal::Blocker { graph: name });
            }
            None => self.say(Level::Info, "no graph is blocked"),
        }
    }

    fn control(&mut self, graph: String, body: Value) -> Vec<Command> {
        let seq = self.next_seq();
        self.asked.insert(Resource::Graph(graph.clone()), seq);
        let action = body["action"].as_str().unwrap_or_default().to_string();
        self.say(Level::Info, format!("{action} {graph}..."));
        vec![Command::Control { graph, body, seq }]
    }

    fn modal_key(&mut self, modal: Modal, key: KeyEvent) -> Vec<Command> {
        let code = key.code;
        let step = |index: &mut usize, len: usize| match code {
            KeyCode::Down | KeyCode::Char('j') if *index + 1 < len => *index += 1,
            KeyCode::Up | KeyCode::Char('k') if *index > 0 => *index -= 1,
            _ => {}
        };
        if matches!(code, KeyCode::Esc | KeyCode::Char('q')) {
            return Vec::new();
        }
        match modal {
            Modal::Help | Modal::Blocker { .. } => Vec::new(),
            Modal::RunPicker {
                graph,
                options,
                mut index,
            } => {
                if code == KeyCode::Enter {
                    let body = match options.get(index).and_then(|(q, _)| q.clone()) {
                        Some(queue) => json!({ "action": "run", "queue_id": queue }),
                        None => json!({ "action": "run" }),
                    };
                    return self.control(graph, body);
                }
                step(&mut index, options.len());
                self.modal = Some(Modal::RunPicker {
                    graph,
                    options,
                    index,
                });
                Vec::new()
            }
            Modal::ContinuePicker { graph, mut index } => {
                if code == KeyCode::Enter {
                    return match CONTINUE_MODES[index].0 {
                        "plain" => self.control(graph, json!({ "action": "continue" })),
                        "skip_next_spec" => self.control(
                            graph,
                            json!({ "action": "continue", "mode": "skip_next_spec" }),
                        ),
                        _ => {
                            self.modal = Some(Modal::NodePicker { graph, index: 0 });
                            Vec::new()
                        }
                    };
                }
                step(&mut index, CONTINUE_MODES.len());
                self.modal = Some(Modal::ContinuePicker { graph, index });
                Vec::new()
            }
            Modal::NodePicker { graph, mut index } => {
                let nodes: Vec<String> = self
                    .graphs
                    .get(&graph)
                    .map(|g| g.graph.nodes.iter().map(|n| n.name.clone()).collect())
                    .unwrap_or_default();
                if code == KeyCode::Enter {
                    let Some(node) = nodes.get(index) else {
                        return Vec::new();
                    };
                    return self.control(
                        graph,
                        json!({ "action": "continue", "mode": "run_from_node", "node": node }),
                    );
                }
                step(&mut index, nodes.len());
                self.modal = Some(Modal::NodePicker { graph, index });
                Vec::new()
            }
            Modal::ConfirmReset { graph } => match code {
                KeyCode::Char('y') | KeyCode::Char('Y') => {
                    self.control(graph, json!({ "action": "reset" }))
                }
                KeyCode::Char('n') | KeyCode::Char('N') => Vec::new(),
                _ => {
                    self.modal = Some(Modal::ConfirmReset { graph });
                    Vec::new()
                }
            },
            Modal::ConfirmCancel { graph } => match code {
                KeyCode::Char('y') | KeyCode::Char('Y') => {
                    self.control(graph, json!({ "action": "cancel" }))
                }
                KeyCode::Char('n') | KeyCode::Char('N') => Vec::new(),
                _ => {
                    self.modal = Some(Modal::ConfirmCancel { graph });
                    Vec::new()
                }
            },
            Modal::OutputPicker {
                graph,
                options,
                mut index,
            } => {
                if code == KeyCode::Enter {
                    let Some((id, label)) = options.get(index).cloned() else {
                        return Vec::new();
                    };
                    self.modal = Some(Modal::Output {
                        title: format!("{graph}: {label}"),
                        text: None,
                        scroll: 0,
                    });
                    return vec![Command::Output { node_run: id }];
                }
                step(&mut index, options.len());
                self.modal = Some(Modal::OutputPicker {
                    graph,
                    options,
                    index,
                });
                Vec::new()
            }
            Modal::Output {
                title,
                text,
                mut scroll,
            } => {
                match code {
                    KeyCode::Down | KeyCode::Char('j') => scroll = scroll.saturating_add(1),
                    KeyCode::Up | KeyCode::Char('k') => scroll = scroll.saturating_sub(1),
                    KeyCode::PageDown | KeyCode::Char(' ') => scroll = scroll.saturating_add(10),
                    KeyCode::PageUp => scroll = scroll.saturating_sub(10),
                    _ => {}
                }
                self.modal = Some(Modal::Output {
                    title,
                    text,
                    scroll,
                });
                Vec::new()
            }
        }
    }
}

/// Graph views as the daemon answers them, for the tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use serde_json::{Value, json};

    use super::{GraphStatus, GraphView};

    /// A graph view with these nodes and progress (each `{position, spec_id, spec_name,
    /// result, ...}`), read from JSON as the API writes it.
    pub(crate) fn graph(
        name: &str,
        workdir: &str,
        status: GraphStatus,
        blocker: Option<&str>,
        nodes: &[&str],
        progress: Vec<Value>,
    ) -> GraphView {
        let nodes: Vec<Value> = nodes.iter().map(|n| json!({ "name": n })).collect();
        let completed = progress.len();
        serde_json::from_value(json!({
            "id": format!("{name}-id"), "name": name, "workdir": workdir, "nodes": nodes,
            "specs": [], "allow_dirty_start": false, "status": status, "blocker": blocker,
            "hooks": {}, "current_run_id": null, "version": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "specs_total": completed, "consistency_warning": null, "current_run": null,
            "progress_summary": if completed > 0 { json!({ "completed": completed }) } else { json!({}) },
            "progress_page": { "offset": 0, "limit": 50, "total": completed },
            "progress": progress, "completion_hook_runs": []
        }))
        .expect("a graph view as the API writes it")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn key(code: KeyCode) -> Msg {
        Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn spec(id: &str, name: &str, workdir: Option<&str>) -> Spec {
        Spec {
            id: id.into(),
            name: name.into(),
            workdir: workdir.map(str::to_string),
            needs_conversion: false,
            summary: None,
            body: String::new(),
            created_at: canopy_model::time::Timestamp::UNIX_EPOCH,
            updated_at: canopy_model::time::Timestamp::UNIX_EPOCH,
        }
    }

    fn graph(name: &str, workdir: &str, status: GraphStatus, blocker: Option<&str>) -> Graph {
        super::fixtures::graph(
            name,
            workdir,
            status,
            blocker,
            &["build", "test"],
            Vec::new(),
        )
    }

    fn loaded(app: &mut App, resource: Resource, answer: Loaded) -> Vec<Command> {
        let seq = app.next_seq();
        app.update(Msg::Loaded {
            resource,
            seq,
            answer: Ok(answer),
        })
    }

    #[test]
    fn a_lost_daemon_says_reconnecting_before_its_reason() {
        let mut app = App::new();
        let why = format!(
            "no canopy daemon is running for data dir /{}",
            "d".repeat(200)
        );
        app.update(Msg::Disconnected(why.clone()));
        let (level, text) = app.status.clone().unwrap();
        assert_eq!(level, Level::Error);
        assert!(text.starts_with("reconnecting..."), "{text}");
        assert!(text.contains(&why), "{text}");
        app.update(Msg::Connected);
        assert_eq!(
            app.status,
            Some((Level::Info, "reconnected to the daemon".to_string()))
        );
    }

    fn two_projects() -> App {
        let mut app = App::new();
        loaded(
            &mut app,
            Resource::Specs,
            Loaded::Specs(vec![
                spec("a1", "Login form", Some("/src/web")),
                spec("b1", "Parser", Some("/src/cli")),
                spec("c1", "Loose", None),
            ]),
        );
        loaded(
            &mut app,
            Resource::Graphs,
            Loaded::Graphs(vec![
                graph(
                    "web",
                    "/src/web",
                    GraphStatus::Paused,
                    Some("needs a human"),
                ),
                graph("cli", "/src/cli", GraphStatus::Idle, None),
            ]),
        );
        app
    }

    #[test]
    fn projects_are_the_workdirs_of_graphs_and_specs_and_the_backlog_is_the_selected_ones() {
        let mut app = two_projects();
        assert_eq!(
            app.projects(),
            vec![Some("/src/cli".into()), Some("/src/web".into()), None]
        );
        let names = |app: &App| {
            app.backlog()
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&app), vec!["Parser"]);
        // Down to the second project, Enter selects it.
        let rows = app.rows();
        let web = rows
            .iter()
            .position(|r| *r == Row::Project(Some("/src/web".into())))
            .unwrap();
        let steps = rows[..web].iter().filter(|r| r.selectable()).count();
        for _ in 0..steps {
            app.update(key(KeyCode::Down));
        }
        assert_eq!(
            app.focused_row(),
            Some(Row::Project(Some("/src/web".into())))
        );
        app.update(key(KeyCode::Enter));
        assert_eq!(names(&app), vec!["Login form"]);
        assert_eq!(
            app.project_graphs()
                .iter()
                .map(|g| g.graph.name.as_str())
                .collect::<Vec<_>>(),
            vec!["web"]
        );
    }

    #[test]
    fn b_focuses_the_blocked_graph_and_shows_its_blocker() {
        let mut app = two_projects();
        let commands = app.update(key(KeyCode::Char('b')));
        assert_eq!(
            app.modal,
            Some(Modal::Blocker {
                graph: "web".into()
            })
        );
        assert_eq!(app.focused_row(), Some(Row::Graph("web".into())));
        assert!(matches!(
            commands.as_slice(),
            [Command::Load { resource: Resource::HookRuns(g), .. }] if g == "web"
        ));
    }

    #[test]
    fn a_feed_event_rereads_only_what_it_changed() {
        let mut app = two_projects();
        let event = |name: &str, target: &str, payload: Value| {
            Msg::Feed(FeedEvent {
                event: name.into(),
                target: Some(target.into()),
                payload,
            })
        };
        let resources = |commands: Vec<Command>| {
            commands
                .into_iter()
                .map(|c| match c {
                    Command::Load { resource, .. } => resource,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            resources(app.update(event(
                "node.completed",
                "9c41",
                json!({"graph_name": "web"})
            ))),
            vec![Resource::Graph("web".into())]
        );
        assert_eq!(
            resources(app.update(event("graph.run.blocked", "web", json!({})))),
            vec![Resource::Graph("web".into()), Resource::Queues]
        );
        assert_eq!(
            resources(app.update(event("session.created", "s", json!({})))),
            vec![Resource::Sessions]
        );
        assert_eq!(
            resources(app.update(event("plugin.installed", "p", json!({})))),
            vec![]
        );
        app.update(event("graph.deleted", "web", json!({})));
        assert!(!app.graphs.contains_key("web"));
    }

    #[test]
    fn an_answer_older_than_one_applied_is_dropped() {
        let mut app = two_projects();
        let resource = Resource::Graph("cli".into());
        let running = graph("cli", "/src/cli", GraphStatus::Completed, None);
        let stale = graph("cli", "/src/cli", GraphStatus::Running, None);
        app.update(Msg::Loaded {
            resource: resource.clone(),
            seq: 100,
            answer: Ok(Loaded::Graph(Some(Box::new(running)))),
        });
        app.update(Msg::Loaded {
            resource,
            seq: 99,
            answer: Ok(Loaded::Graph(Some(Box::new(stale)))),
        });
        assert_eq!(app.graphs["cli"].graph.status, GraphStatus::Completed);
    }

    #[test]
    fn a_list_asked_before_a_graph_read_does_not_undo_it() {
        let mut app = two_projects();
        app.update(Msg::Loaded {
            resource: Resource::Graph("cli".into()),
            seq: 200,
            answer: Ok(Loaded::Graph(Some(Box::new(graph(
                "cli",
                "/src/cli",
                GraphStatus::Running,
                None,
            ))))),
        });
        app.update(Msg::Loaded {
            resource: Resource::Graphs,
            seq: 199,
            answer: Ok(Loaded::Graphs(vec![graph(
                "cli",
                "/src/cli",
                GraphStatus::Idle,
                None,
            )])),
        });
        assert_eq!(app.graphs["cli"].graph.status, GraphStatus::Running);
        assert!(
            !app.graphs.contains_key("web"),
            "a graph gone from the list is gone"
        );
    }

    #[test]
    fn continue_from_a_node_and_reset_go_through_their_pickers() {
        let mut app = two_projects();
        app.update(key(KeyCode::Char('b')));
        app.update(key(KeyCode::Esc));
        app.update(key(KeyCode::Char('c')));
        app.update(key(KeyCode::Down));
        app.update(key(KeyCode::Down));
        assert!(
            app.update(key(KeyCode::Enter)).is_empty(),
            "the node picker opens"
        );
        app.update(key(KeyCode::Down));
        let commands = app.update(key(KeyCode::Enter));
        assert!(matches!(
            commands.as_slice(),
            [Command::Control { graph, body, .. }]
                if graph == "web" && *body == json!({"action": "continue", "mode": "run_from_node", "node": "test"})
        ));
        // Reset asks first; `n` keeps the graph as it is.
        app.update(key(KeyCode::Char('x')));
        assert!(app.update(key(KeyCode::Char('n'))).is_empty());
        app.update(key(KeyCode::Char('x')));
        let commands = app.update(key(KeyCode::Char('y')));
        assert!(matches!(
            commands.as_slice(),
            [Command::Control { body, .. }] if *body == json!({"action": "reset"})
        ));
        // So does a cancel.
        app.update(key(KeyCode::Char('s')));
        assert!(app.update(key(KeyCode::Char('n'))).is_empty());
        app.update(key(KeyCode::Char('s')));
        let commands = app.update(key(KeyCode::Char('y')));
        assert!(matches!(
            commands.as_slice(),
            [Command::Control { body, .. }] if *body == json!({"action": "cancel"})
        ));
    }

    #[test]
    fn a_run_announced_on_the_status_line_follows_its_graph() {
        let mut app = two_projects();
        app.update(Msg::Controlled {
            graph: "web".into(),
            action: "run".into(),
            seq: 1,
            answer: Ok(Box::new(graph(
                "web",
                "/src/web",
                GraphStatus::Running,
                None,
            ))),
        });
        assert_eq!(
            app.status,
            Some((Level::Info, "run web: now running".into()))
        );
        loaded(
            &mut app,
            Resource::Graph("web".into()),
            Loaded::Graph(Some(Box::new(graph(
                "web",
                "/src/web",
                GraphStatus::Failed,
                None,
            )))),
        );
        assert_eq!(
            app.status,
            Some((Level::Info, "run web: now failed".into()))
        );
    }

    #[test]
    fn a_refused_control_is_said_in_words() {
        let mut app = two_projects();
        app.update(Msg::Controlled {
            graph: "web".into(),
            action: "continue".into(),
            seq: 1,
            answer: Err("graph `web` has no run to continue; start one with `run`".into()),
        });
        assert_eq!(
            app.status,
            Some((
                Level::Error,
                "continue web refused: graph `web` has no run to continue; start one with `run`"
                    .into()
            ))
        );
    }

    #[test]
    fn the_filter_narrows_the_sidebar() {
        let mut app = two_projects();
        app.project = Some(Some("/src/web".into()));
        app.update(key(KeyCode::Char('/')));
        for c in "zz".chars() {
            app.update(key(KeyCode::Char(c)));
        }
        assert!(app.backlog().is_empty());
        app.update(key(KeyCode::Esc));
        assert_eq!(app.backlog().len(), 1);
    }
}
