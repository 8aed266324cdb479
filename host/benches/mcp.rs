//! MCP round trips: `cargo bench --bench mcp`.

fn main() {}
