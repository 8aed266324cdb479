//! Reading every shape problem of `canopy.toml` in one pass: serde stops at the first value of
//! the wrong shape, so [`Config::parse`](super::Config::parse) takes that value out of the
//! TOML and reads again. An element taken out of a list moves the later ones up; [`Pruned`]
//! keeps the original indices, so each problem names its place as the file has it.

use std::collections::BTreeMap;

use serde_path_to_error::Segment;

/// Shape problems listed at most (a file of garbage is not listed line by line).
pub const MAX_PROBLEMS: usize = 50;

/// What was taken out of the TOML so far.
#[derive(Debug, Default)]
pub struct Pruned {
    /// For each list (by its path as the file has it), the original indices taken out.
    removed: BTreeMap<String, Vec<usize>>,
    /// The top-level sections that had a problem.
    sections: Vec<String>,
}

impl Pruned {
    /// `path` (into the TOML as it is now) as the file has it: `hooks[3].event`.
    pub fn original(&self, path: &[Segment]) -> String {
        self.walk(path).0
    }

    /// Walks `path`, mapping each list index back to the file's; returns the shown path and,
    /// for each list on the way, (its path, the original index).
    fn walk(&self, path: &[Segment]) -> (String, Vec<(String, usize)>) {
        let mut shown = String::new();
        let mut lists = Vec::new();
        for segment in path {
            match segment {
                Segment::Seq { index } => {
                    let mut original = *index;
                    if let Some(removed) = self.removed.get(&shown) {
                        // Each removed index at or before this one moved it up by one.
                        for r in removed {
                            if *r <= original {
                                original += 1;
                            }
                        }
                    }
                    lists.push((shown.clone(), original));
                    shown.push_str(&format!("[{original}]"));
                }
                Segment::Map { key } | Segment::Enum { variant: key } => {
                    if !shown.is_empty() {
                        shown.push('.');
                    }
                    shown.push_str(key);
                }
                Segment::Unknown => {}
            }
        }
        (shown, lists)
    }

    /// Takes the value at `path` out of `table` (a list element, or a table's key; a path that
    /// ends past what the TOML has takes out what holds it). False when there is nothing to
    /// take: the whole file is of the wrong shape.
    pub fn remove(&mut self, table: &mut toml::Table, path: &[Segment]) -> bool {
        let mut path: Vec<Segment> = path
            .iter()
            .filter(|s| !matches!(s, Segment::Unknown))
            .cloned()
            .collect();
        while let Some(last) = path.last().cloned() {
            let parent = &path[..path.len() - 1];
            if let Some(section) = path.first().and_then(key_of)
                && !self.sections.contains(&section)
            {
                self.sections.push(section);
            }
            if parent.is_empty() {
                // A key of the file itself.
                return key_of(&last).is_some_and(|key| table.remove(&key).is_some());
            }
            let taken = match (value_at(table, parent), &last) {
                (Some(toml::Value::Array(items)), Segment::Seq { index })
                    if *index < items.len() =>
                {
                    items.remove(*index);
                    let (list, original) = self.walk(&path).1.pop().unwrap_or_default();
                    self.removed.entry(list).or_default().push(original);
                    true
                }
                (
                    Some(toml::Value::Table(map)),
                    Segment::Map { key } | Segment::Enum { variant: key },
                ) => map.remove(key).is_some(),
                _ => false,
            };
            if taken {
                return true;
            }
            path.pop();
        }
        false
    }

    /// The top-level sections (`hooks`, `webhooks`, ...) that had a shape problem.
    pub fn sections(&self) -> &[String] {
        &self.sections
    }
}

fn key_of(segment: &Segment) -> Option<String> {
    match segment {
        Segment::Map { key } | Segment::Enum { variant: key } => Some(key.clone()),
        _ => None,
    }
}

/// The value at `path` in `table`, to change in place.
fn value_at<'t>(table: &'t mut toml::Table, path: &[Segment]) -> Option<&'t mut toml::Value> {
    let (first, rest) = path.split_first()?;
    let mut value = table.get_mut(&key_of(first)?)?;
    for segment in rest {
        value = match (value, segment) {
            (toml::Value::Array(items), Segment::Seq { index }) => items.get_mut(*index)?,
            (toml::Value::Table(map), Segment::Map { key } | Segment::Enum { variant: key }) => {
                map.get_mut(key)?
            }
            _ => return None,
        };
    }
    Some(value)
}

/// Whether a problem's message is about `section` (it starts with its TOML path).
pub fn in_section(problem: &str, section: &str) -> bool {
    problem
        .strip_prefix(section)
        .is_some_and(|rest| rest.starts_with(['.', '[', ':', ' ']))
}

/// serde's message, said for a user: a number's type as the range one can write, and the
/// closest known name after an unknown one.
pub fn readable(message: &str) -> String {
    let mut message = message.to_string();
    for kind in ["unknown field `", "unknown variant `"] {
        if let Some(rest) = message.strip_prefix(kind)
            && let Some((word, expected)) = rest.split_once('`')
        {
            let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let hint = canopy_model::text::did_you_mean(word, known);
            message.push_str(&hint);
        }
    }
    for (ty, range) in [
        ("u8", "from 0 to 255"),
        ("u16", "from 0 to 65535"),
        ("u32", "from 0 to 4294967295"),
        ("u64", "from 0 to 18446744073709551615"),
        ("usize", "from 0 to 18446744073709551615"),
        ("i32", "from -2147483648 to 2147483647"),
        ("i64", "from -9223372036854775808 to 9223372036854775807"),
    ] {
        message = message.replace(
            &format!("expected {ty}"),
            &format!("expected a whole number {range}"),
        );
    }
    message
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn every_shape_problem_is_listed_at_its_place_in_the_file() {
        let text = r#"
max_dispatch_depth = 3

[[hooks]]
event = "graph.run.failed"
action = { command = "true" }

[[hooks]]
name = "ok"
event = "graph.run.failed"
action = { command = "true" }

[[hooks]]
name = "typo"
evnt = "graph.run.failed"
action = { command = "true" }

[feed]
keep_days = -1

[[crons]]
name = "nightly"
schedule = "0 */6 * *"
action = { command = "true" }
"#;
        let problems = Config::parse(text).err().unwrap_or_default();
        let all = problems.join("\n");
        assert!(all.contains("hooks[0]: missing field `name`"), "{all}");
        assert!(
            all.contains("hooks[2].evnt: unknown field `evnt`, expected one of `name`, `event`")
                && all.contains("; did you mean `event`?"),
            "{all}"
        );
        assert!(
            all.contains("feed.keep_days: invalid value: integer `-1`, expected a whole number from 0 to 4294967295"),
            "{all}"
        );
        assert!(all.contains("max_dispatch_depth: unknown field"), "{all}");
        // A section of the right shape still has its meaning checked.
        assert!(all.contains("crons[0].schedule"), "{all}");
        // A section with a shape problem does not, yet (hooks[1] is fine; nothing of it is said).
        assert!(!all.contains("hooks[1]"), "{all}");
    }

    #[test]
    fn a_file_of_the_wrong_shape_says_so_once() {
        let problems = Config::parse("hooks = 3").err().unwrap_or_default();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("hooks: "), "{problems:?}");
    }
}
