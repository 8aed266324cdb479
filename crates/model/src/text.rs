//! Small text helpers shared by the records the daemon keeps.

/// The last `limit` bytes of `text` (cut on a char boundary), marked with `…` when cut.
pub fn tail(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// The first `limit` bytes of `text` (cut on a char boundary), marked with `…` when cut.
pub fn head(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `text` trimmed, when it is one line of `min` to `max` characters without control
/// characters. A name or label the daemon shows in tables and hands to processes must hold
/// neither a line break, nor a NUL (no process's environment can carry one: every node run of
/// such a spec failed to start), nor a terminal escape.
pub fn one_line(text: &str, min: usize, max: usize) -> Option<&str> {
    let text = text.trim();
    let fits = (min..=max).contains(&text.chars().count());
    (fits && !text.chars().any(char::is_control)).then_some(text)
}

/// The edit distance between `a` and `b`: insertions, deletions, substitutions and swaps of two
/// neighbouring characters (optimal string alignment), the typos people make.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `word`, if one is close enough to be what was meant (a third of its
/// length, at least 1 and at most 3 edits away).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `x`?` when a candidate is close to `word`, else nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates)
        .map(|found| format!("; did you mean `{found}`?"))
        .unwrap_or_default()
}

/// Whether `text` is an RFC 3339 time before 1970-01-01T00:00:00Z: a time, but one outside the
/// range the store's times hold (said as such, not as "not a time").
pub fn rfc3339_before_epoch(text: &str) -> bool {
    text.trim()
        .parse::<jiff::Timestamp>()
        .is_ok_and(|t| t < jiff::Timestamp::UNIX_EPOCH)
}

/// True for a portable environment variable name: letters, digits and `_`, not starting with a
/// digit.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_line_takes_trimmed_text_of_its_length_and_no_control_characters() {
        assert_eq!(super::one_line("  Login form ", 1, 200), Some("Login form"));
        assert_eq!(super::one_line("", 1, 200), None);
        assert_eq!(super::one_line("   ", 1, 200), None);
        assert_eq!(super::one_line("", 0, 10), Some(""));
        assert_eq!(super::one_line("two\nlines", 1, 200), None);
        assert_eq!(super::one_line("a\u{0}b", 1, 200), None);
        assert_eq!(super::one_line("a\u{1b}[31mred", 1, 200), None);
        assert_eq!(super::one_line("tab\there", 1, 200), None);
        assert_eq!(super::one_line("ééé", 1, 3), Some("ééé"));
        assert_eq!(super::one_line("éééé", 1, 3), None);
    }

    use super::{closest, did_you_mean, edit_distance, tail};

    #[test]
    fn tails_keep_the_end_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(tail("aé", 1), "…");
    }

    #[test]
    fn the_closest_known_word_is_suggested() {
        assert_eq!(edit_distance("comand", "command"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("nodse", "nodes"), 1);
        assert_eq!(
            closest("comand", ["prompt", "command", "mode"]),
            Some("command")
        );
        assert_eq!(closest("nodse", ["name", "nodes", "specs"]), Some("nodes"));
        assert_eq!(closest("xyz", ["command", "prompt"]), None);
        assert_eq!(
            did_you_mean("doc_paths", ["docs_paths", "changelog"]),
            "; did you mean `docs_paths`?"
        );
        assert_eq!(did_you_mean("zzz", ["docs_paths"]), "");
    }
}
