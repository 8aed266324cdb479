//! Drawing the app's state with ratatui widgets: a header, the sidebar (projects and, under the
//! selected one, Backlog, Graphs, Queues, Sessions), the main pane for the focused row, a status
//! line and the keys. Laid out for 80×24 and up; ratatui diffs frames, so a redraw writes only
//! the cells that changed.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize as _};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};

use super::app::{
    App, CONTINUE_MODES, Graph, GraphExt as _, GraphStatus, Level, Link, Modal, Row, Section,
};
use canopy_model::records::hook_runs::HookRunStatus;
use canopy_model::records::queues::MemberStatus;
use canopy_model::records::sessions::SessionStatus;
use canopy_model::records::views::ProgressResult;
use canopy_model::time::Timestamp;

/// The keys, as the help pop-up lists them.
pub const KEYS: &[(&str, &str)] = &[
    ("↑ ↓  j k", "move in the sidebar (PgUp/PgDn: 10 rows)"),
    ("Enter", "select the project under the cursor"),
    ("J K", "scroll the main pane down / up"),
    ("r", "run the graph (pick its bound specs or a queue)"),
    (
        "c",
        "continue: plain, skip_next_spec, run_from_node (pick a node)",
    ),
    ("x", "reset the graph (asks to confirm)"),
    (
        "s",
        "stop the run in flight: cancel it, its node's processes killed (asks to confirm)",
    ),
    ("o", "open a node run's full output"),
    ("b", "show the blocker (jumps to a blocked graph)"),
    ("/", "filter the sidebar by name (Enter keeps, Esc clears)"),
    ("?", "this help"),
    ("Esc", "close a pop-up, clear the filter"),
    ("q  Ctrl-C", "quit"),
];

