//! The command line. `canopy daemon` runs the daemon; every other command is a client of the
//! daemon's HTTP API (one code path for people, scripts and agents).

mod api_reference;
mod config;
mod cron;
mod daemon;
mod feed;
mod graph;
mod hooks;
mod output;
mod plugin;
mod profile;
mod progress;
mod queue;
mod run;
mod runtime_hook;
mod service;
mod session;
mod spec;
mod store;
mod table;
mod webhooks;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

use canopy_client::{Client, encode};
use canopy_datadir::DataDir;

/// Canopy runs agent work as graphs over specs and queues, and reacts with hooks.
#[derive(Debug, Parser)]
#[command(
    name = "canopy",
    version,
    // Said here, not taken from this crate's description (it is the CLI crate's, not Canopy's).
    about = "Canopy: a daemon and CLI that runs agent work as graphs over specs and queues, with hooks run by sandboxed WebAssembly executors",
    // `-V` belongs to `canopy` alone: a subcommand has no version of its own.
    propagate_version = false,
    after_help = "Example, a first run (the README's quick start walks through one):\n  canopy daemon start\n  canopy spec add --name \"Login form\" --file login.md\n  canopy graph create web.json\n  canopy graph run web --wait"
)]
pub struct Cli {
    /// Data dir of the daemon to run or talk to [default: $CANOPY_HOME, else
    /// $XDG_DATA_HOME/canopy, else ~/.local/share/canopy]
    #[arg(long, global = true, env = "CANOPY_HOME", value_name = "DIR")]
    data_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: HTTP API on loopback, executor host, engine. `daemon stop` stops it.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:\n  canopy daemon --listen 127.0.0.1:0    # any free port\n  canopy daemon stop"
    )]
    Daemon {
        #[command(subcommand)]
        action: Option<daemon::DaemonCommand>,
        /// Address to listen on (loopback only) [default: 127.0.0.1:7461, or `listen` in canopy.toml]
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Keep the state in this PostgreSQL database (postgres://user@host/dbname) instead of
        /// canopy.db in the data dir [default: $CANOPY_DATABASE_URL, or [database] in canopy.toml].
        /// A string with a password is better given in the environment: process arguments are
        /// visible to every user of the machine.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// Log to daemon.log only, not to stderr as well: how `canopy daemon start` runs it
        /// (its stderr is a file nobody rotates).
        #[arg(long, hide = true)]
        log_file_only: bool,
    },
    /// The running daemon: address, version, data dir, pid, uptime, active runs, plugins, and
    /// the last warnings and errors of its log.
    #[command(after_help = "Example:\n  canopy status")]
    Status {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The daemons sharing this daemon's database: their roles, whether each is alive (its
    /// last heartbeat), and the runs each drives (its leases). On SQLite, the one daemon.
    #[command(after_help = "Example:\n  canopy nodes")]
    Nodes {
        /// Print the API's JSON answer, unchanged, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's log file (daemon.log in the data dir), also when no daemon runs.
    #[command(after_help = "Examples:\n  canopy logs --lines 100\n  canopy logs --follow")]
    Logs {
        /// Keep printing lines as the daemon writes them (Ctrl-C ends).
        #[arg(long, short)]
        follow: bool,
        /// Lines to print from the end of the log.
        #[arg(long, short = 'n', default_value_t = 50, value_name = "N")]
        lines: usize,
        /// Print `{"log_file": ..., "lines": [...]}` instead of the lines.
        #[arg(long, conflicts_with = "follow")]
        json: bool,
    },
    /// Install, inspect, run and measure executor plugins.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy plugin list\n  canopy plugin run command --config '{\"command\": \"echo hi\"}'"
    )]
    Plugin(plugin::PluginCommand),
    /// The spec backlog.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy spec add --name \"Login form\" --file login.md\n  canopy spec list"
    )]
    Spec(spec::SpecCommand),
    /// Graphs: create, edit, run and inspect.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy graph create web.json\n  canopy graph run web --queue sprint-1 --wait\n  canopy graph get web"
    )]
    Graph(graph::GraphCommand),
    /// Queues of specs, with context groups.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy queue create sprint-1 3f2a 9c41\n  canopy queue group sprint-1 9c41 auth"
    )]
    Queue(queue::QueueCommand),
    /// Hook runs, the event taxonomy, and dry runs of a graph's hooks.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy hooks runs --graph web --since 2h\n  canopy hooks test web on_completed"
    )]
    Hooks(hooks::HooksCommand),
    /// The feed: every event Canopy recorded (graphs, specs, nodes, hooks, sessions, plugins),
    /// oldest first; --follow streams new ones.
    #[command(
        after_help = "Examples:\n  canopy feed --last 20\n  canopy feed --follow --family graph\n  canopy feed --event 'spec.*' --since 2h --json"
    )]
    Feed(feed::FeedArgs),
    /// Interactive sessions and the messages hooks send them.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy session new --name lead\n  canopy session inbox lead --follow"
    )]
    Session(session::SessionCommand),
    /// Print a shell completion script for canopy: bash, zsh, fish, elvish or powershell.
    #[command(
        after_help = "Examples:\n  canopy completions bash > ~/.local/share/bash-completion/completions/canopy\n  canopy completions zsh > ~/.zfunc/_canopy      # with fpath+=(~/.zfunc) before compinit\n  canopy completions fish > ~/.config/fish/completions/canopy.fish"
    )]
    Completions {
        /// The shell to write the script for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// The HTTP API's own description: its OpenAPI document.
    #[command(
        subcommand,
        after_help = "Example:\n  canopy api schema > canopy-openapi.json"
    )]
    Api(ApiCommand),
    /// The daemon's configuration (canopy.toml): check a file, put an edited one in force.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy config validate\n  canopy config reload"
    )]
    Config(config::ConfigCommand),
    /// Crons from canopy.toml: their state and receipts, firing one by hand, pausing.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy cron list\n  canopy cron logs --name prune-preview --last 5\n  canopy cron run prune-preview --wait"
    )]
    Cron(cron::CronCommand),
    /// Relay one runtime hook callback to the daemon: what an agent Canopy launched runs for a
    /// hook its runtime takes only as a command (the hook's JSON on stdin, the answer on
    /// stdout). Canopy writes it into the launch's hook configuration; it is not for typing.
    #[command(
        name = "runtime-hook",
        after_help = "Example (what a launched agent's SessionStart hook runs; the launch sets CANOPY_RUNTIME_URL and CANOPY_RUNTIME_TOKEN):\n  echo '{\"hook_event_name\": \"SessionStart\", \"source\": \"startup\"}' | canopy runtime-hook"
    )]
    RuntimeHook(runtime_hook::RelayArgs),
    /// Profiles from canopy.toml: the runtime hooks an agent listing them gets.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy profile list\n  canopy profile show base worker"
    )]
    Profile(profile::ProfileCommand),
    /// Webhook ingress: the configured webhooks (tokens redacted), their deliveries, a
    /// redelivery, and a local test without HTTP.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy webhooks list\n  canopy webhooks deliveries --hook global/deploy --status failed\n  canopy webhooks test global/deploy --body push.json"
    )]
    Webhooks(webhooks::WebhooksCommand),
    /// Run history: the runs of graphs, every node run of one, a node run's stored output.
    #[command(
        subcommand,
        after_help = "Examples:\n  canopy run list --graph web\n  canopy run show 3f2a\n  canopy run output 9c41"
    )]
    Run(run::RunCommand),
    /// The data dir's database itself, with no daemon running: move it to PostgreSQL.
    #[command(
        subcommand,
        after_help = "Example:\n  canopy store migrate --to postgres://canopy@db.internal/canopy"
    )]
    Store(store::StoreCommand),
    /// Serve MCP (Model Context Protocol) on stdin/stdout for an agent CLI: Canopy's graphs,
    /// specs, queues, hooks, sessions and feed as tools and resources.
    #[command(after_help = "Example (Claude Code):\n  claude mcp add canopy -- canopy mcp")]
    Mcp(McpArgs),
    /// The terminal UI: projects, backlog, graphs, queues and sessions, live.
    #[command(after_help = "Example:\n  canopy tui")]
    Tui(TuiArgs),
}

