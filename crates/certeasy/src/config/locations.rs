//! Where each key of the YAML file is, by key path (`server.listen`, `redis.shards[1]`).
//!
//! serde-saphyr reports a line and column for deserialization errors but not the key path, and
//! the semantic checks that run after deserialization know the key path but not the line. This
//! map joins the two. It is built by a second, schema-free pass over the text that wraps every
//! node in [`Spanned`], so it sees the same positions the typed pass does.

use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::{DuplicateKeyPolicy, Location, Options, Spanned};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    pub(crate) line: u64,
    pub(crate) column: u64,
}

impl Position {
    /// `None` for serde-saphyr's "unknown" location (line 0).
    pub(crate) fn from_location(location: Location) -> Option<Self> {
        (location.line() != 0).then(|| Self {
            line: location.line(),
            column: location.column(),
        })
    }
}

/// One node of the file: a mapping entry or a sequence element.
#[derive(Debug)]
struct Entry {
    path: String,
    /// Where the key is written; `None` for sequence elements.
    key: Option<Position>,
    /// Where the value starts (a nested mapping starts at its first key).
    value: Option<Position>,
}

/// Key paths and their positions, in document order.
#[derive(Debug, Default)]
pub(crate) struct LocationMap {
    entries: Vec<Entry>,
}

impl LocationMap {
    /// Maps the text; text that is not even well-formed YAML gives an empty map, since the typed
    /// pass reports that error itself with its own position.
    pub(crate) fn parse(text: &str) -> Self {
        let mut options = Options::default();
        // Duplicates are the typed pass's error to report; here every key, repeated or not, needs
        // its position so that the duplicate can be attributed to its mapping.
        options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
        options.with_snippet = false;
        let mut map = Self::default();
        if let Ok(root) = serde_saphyr::from_str_with_options::<Spanned<Node>>(text, options) {
            map.collect("", &root);
        }
        map
    }

    fn collect(&mut self, prefix: &str, node: &Spanned<Node>) {
        match &node.value {
            Node::Mapping(entries) => {
                for (key, value) in entries {
                    let path = if prefix.is_empty() {
                        key.value.clone()
                    } else {
                        format!("{prefix}.{}", key.value)
                    };
                    self.entries.push(Entry {
                        path: path.clone(),
                        key: Position::from_location(key.referenced),
                        value: Position::from_location(value.referenced),
                    });
                    self.collect(&path, value);
                }
            }
            Node::Sequence(items) => {
                for (index, item) in items.iter().enumerate() {
                    let path = format!("{prefix}[{index}]");
                    self.entries.push(Entry {
                        path: path.clone(),
                        key: None,
                        value: Position::from_location(item.referenced),
                    });
                    self.collect(&path, item);
                }
            }
            Node::Scalar => {}
        }
    }

    /// Where `path` is written: its key, or for a sequence element its value.
    pub(crate) fn position_of(&self, path: &str) -> Option<Position> {
        self.entries
            .iter()
            .find(|entry| entry.path == path)
            .and_then(|entry| entry.key.or(entry.value))
    }

    /// The key path an error at `at` concerns.
    ///
    /// An error positioned exactly on a key (unknown field, duplicate key, missing field of the
    /// mapping that starts there) concerns the mapping holding that key. Otherwise the error is
    /// about the value that starts last at or before `at`; when several start at the same spot
    /// (a sequence and its first element), the outermost one is meant.
    pub(crate) fn path_at(&self, at: Position) -> Option<String> {
        if let Some(entry) = self.entries.iter().find(|entry| entry.key == Some(at)) {
            return Some(parent_path(&entry.path).to_owned());
        }
        let best = self
            .entries
            .iter()
            .filter_map(|entry| {
                entry
                    .value
                    .filter(|start| *start <= at)
                    .map(|start| (start, entry))
            })
            .max_by(|(a, a_entry), (b, b_entry)| {
                // Equal starts: prefer the shorter (outer) path.
                a.cmp(b)
                    .then_with(|| b_entry.path.len().cmp(&a_entry.path.len()))
            });
        best.map(|(_, entry)| entry.path.clone())
    }
}

/// `a.b[2].c` → `a.b[2]`; `a.b[2]` → `a.b`; `a` → ``.
fn parent_path(path: &str) -> &str {
    match path.rfind(['.', '[']) {
        Some(cut) => &path[..cut],
        None => "",
    }
}

/// A YAML node with the shape kept and scalar values dropped.
#[derive(Debug)]
enum Node {
    Mapping(Vec<(Spanned<String>, Spanned<Node>)>),
    Sequence(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = access.next_entry()? {
            entries.push(entry);
        }
        Ok(Node::Mapping(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = access.next_element()? {
            items.push(item);
        }
        Ok(Node::Sequence(items))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_bytes<E>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
}