/// Draws the whole screen; `now` is what elapsed times count to.
pub fn draw(frame: &mut Frame, app: &App, now: Timestamp) {
    // A long message (a refusal naming the ways out) takes up to 3 lines rather than being cut.
    let width = usize::from(frame.area().width.max(1));
    let status_lines = status_text(app).map_or(1, |(_, text)| {
        u16::try_from((text.chars().count() + 1).div_ceil(width).clamp(1, 3)).unwrap_or(1)
    });
    let [header, body, status, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(status_lines),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let side = (body.width * 2 / 5).clamp(20, 36);
    let [sidebar, main] =
        Layout::horizontal([Constraint::Length(side), Constraint::Min(10)]).areas(body);

    draw_header(frame, app, header);
    draw_sidebar(frame, app, sidebar);
    draw_main(frame, app, main, now);
    draw_status(frame, app, status);
    frame.render_widget(
        Paragraph::new(
            "↑↓/⏎ select r run c continue x reset o output b blocker / filter ? help q quit",
        )
        .dark_gray(),
        keys,
    );
    if let Some(modal) = &app.modal {
        draw_modal(frame, app, modal, body);
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let project = match app.current_project() {
        Some(Some(dir)) => dir,
        Some(None) => "(no workdir)".to_string(),
        None => "-".to_string(),
    };
    let (feed, color) = match &app.link {
        Link::Connecting => ("connecting", Color::Yellow),
        Link::Live => ("live", Color::Green),
        Link::Down(_) => ("down", Color::Red),
    };
    let blocked = app.graphs.values().filter(|g| g.is_blocked()).count();
    let mut spans = vec![
        Span::styled(" canopy ", Style::new().bold().reversed()),
        Span::raw(" feed: "),
        Span::styled(feed, Style::new().fg(color)),
    ];
    if blocked > 0 {
        spans.push(Span::styled(
            format!("  {blocked} blocked"),
            Style::new().fg(Color::Red).bold(),
        ));
    }
    spans.push(Span::raw(format!("  project: {project}")));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn status_color(status: GraphStatus) -> Color {
    match status {
        GraphStatus::Idle | GraphStatus::Unknown => Color::Gray,
        GraphStatus::Running => Color::Cyan,
        GraphStatus::Paused => Color::Yellow,
        GraphStatus::Completed => Color::Green,
        GraphStatus::Failed => Color::Red,
        GraphStatus::Cancelled => Color::Magenta,
    }
}

/// The colour a state is shown in: green done well, red stopped badly, cyan under way, yellow
/// set aside, grey otherwise (and for a state a newer daemon added).
trait Tint {
    fn color(self) -> Color;
}

impl Tint for SessionStatus {
    fn color(self) -> Color {
        match self {
            Self::Live => Color::Green,
            Self::Finished | Self::Unknown => Color::Gray,
        }
    }
}

impl Tint for MemberStatus {
    fn color(self) -> Color {
        match self {
            Self::Completed => Color::Green,
            Self::Failed | Self::Blocked | Self::Interrupted => Color::Red,
            Self::Running | Self::Pending => Color::Cyan,
            Self::Skipped | Self::LimitBlocked => Color::Yellow,
            Self::Cancelled | Self::Unknown => Color::Gray,
        }
    }
}

impl Tint for ProgressResult {
    fn color(self) -> Color {
        match self {
            Self::Completed => Color::Green,
            Self::Failed | Self::Blocked | Self::Interrupted => Color::Red,
            Self::Running => Color::Cyan,
            Self::Skipped | Self::LimitBlocked => Color::Yellow,
            Self::NotReached | Self::Cancelled | Self::Unknown => Color::Gray,
        }
    }
}

impl Tint for HookRunStatus {
    fn color(self) -> Color {
        match self {
            Self::Completed => Color::Green,
            Self::Failed | Self::TimedOut | Self::Interrupted => Color::Red,
            Self::Queued | Self::Running => Color::Cyan,
            Self::Skipped => Color::Yellow,
            Self::Dropped | Self::Unknown => Color::Gray,
        }
    }
}

/// `text` as the terminal may show it: a tab as spaces, no other control characters (an
/// escape sequence in a process's output must not reach the terminal).
pub fn clean(text: &str) -> String {
    text.replace('\t', "    ")
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .collect()
}

/// `text` on as many lines as it has, each cleaned.
fn lines_of(text: &str, style: Style) -> Vec<Line<'static>> {
    text.lines()
        .map(|l| Line::styled(clean(l), style))
        .collect()
}

/// `text` cut to `width` characters, with `…` when cut.
fn cut(text: &str, width: usize) -> String {
    let one_line = clean(&text.replace(['\n', '\r'], " "));
    if one_line.chars().count() <= width {
        return one_line;
    }
    let kept: String = one_line.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

fn basename(dir: &str) -> &str {
    dir.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|b| !b.is_empty())
        .unwrap_or(dir)
}

fn draw_sidebar(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.rows();
    let cursor = app.cursor(&rows);
    let current = app.current_project();
    let width = usize::from(area.width.saturating_sub(2));
    let items: Vec<ListItem> = rows
        .iter()
        .map(|row| ListItem::new(row_line(app, row, current.as_ref(), width)))
        .collect();
    let title = if app.filtering || !app.filter.is_empty() {
        format!(
            " filter: {}{} ",
            app.filter,
            if app.filtering { "▏" } else { "" }
        )
    } else {
        " Projects ".to_string()
    };
    let list = List::new(items)
        .block(Block::new().borders(Borders::RIGHT).title(title))
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected(cursor);
    frame.render_stateful_widget(list, area, &mut state);
}

fn row_line<'a>(
    app: &'a App,
    row: &Row,
    current: Option<&Option<String>>,
    width: usize,
) -> Line<'a> {
    match row {
        Row::Project(project) => {
            let open = Some(project) == current;
            let name = project.as_deref().map_or("(no workdir)", basename);
            Line::from(vec![
                Span::raw(if open { "▾ " } else { "▸ " }),
                Span::styled(cut(name, width.saturating_sub(2)), Style::new().bold()),
            ])
        }
        Row::Header(section) => {
            let count = match section {
                Section::Backlog => app.backlog().len(),
                Section::Graphs => app.project_graphs().len(),
                Section::Queues => app.project_queues().len(),
                Section::Sessions => app.visible_sessions().len(),
            };
            Line::from(Span::styled(
                format!("  {} ({count})", section.title()),
                Style::new().fg(Color::Blue).bold(),
            ))
        }
        Row::Empty(_) => Line::from(Span::styled("    (none)", Style::new().dark_gray())),
        Row::Spec(id) => {
            let Some(spec) = app.specs.iter().find(|s| &s.id == id) else {
                return Line::raw("");
            };
            let flag = if spec.needs_conversion {
                " needs conversion"
            } else {
                ""
            };
            let room = width.saturating_sub(4 + flag.chars().count()).max(6);
            Line::from(vec![
                Span::raw(format!("    {}", cut(&spec.name, room))),
                Span::styled(flag, Style::new().fg(Color::Yellow)),
            ])
        }
        Row::Graph(name) => {
            let Some(graph) = app.graphs.get(name) else {
                return Line::raw("");
            };
            let status = graph.graph.status.as_str();
            let flag = if graph.is_blocked() { " BLOCKED" } else { "" };
            let room = width.saturating_sub(5 + status.len() + flag.len()).max(6);
            Line::from(vec![
                Span::raw(format!("    {} ", cut(&graph.graph.name, room))),
                Span::styled(status, Style::new().fg(status_color(graph.graph.status))),
                Span::styled(flag, Style::new().fg(Color::Red).bold()),
            ])
        }
        Row::Queue(id) => {
            let Some(queue) = app.queues.iter().find(|q| &q.id == id) else {
                return Line::raw("");
            };
            let pending = queue.members.iter().filter(|m| m.pending).count();
            let tail = format!(" {pending}/{} pending", queue.members.len());
            let room = width.saturating_sub(4 + tail.len()).max(6);
            Line::from(vec![
                Span::raw(format!("    {}", cut(&queue.name, room))),
                Span::styled(tail, Style::new().dark_gray()),
            ])
        }
        Row::Session(id) => {
            let Some(session) = app.sessions.iter().find(|s| &s.id == id) else {
                return Line::raw("");
            };
            let name = Some(session.name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| short(&session.id));
            let room = width
                .saturating_sub(5 + session.status.as_str().len())
                .max(6);
            Line::from(vec![
                Span::raw(format!("    {} ", cut(&name, room))),
                Span::styled(
                    session.status.to_string(),
                    Style::new().fg(session.status.color()),
                ),
            ])
        }
    }
}

fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// `12s`, `3m 04s`, `1h 02m`.
pub fn elapsed(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The clock time (UTC) of a timestamp (`06:12:19`).
fn clock(at: Timestamp) -> String {
    at.as_jiff().strftime("%H:%M:%S").to_string()
}

fn draw_main(frame: &mut Frame, app: &App, area: Rect, now: Timestamp) {
    let area = Rect {
        x: area.x + 1,
        width: area.width.saturating_sub(1),
        ..area
    };
    let width = usize::from(area.width);
    let lines: Vec<Line> = match app.focused_row() {
        Some(Row::Graph(name)) => match app.graphs.get(&name) {
            Some(graph) => graph_lines(app, graph, now, width),
            None => vec![Line::raw(format!("graph {name} is gone"))],
        },
        Some(Row::Spec(id)) => match app.specs.iter().find(|s| s.id == id) {
            Some(spec) => {
                let mut lines = vec![
                    Line::from(Span::styled(
                        format!("Spec {}", spec.name),
                        Style::new().bold(),
                    )),
                    Line::raw(format!("id       {}", spec.id)),
                    Line::raw(format!(
                        "workdir  {}",
                        spec.workdir.as_deref().unwrap_or("(none)")
                    )),
                ];
                if spec.needs_conversion {
                    lines.push(Line::styled(
                        "needs conversion: written in the older heading format; rewrite it in the tagged <spec> format",
                        Style::new().fg(Color::Yellow),
                    ));
                }
                if let Some(summary) = &spec.summary {
                    lines.push(Line::raw(format!("summary  {summary}")));
                }
                lines
            }
            None => Vec::new(),
        },
        Some(Row::Queue(id)) => match app.queues.iter().find(|q| q.id == id) {
            Some(queue) => {
                let mut lines = vec![Line::from(Span::styled(
                    format!("Queue {}", queue.name),
                    Style::new().bold(),
                ))];
                for (i, member) in queue.members.iter().enumerate() {
                    lines.push(Line::from(vec![
                        Span::raw(format!(
                            "{:>3} {:<24} {:<8} ",
                            i + 1,
                            cut(&member.spec_name, 24),
                            cut(member.group.as_deref().unwrap_or("-"), 8)
                        )),
                        Span::styled(
                            member.status.to_string(),
                            Style::new().fg(member.status.color()),
                        ),
                    ]));
                }
                lines
            }
            None => Vec::new(),
        },
        Some(Row::Session(id)) => match app.sessions.iter().find(|s| s.id == id) {
            Some(session) => vec![
                Line::from(Span::styled(
                    format!("Session {}", session.name),
                    Style::new().bold(),
                )),
                Line::raw(format!("id      {}", session.id)),
                Line::raw(format!("status  {}", session.status)),
            ],
            None => Vec::new(),
        },
        Some(Row::Project(project)) => {
            let selected = app.current_project().as_ref() == Some(&project);
            let mut lines = vec![Line::from(Span::styled(
                format!(
                    "Project {}",
                    project
                        .as_deref()
                        .unwrap_or("(specs and queues with no workdir)")
                ),
                Style::new().bold(),
            ))];
            if selected {
                let graphs = app.project_graphs();
                let blocked = graphs.iter().filter(|g| g.is_blocked()).count();
                lines.push(Line::raw(format!(
                    "{} specs in the backlog, {} graphs ({blocked} blocked), {} queues",
                    app.backlog().len(),
                    graphs.len(),
                    app.project_queues().len()
                )));
            } else {
                lines.push(Line::raw("Enter: show this project's backlog and graphs"));
            }
            lines
        }
        Some(Row::Header(_) | Row::Empty(_)) | None => match &app.link {
            Link::Down(why) => vec![Line::styled(why.clone(), Style::new().fg(Color::Red))],
            Link::Connecting => vec![Line::raw("connecting to the daemon...")],
            Link::Live => vec![Line::raw(
                "No graphs or specs yet: `canopy spec add`, `canopy graph create`.",
            )],
        },
    };
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((app.scroll, 0)),
        area,
    );
}

