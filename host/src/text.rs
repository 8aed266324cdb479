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

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tails_keep_the_end_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(tail("aé", 1), "…");
    }
}