/// `canopy api`.
#[derive(Debug, Subcommand)]
pub enum ApiCommand {
    /// Print the API's OpenAPI 3.1 document (what `GET /api/openapi.json` serves): every
    /// route, its parameters, body, answers and errors. Made from this build's own routes;
    /// no daemon needs to run. Feed it to a client generator or an API tester.
    #[command(
        after_help = "Examples:\n  canopy api schema > canopy-openapi.json\n  canopy api schema | jq '.paths | keys'\n  canopy api schema --format markdown > api-reference.md"
    )]
    Schema {
        /// `json` (the document) or `markdown` (the manual's API reference page made from it).
        #[arg(long, value_enum, default_value = "json")]
        format: SchemaFormat,
    },
}

/// How `canopy api schema` prints the document.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaFormat {
    Json,
    Markdown,
}

/// `canopy mcp`: serve MCP on stdin/stdout.
#[derive(Debug, clap::Args)]
pub struct McpArgs {}

/// `canopy tui`.
#[derive(Debug, clap::Args)]
pub struct TuiArgs {}

/// The terminal UI's entry point (`canopy tui`), given by the binary: the TUI is a crate of its
/// own that the CLI does not depend on, so a change in one rebuilds neither the other nor the
/// daemon.
pub type Tui = fn(DataDir) -> Pin<Box<dyn Future<Output = anyhow::Result<ExitCode>>>>;

