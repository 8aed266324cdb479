//! `canopy tui`: the operator's terminal UI, a client of the daemon's API and live feed (never of
//! the database).
//!
//! - [`app`]: the state and its reducer (messages in, state changes and commands out; pure).
//! - [`ui`]: drawing the state with ratatui widgets.
//! - [`data`]: API reads and actions through `canopy-client`, and the feed follower.
//! - here: the terminal (set up, and restored on quit, on error, on a signal and on panic) and the
//!   event loop: terminal input, feed events and API answers arrive on one channel; a one-second
//!   tick runs only while a node's elapsed time shows; the screen is drawn after each batch of
//!   messages, and ratatui writes only the cells that changed (no clearing, no flicker).
//!
//! Live by the feed: each event re-reads just what it changed (`GET /api/graphs/{name}` for a
//! graph's or node's event, ...); nothing polls.

mod app;
mod data;
mod ui;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use std::io::{BufWriter, Stdout, Write as _};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::terminal::{
    BeginSynchronizedUpdate, EndSynchronizedUpdate, EnterAlternateScreen, enable_raw_mode,
};
use ratatui::crossterm::{execute, queue};
use tokio::sync::mpsc;

use app::{App, Command, Msg, Resource};
use canopy_datadir::DataDir;
use data::Data;

/// How often the input thread looks whether the TUI is ending.
const INPUT_POLL: Duration = Duration::from_millis(100);

/// Runs the terminal UI against the daemon of `data` until the user quits.
pub async fn run(data: &DataDir) -> Result<ExitCode> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!(
            "canopy tui needs a terminal (stdin and stdout are not one); for scripts use the other commands' --json"
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let data = Data::new(data.clone(), tx.clone());
    let feed = tokio::spawn(data.clone().follow());
    let mut screen = Screen::enter()?;
    let stop = Arc::new(AtomicBool::new(false));
    let input = spawn_input(tx, stop.clone());
    let result = event_loop(&mut screen, rx, &data).await;
    stop.store(true, Ordering::Relaxed);
    feed.abort();
    drop(screen);
    // The input thread ends within one poll; it holds nothing that needs waiting for otherwise.
    let _ = tokio::task::spawn_blocking(move || input.join()).await;
    result.map(|()| ExitCode::SUCCESS)
}

/// The terminal the TUI draws on. Each frame is buffered whole and written at once, between
/// synchronized-update marks, so a terminal never shows half a frame.
type Term = Terminal<CrosstermBackend<BufWriter<Stdout>>>;

/// Room for a whole frame (a full 300×100 redraw with colours fits).
const FRAME_BUFFER: usize = 1 << 18;

/// The terminal in raw mode on the alternate screen; dropping it restores the terminal (on
/// quit and on error; the panic hook does it on a panic).
struct Screen {
    terminal: Term,
}

impl Screen {
    fn enter() -> Result<Self> {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            ratatui::restore();
            hook(info);
        }));
        let setup = || -> std::io::Result<Term> {
            enable_raw_mode()?;
            execute!(std::io::stdout(), EnterAlternateScreen)?;
            Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(
                FRAME_BUFFER,
                std::io::stdout(),
            )))
        };
        match setup() {
            Ok(terminal) => Ok(Self { terminal }),
            Err(err) => {
                ratatui::restore();
                Err(err).context("cannot set up the terminal")
            }
        }
    }

    /// Draws one frame, written in one go.
    fn draw(&mut self, app: &App) -> Result<()> {
        queue!(self.terminal.backend_mut(), BeginSynchronizedUpdate).context("cannot draw")?;
        self.terminal
            .draw(|frame| ui::draw(frame, app, canopy_model::time::Timestamp::now()))
            .context("cannot draw")?;
        let backend = self.terminal.backend_mut();
        queue!(backend, EndSynchronizedUpdate).context("cannot draw")?;
        backend.flush().context("cannot draw")
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        ratatui::restore();
    }
}

/// Reads terminal input on a thread of its own (crossterm's reads block) and sends it on.
fn spawn_input(
    tx: mpsc::UnboundedSender<Msg>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(INPUT_POLL) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(err) => {
                    let _ = tx.send(Msg::Disconnected(format!(
                        "cannot read the terminal: {err}"
                    )));
                    return;
                }
            }
            let msg = match event::read() {
                Ok(Event::Key(key)) => Msg::Key(key),
                Ok(Event::Resize(..)) => Msg::Resize,
                Ok(_) => continue,
                Err(err) => {
                    let _ = tx.send(Msg::Disconnected(format!(
                        "cannot read the terminal: {err}"
                    )));
                    return;
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    })
}

async fn event_loop(
    screen: &mut Screen,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    data: &Data,
) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut app = App::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    screen.draw(&app)?;
    loop {
        let first = tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => msg,
                None => return Ok(()),
            },
            _ = tick.tick(), if app.needs_tick() => Msg::Tick,
            _ = terminate.recv() => return Ok(()),
            _ = hangup.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
        };
        let mut commands = app.update(first);
        // Whatever else already arrived is applied before drawing once.
        while let Ok(msg) = rx.try_recv() {
            commands.extend(app.update(msg));
        }
        for command in dedupe(commands) {
            data.execute(command);
        }
        if app.quit {
            return Ok(());
        }
        screen.draw(&app)?;
    }
}

/// Reads of one resource asked several times in a batch are made once (the newest).
fn dedupe(commands: Vec<Command>) -> Vec<Command> {
    let mut kept: Vec<Command> = Vec::with_capacity(commands.len());
    for command in commands.into_iter().rev() {
        let duplicate = |resource: &Resource| {
            kept.iter()
                .any(|k| matches!(k, Command::Load { resource: r, .. } if r == resource))
        };
        match &command {
            Command::Load { resource, .. } if duplicate(resource) => {}
            _ => kept.push(command),
        }
    }
    kept.reverse();
    kept
}
