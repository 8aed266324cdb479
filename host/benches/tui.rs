//! TUI latency: `cargo bench --bench tui`.

fn main() {}