fn graph_lines<'a>(app: &'a App, graph: &'a Graph, now: Timestamp, width: usize) -> Vec<Line<'a>> {
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("Graph {}", graph.graph.name), Style::new().bold()),
        Span::raw("  status: "),
        Span::styled(
            graph.graph.status.as_str(),
            Style::new().fg(status_color(graph.graph.status)).bold(),
        ),
        Span::styled(
            if graph.is_blocked() { "  BLOCKED" } else { "" },
            Style::new().fg(Color::Red).bold(),
        ),
    ])];
    if let Some(blocker) = &graph.graph.blocker {
        lines.extend(lines_of(
            &format!("blocker: {blocker}"),
            Style::new().fg(Color::Red),
        ));
    }
    if let Some(warning) = &graph.consistency_warning {
        lines.extend(lines_of(
            &format!("warning: {warning}"),
            Style::new().fg(Color::Yellow),
        ));
    }
    match &graph.current_run {
        Some(run) => {
            let mut text = format!("run {} {}", short(&run.run.id), run.run.status);
            if let Some(queue) = &run.run.queue_id {
                let name = app
                    .queues
                    .iter()
                    .find(|q| &q.id == queue)
                    .map_or_else(|| short(queue), |q| q.name.clone());
                text.push_str(&format!(" · queue {name}"));
            }
            text.push_str(&format!(" · started {}", clock(run.run.started_at)));
            lines.push(Line::raw(text));
            if let Some(node) = graph.running_node() {
                let spec = graph.spec_name(&node.spec_id).unwrap_or("-");
                let seconds = now.as_jiff().as_second() - node.started_at.as_jiff().as_second();
                lines.push(Line::from(vec![
                    Span::styled("now: ", Style::new().fg(Color::Cyan).bold()),
                    Span::raw(format!("{} on {spec} · {}", node.node, elapsed(seconds))),
                ]));
            }
            if let Some(summary) = &run.run.summary {
                lines.push(Line::raw(format!("summary: {summary}")));
            }
        }
        // Idle: never run, or reset (its runs stay in its history: `canopy graph info`).
        None => lines.push(Line::styled(
            "no current run: r runs it",
            Style::new().dark_gray(),
        )),
    }
    if !graph.progress.is_empty() {
        let counts: Vec<String> = graph
            .progress_summary
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        lines.push(Line::from(Span::styled(
            format!("Specs: {}", counts.join(", ")),
            Style::new().fg(Color::Blue).bold(),
        )));
        let name_width = (width / 3).clamp(8, 24);
        for p in &graph.progress {
            let note = match (&p.reason_node, &p.reason, &p.summary) {
                (Some(node), Some(reason), _) => format!("{node}: {reason}"),
                (None, Some(reason), _) => reason.clone(),
                (_, None, Some(summary)) => summary.clone(),
                _ => String::new(),
            };
            lines.push(Line::from(vec![
                Span::raw(format!(
                    "{:>3} {:<name_width$} ",
                    p.position,
                    cut(&p.spec_name, name_width)
                )),
                Span::styled(
                    format!("{:<10} ", p.result.as_str()),
                    Style::new().fg(p.result.color()),
                ),
                Span::raw(cut(&note, width.saturating_sub(name_width + 16).max(8))),
            ]));
        }
    }
    if let Some(runs) = app.hook_runs.get(&graph.graph.name)
        && !runs.is_empty()
    {
        lines.push(Line::from(Span::styled(
            "Hook runs",
            Style::new().fg(Color::Blue).bold(),
        )));
        for run in runs.iter().rev() {
            let name = Some(run.hook_name.as_str())
                .filter(|h| !h.is_empty())
                .map(|h| {
                    h.strip_prefix(&format!("{}.", graph.graph.name))
                        .unwrap_or(h)
                })
                .or(Some(run.event.as_str()).filter(|e| !e.is_empty()))
                .unwrap_or("-");
            let note = run
                .error
                .as_deref()
                .or(run.summary.as_deref())
                .unwrap_or("");
            lines.push(Line::from(vec![
                Span::raw(format!(" {} {:<16} ", clock(run.fired_at), cut(name, 16))),
                Span::styled(
                    format!("{:<9} ", run.status.as_str()),
                    Style::new().fg(run.status.color()),
                ),
                Span::raw(cut(note, width.saturating_sub(37).max(8))),
            ]));
        }
    }
    lines
}