/// Runs the CLI; errors are printed as `error: ...` with exit code 1.
pub fn main(tui: Tui) -> ExitCode {
    let cli = Cli::parse();
    let daemon = matches!(cli.command, Command::Daemon { action: None, .. });
    let stderr_log = !matches!(
        cli.command,
        Command::Daemon {
            action: None,
            log_file_only: true,
            ..
        }
    );
    if !daemon {
        // Rust ignores SIGPIPE, so printing to a closed pipe (`canopy plugin list | head -1`)
        // panics in `println!`. A client command should end quietly like other CLIs: restore the
        // default, which ends the process when it writes to a pipe nobody reads. The daemon keeps
        // ignoring it (a client hanging up must not kill it).
        // SAFETY: called before any thread is spawned (the runtime is built below) and before
        // anything is printed; SIG_DFL is a valid disposition for SIGPIPE.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    init_tracing(daemon, stderr_log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, tui)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli, tui: Tui) -> anyhow::Result<ExitCode> {
    if let Command::Api(ApiCommand::Schema { format }) = cli.command {
        // The document is made from the daemon's own routes: no daemon needs to run.
        let json = canopy_daemon::api::openapi_json();
        match format {
            SchemaFormat::Json => println!("{json}"),
            SchemaFormat::Markdown => {
                let doc: serde_json::Value = serde_json::from_str(&json)?;
                print!("{}", api_reference::markdown(&doc));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Completions { shell } = cli.command {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut command, "canopy", &mut std::io::stdout());
        return Ok(ExitCode::SUCCESS);
    }
    let data = DataDir::resolve(cli.data_dir)?;
    match cli.command {
        Command::Daemon {
            action: None,
            listen,
            database,
            ..
        } => {
            canopy_daemon::daemon::run(data, listen, database).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Daemon {
            action: Some(action),
            ..
        } => daemon::run(&data, action).await,
        Command::Status { json } => daemon::status(&data, json).await,
        Command::Nodes { json } => daemon::nodes(&Client::connect(&data)?, json).await,
        Command::Logs {
            follow,
            lines,
            json,
        } => daemon::logs(&data, follow, lines, json).await,
        Command::Run(command) => run::run(&Client::connect(&data)?, command).await,
        Command::Store(command) => store::run(data, command).await,
        Command::Plugin(command) => plugin::run(&Client::connect(&data)?, command).await,
        Command::Spec(command) => spec::run(&Client::connect(&data)?, command).await,
        Command::Graph(command) => graph::run(&Client::connect(&data)?, command).await,
        Command::Queue(command) => queue::run(&Client::connect(&data)?, command).await,
        Command::Hooks(command) => hooks::run(&Client::connect(&data)?, command).await,
        Command::Session(command) => session::run(&Client::connect(&data)?, command).await,
        Command::Webhooks(command) => webhooks::run(&Client::connect(&data)?, command).await,
        Command::Feed(args) => feed::run(&data, args).await,
        Command::Config(command) => config::run(&data, command).await,
        Command::Cron(command) => cron::run(&Client::connect(&data)?, command).await,
        Command::Profile(command) => profile::run(&Client::connect(&data)?, command).await,
        Command::RuntimeHook(args) => runtime_hook::run(args).await,
        Command::Mcp(McpArgs {}) => canopy_daemon::mcp::serve_stdio(&data).await,
        Command::Tui(TuiArgs {}) => tui(data).await,
        Command::Completions { .. } | Command::Api(_) => Ok(ExitCode::SUCCESS),
    }
}

fn init_tracing(daemon: bool, stderr_log: bool) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let default = if daemon { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CANOPY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: a log file gets plain text (and no escape sequences).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr = stderr_log.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
    });
    // The daemon also writes daemon.log in its data dir, never in colour (see canopy_daemon::logfile).
    let file = daemon.then(|| {
        tracing_subscriber::fmt::layer()
            .fmt_fields(canopy_daemon::logfile::PlainFields::default())
            .with_writer(canopy_daemon::logfile::FileWriter)
            .with_ansi(false)
            .with_target(false)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .init();
}

pub(crate) fn print_json(value: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// An API answer read as the model's type `T` (`what` names it in the error). `--json` prints
/// the answer as it came; text output reads it through the same types the daemon wrote it from,
/// and a state a newer daemon added reads as `unknown` rather than failing.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(
    value: &Value,
    what: &str,
) -> anyhow::Result<T> {
    T::deserialize(value).map_err(|err| {
        anyhow::anyhow!(
            "cannot read the daemon's answer as {what}: {err} (this canopy is {}; is the daemon another version?)",
            env!("CARGO_PKG_VERSION")
        )
    })
}

pub(crate) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}
