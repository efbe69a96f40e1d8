//! Field paths as the decoders report them (`spec.list[3].name`), kept as a stack of segments
//! while a value is walked and rendered only when something is reported, and the bounded list
//! those reports go into: a hostile body with a million duplicate or unknown fields must not
//! make a million long strings.

/// One step of a path: an object key or a list index.
#[derive(Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

/// The path from the document's root to the value being walked.
#[derive(Debug, Default)]
pub(crate) struct FieldPath {
    segments: Vec<Segment>,
}

impl FieldPath {
    pub fn push_key(&mut self, key: String) {
        self.segments.push(Segment::Key(key));
    }

    pub fn push_index(&mut self, index: usize) {
        self.segments.push(Segment::Index(index));
    }

    pub fn pop(&mut self) {
        self.segments.pop();
    }

    /// Pops a key pushed with [`FieldPath::push_key`] and hands it back.
    pub fn pop_key(&mut self) -> String {
        match self.segments.pop() {
            Some(Segment::Key(key)) => key,
            _ => String::new(),
        }
    }

    /// The last segment, when it is a key.
    pub fn last_key(&self) -> Option<&str> {
        match self.segments.last() {
            Some(Segment::Key(key)) => Some(key),
            _ => None,
        }
    }

    /// The path as upstream prints it: keys joined by `.`, indexes as `[i]`.
    pub fn render(&self) -> String {
        let mut text = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Key(key) => {
                    if !text.is_empty() {
                        text.push('.');
                    }
                    text.push_str(key);
                }
                Segment::Index(index) => {
                    text.push('[');
                    text.push_str(&index.to_string());
                    text.push(']');
                }
            }
        }
        text
    }
}

/// Reported paths, at most [`Recorded::MAX_ITEMS`] of them and [`Recorded::MAX_BYTES`] in all;
/// the rest are counted but not kept.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    items: Vec<String>,
    bytes: usize,
}

impl Recorded {
    /// The most paths kept.
    pub const MAX_ITEMS: usize = 100;
    /// The most bytes of paths kept.
    pub const MAX_BYTES: usize = 64 * 1024;

    /// Records the path `render` makes, unless the list is full (then `render` is not run).
    pub fn record_with(&mut self, render: impl FnOnce() -> String) {
        if self.is_full() {
            return;
        }
        let mut path = render();
        if path.len() > Self::MAX_BYTES - self.bytes {
            let mut end = Self::MAX_BYTES - self.bytes;
            while !path.is_char_boundary(end) {
                end -= 1;
            }
            path.truncate(end);
        }
        self.bytes += path.len();
        self.items.push(path);
    }

    pub fn is_full(&self) -> bool {
        self.items.len() >= Self::MAX_ITEMS || self.bytes >= Self::MAX_BYTES
    }

    pub fn into_items(self) -> Vec<String> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_keys_with_dots_and_indexes_in_brackets() {
        let mut path = FieldPath::default();
        path.push_key("spec".into());
        path.push_key("containers".into());
        path.push_index(2);
        path.push_key("name".into());
        assert_eq!(path.render(), "spec.containers[2].name");
        assert_eq!(path.pop_key(), "name");
        path.pop();
        assert_eq!(path.render(), "spec.containers");
    }

    #[test]
    fn recorded_paths_stop_at_the_byte_cap_on_a_char_boundary() {
        let mut recorded = Recorded::default();
        recorded.record_with(|| "é".repeat(Recorded::MAX_BYTES));
        assert!(recorded.is_full());
        recorded.record_with(|| unreachable!("not rendered once full"));
        let items = recorded.into_items();
        assert_eq!(items.len(), 1);
        assert!(items[0].len() <= Recorded::MAX_BYTES);
    }
}