/// The status line's text and style: the last message, else why the feed is down.
fn status_text(app: &App) -> Option<(Style, String)> {
    match &app.status {
        Some((Level::Error, text)) => Some((Style::new().fg(Color::Red), format!(" {text}"))),
        Some((Level::Info, text)) => Some((Style::new(), format!(" {text}"))),
        None => match &app.link {
            Link::Down(why) => Some((Style::new().fg(Color::Red), format!(" {why}"))),
            _ => None,
        },
    }
}

fn draw_status(frame: &mut Frame, app: &App, area: Rect) {
    let line =
        status_text(app).map_or_else(|| Line::raw(""), |(style, text)| Line::styled(text, style));
    frame.render_widget(
        Paragraph::new(line).wrap(ratatui::widgets::Wrap { trim: false }),
        area,
    );
}

/// A rectangle of `width`×`height` (at most the area's) in the middle of `area`.
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

fn picker<'a>(
    title: &str,
    options: impl IntoIterator<Item = String>,
    index: usize,
) -> (String, Vec<Line<'a>>) {
    let lines = options
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            if i == index {
                Line::styled(format!("> {text}"), Style::new().reversed())
            } else {
                Line::raw(format!("  {text}"))
            }
        })
        .collect();
    (title.to_string(), lines)
}

