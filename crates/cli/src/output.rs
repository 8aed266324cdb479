//! Small pieces of the CLI's text output shared by its commands: times (always UTC, and said
//! so), lists that came back empty, warnings from the daemon, and the check for empty arguments.

use canopy_model::time::Timestamp;
use serde_json::Value;

use super::table;

/// A time as `2026-05-01 09:30:00 UTC`; `-` when there is none.
pub(crate) fn utc(at: impl Into<Option<Timestamp>>) -> String {
    match at.into() {
        Some(at) => format!("{} UTC", utc_cell(at)),
        None => "-".to_string(),
    }
}

/// A time for a table cell whose header says `(UTC)`: `2026-05-01 09:30:00`; `-` when there
/// is none.
pub(crate) fn utc_cell(at: impl Into<Option<Timestamp>>) -> String {
    match at.into() {
        Some(at) => at.as_jiff().strftime("%Y-%m-%d %H:%M:%S").to_string(),
        None => "-".to_string(),
    }
}

/// Prints the table, or `empty` on a line of its own when there are no rows: a list that came
/// back empty says so instead of printing bare headers.
pub(crate) fn table_or(headers: &[&str], rows: &[Vec<String>], empty: &str) {
    if rows.is_empty() {
        println!("{empty}");
    } else {
        print!("{}", table::render(headers, rows));
    }
}

/// Prints each entry of an answer's `warnings` to stderr as `warning: ...`.
pub(crate) fn print_warnings(answer: &Value) {
    for warning in answer["warnings"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        if let Some(text) = warning.as_str() {
            eprintln!("warning: {text}");
        }
    }
}

/// A clap value parser for ids and names: refuses an empty or blank argument (`spec show ''`)
/// instead of sending a request that can only fail in a confusing way.
pub(crate) fn non_empty(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("it is empty; give an id, a unique id prefix or a name".to_string())
    } else {
        Ok(text.to_string())
    }
}

#[cfg(test)]
mod tests {
    /// Every command's help has an example, and every positional argument a description.
    #[test]
    fn every_command_has_an_example_and_every_positional_a_description() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", command.get_name());
            if command.get_after_help().is_none() && command.get_after_long_help().is_none() {
                missing.push(format!("{path}: no example (after_help)"));
            }
            for argument in command.get_positionals() {
                if argument.get_help().is_none() && argument.get_long_help().is_none() {
                    missing.push(format!("{path} <{}>: no description", argument.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_name() != "help" {
                    walk(sub, &path, missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(
            &<super::super::Cli as clap::CommandFactory>::command(),
            "",
            &mut missing,
        );
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