fn draw_modal(frame: &mut Frame, app: &App, modal: &Modal, area: Rect) {
    let (title, mut lines, scroll): (String, Vec<Line>, u16) = match modal {
        Modal::Help => {
            let lines = KEYS
                .iter()
                .map(|(key, what)| {
                    Line::from(vec![
                        Span::styled(format!("{key:<11}"), Style::new().bold()),
                        Span::raw(*what),
                    ])
                })
                .collect();
            ("Help: keys".to_string(), lines, 0)
        }
        Modal::Blocker { graph } => {
            let text = app
                .graphs
                .get(graph)
                .and_then(|g| g.graph.blocker.clone())
                .unwrap_or_else(|| "not blocked any more".to_string());
            let mut lines = lines_of(&text, Style::new());
            lines.push(Line::raw(""));
            lines.push(Line::styled(
                "c continue (plain, skip_next_spec, run_from_node)  s cancel  x reset",
                Style::new().dark_gray(),
            ));
            (format!("Blocker of {graph}"), lines, 0)
        }
        Modal::RunPicker {
            graph,
            options,
            index,
        } => {
            let (title, lines) = picker(
                &format!("Run {graph} over"),
                options.iter().map(|(_, label)| label.clone()),
                *index,
            );
            (title, lines, 0)
        }
        Modal::ContinuePicker { graph, index } => {
            let (title, lines) = picker(
                &format!("Continue {graph}"),
                CONTINUE_MODES
                    .iter()
                    .map(|(mode, what)| format!("{mode:<15} {what}")),
                *index,
            );
            (title, lines, 0)
        }
        Modal::NodePicker { graph, index } => {
            let nodes: Vec<String> = app
                .graphs
                .get(graph)
                .map(|g| g.graph.nodes.iter().map(|n| n.name.clone()).collect())
                .unwrap_or_default();
            let (title, lines) = picker(&format!("Continue {graph} from node"), nodes, *index);
            (title, lines, 0)
        }
        Modal::ConfirmReset { graph } => (
            format!("Reset {graph}"),
            vec![
                Line::raw(format!("Reset graph {graph} to idle? The history stays.")),
                Line::raw(""),
                Line::styled("y reset   n / Esc keep it", Style::new().bold()),
            ],
            0,
        ),
        Modal::ConfirmCancel { graph } => (
            format!("Cancel {graph}"),
            vec![
                Line::raw(format!(
                    "Cancel graph {graph}'s run? Its running node is stopped and its processes killed; the run is recorded cancelled."
                )),
                Line::raw(""),
                Line::styled(
                    "y cancel the run   n / Esc let it go on",
                    Style::new().bold(),
                ),
            ],
            0,
        ),
        Modal::OutputPicker {
            graph,
            options,
            index,
        } => {
            if options.is_empty() {
                (
                    format!("Output of {graph}"),
                    vec![Line::raw("the current run has no node runs")],
                    0,
                )
            } else {
                let (title, lines) = picker(
                    &format!("Output of which node run of {graph}"),
                    options.iter().map(|(_, label)| label.clone()),
                    *index,
                );
                (title, lines, 0)
            }
        }
        Modal::Output {
            title,
            text,
            scroll,
        } => {
            let lines = match text {
                Some(text) => lines_of(text, Style::new()),
                None => vec![Line::raw("reading...")],
            };
            (title.clone(), lines, *scroll)
        }
    };
    let full = matches!(modal, Modal::Output { .. });
    let (width, height) = if full {
        (area.width.saturating_sub(2), area.height)
    } else {
        let widest = lines.iter().map(Line::width).max().unwrap_or(0);
        let wanted = u16::try_from(widest.max(title.chars().count()) + 4).unwrap_or(u16::MAX);
        let width = wanted.min(area.width.saturating_sub(4)).max(20);
        // Wrapped lines: a rough count of the rows they take.
        let inner = usize::from(width.saturating_sub(2)).max(1);
        let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
        (width, u16::try_from(rows + 2).unwrap_or(u16::MAX))
    };
    if matches!(modal, Modal::Output { .. }) {
        lines.insert(
            0,
            Line::styled("↑↓ PgUp PgDn scroll · Esc close", Style::new().dark_gray()),
        );
    }
    let rect = centered(area, width, height);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0))
            .block(Block::bordered().title(format!(" {title} "))),
        rect,
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::app::{Loaded, Msg, Resource, Spec};

    fn screen(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| draw(frame, app, Timestamp::now()))
            .unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut text = String::new();
        for y in 0..height {
            for x in 0..width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }

    #[test]
    fn a_spec_needing_conversion_is_flagged_in_80_columns() {
        let mut app = App::new();
        app.update(Msg::Loaded {
            resource: Resource::Specs,
            seq: 1,
            answer: Ok(Loaded::Specs(vec![Spec {
                id: "a".into(),
                name: "A rather long spec name that is cut".into(),
                workdir: Some("/src/web".into()),
                needs_conversion: true,
                summary: None,
                body: String::new(),
                created_at: canopy_model::time::Timestamp::UNIX_EPOCH,
                updated_at: canopy_model::time::Timestamp::UNIX_EPOCH,
            }])),
        });
        let text = screen(&app, 80, 24);
        assert!(text.contains("needs conversion"), "{text}");
        assert!(text.contains("▾ web"), "{text}");
    }

    #[test]
    fn j_and_k_scroll_a_long_run_into_view_in_24_rows() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

        use crate::app::GraphStatus;

        let mut app = App::new();
        let progress = (1..=40)
            .map(|i| {
                serde_json::json!({
                    "position": i, "spec_id": format!("s{i}"),
                    "spec_name": format!("Spec number {i}"), "group": null,
                    "result": "completed", "summary": null, "reason": null,
                    "reason_node": null, "done_in_run": null
                })
            })
            .collect();
        let graph = crate::app::fixtures::graph(
            "long",
            "/src/web",
            GraphStatus::Completed,
            None,
            &[],
            progress,
        );
        app.update(Msg::Loaded {
            resource: Resource::Graphs,
            seq: 1,
            answer: Ok(Loaded::Graphs(vec![graph])),
        });
        let key = |code| Msg::Key(KeyEvent::new(code, KeyModifiers::NONE));
        app.update(key(KeyCode::Down));
        let text = screen(&app, 80, 24);
        assert!(text.contains("Graph long"), "{text}");
        assert!(!text.contains("Spec number 40"), "{text}");
        for _ in 0..5 {
            app.update(key(KeyCode::Char('J')));
        }
        let text = screen(&app, 80, 24);
        assert!(text.contains("Spec number 40"), "{text}");
        for _ in 0..5 {
            app.update(key(KeyCode::Char('K')));
        }
        assert!(screen(&app, 80, 24).contains("Graph long"));
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(clean("a\tb\u{1b}[2Jc\n"), "a    b[2Jc\n");
    }

    #[test]
    fn elapsed_times_read_as_people_say_them() {
        assert_eq!(elapsed(7), "7s");
        assert_eq!(elapsed(184), "3m 04s");
        assert_eq!(elapsed(3720), "1h 02m");
    }
}
