//! `docs/configuration.md` and `config/certeasy.yaml` are generated from the model: every key,
//! its type and its meaning from the doc comments and types the model's `JsonSchema` derive
//! records, its default from `Config::default()` serialized, in the order the model declares
//! them. The prose that is not about one key is `reference/template.md`, whose `{{...}}` lines
//! the generator replaces. So a default or a meaning is written once, in the model, and a key
//! cannot be added, renamed or left undocumented without the reference following.
//!
//! [`reference_files_are_generated_from_the_model`] fails when a checked-in file differs from
//! what the model generates; [`COMMAND`] rewrites them.

use std::fmt::Write as _;
use std::path::PathBuf;

use schemars::schema_for;
use serde::Serialize;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::from_str;
use super::model::{Config, ProfileConfig};
use super::test_mode::test_rate_limits;

/// The one command that regenerates both files.
const COMMAND: &str = "UPDATE_EXPECT=1 cargo test -p certeasy --lib config::reference";

const TEMPLATE: &str = include_str!("reference/template.md");

/// Where a profile's table is placed: its keys, with what a profile gets for a key it leaves out.
const PROFILE_TABLE: &str = "issuance.profiles.<name>";

/// Comment lines of the YAML file are wrapped at this width.
const WIDTH: usize = 100;

/// A serialized value with its mappings in the order they were written (the model's field
/// order), which `serde_json::Value` would sort.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    Number(String),
    Text(String),
    List(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Number(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Number(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Number(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Text(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Node::Map(entries))
            }
        }

        d.deserialize_any(NodeVisitor)
    }
}

/// `value` as written to a file, in field order (`serde_json` writes a struct's fields in order;
/// only its `Value` sorts them).
fn defaults<T: Serialize>(value: &T) -> Node {
    serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
}

fn entries(node: &Node) -> &[(String, Node)] {
    match node {
        Node::Map(entries) => entries,
        other => panic!("expected a mapping, found {other:?}"),
    }
}

/// The model's JSON schema, and the problems found while walking it beside the defaults.
struct Model {
    root: Value,
    problems: Vec<String>,
}

impl Model {
    fn new() -> Self {
        Self {
            root: schema_for!(Config).to_value(),
            problems: Vec::new(),
        }
    }

    /// A schema with its `$ref` followed.
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.strip_prefix("#/$defs/").unwrap();
                self.resolve(&self.root["$defs"][name])
            }
            None => schema,
        }
    }

    /// The schema of the value an `Option` holds; any other schema resolved.
    fn present<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let schema = self.resolve(schema);
        let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) else {
            return schema;
        };
        let values: Vec<&Value> = alternatives
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        match values.as_slice() {
            [only] => self.present(only),
            _ => schema,
        }
    }

    fn description<'a>(&'a self, schema: &'a Value) -> &'a str {
        schema
            .get("description")
            .or_else(|| self.present(schema).get("description"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// What the reference's Type column says.
    fn type_name(&self, schema: &Value) -> String {
        let schema = self.present(schema);
        if let Some(names) = schema.get("enum").and_then(Value::as_array) {
            return one_of(names.iter());
        }
        if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
            return one_of(variants.iter().filter_map(|v| v.get("const")));
        }
        let kind = match schema.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|k| *k != "null")
                .unwrap_or("null"),
            _ => "",
        };
        match kind {
            "string" => schema
                .get("format")
                .and_then(Value::as_str)
                .unwrap_or("string")
                .to_owned(),
            "array" => format!("list of {}s", self.type_name(&schema["items"])),
            "object" if schema.get("properties").is_none() => "map".to_owned(),
            other => other.to_owned(),
        }
    }

    /// The fields of a struct's schema.
    fn properties<'a>(&'a self, schema: &'a Value) -> Option<&'a serde_json::Map<String, Value>> {
        self.present(schema)
            .get("properties")
            .and_then(Value::as_object)
    }

    /// The schema of each entry of a map's schema.
    fn map_entries<'a>(&'a self, schema: &'a Value) -> Option<&'a Value> {
        self.present(schema)
            .get("additionalProperties")
            .filter(|entry| entry.is_object())
    }

    /// The schema of key `key` of a struct.
    fn field<'a>(&'a self, schema: &'a Value, key: &str) -> Option<&'a Value> {
        self.properties(schema)?.get(key)
    }

    /// Every key of the schema is one the defaults write, and the other way round.
    fn check_keys(&mut self, schema: &Value, node: &Node, path: &str) {
        let Some(properties) = self.properties(schema) else {
            return;
        };
        let written: Vec<&str> = entries(node).iter().map(|(k, _)| k.as_str()).collect();
        let mut problems = Vec::new();
        for key in properties.keys() {
            if !written.contains(&key.as_str()) {
                problems.push(format!("{}: documented but not a key", join(path, key)));
            }
        }
        for key in &written {
            if !properties.contains_key(*key) {
                problems.push(format!("{}: a key with no schema", join(path, key)));
            }
        }
        self.problems.extend(problems);
    }

    /// The rows of a table: the keys under `schema`, with nested sections flattened to dotted
    /// keys, or left out (the top level, whose sections have tables of their own).
    fn rows(
        &mut self,
        schema: &Value,
        node: &Node,
        path: &str,
        prefix: &str,
        out: &mut Vec<Row>,
        flatten: bool,
    ) {
        self.check_keys(schema, node, path);
        for (key, value) in entries(node) {
            let Some(field) = self.field(schema, key).cloned() else {
                continue;
            };
            let full = join(path, key);
            // An optional section (absent by default, like `ca.existing.pkcs11`) is one row.
            if self.properties(&field).is_some() && !matches!(value, Node::Null) {
                if flatten {
                    self.rows(&field, value, &full, &join(prefix, key), out, true);
                }
                continue;
            }
            let meaning = markdown_text(self.description(&field));
            if meaning.is_empty() {
                self.problems
                    .push(format!("{full}: no doc comment in the model"));
            }
            let default = match value {
                Node::Null if self.properties(&field).is_some() => "absent".to_owned(),
                Node::Map(entries) if self.map_entries(&field).is_some() => entries
                    .iter()
                    .map(|(name, _)| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => format!("`{}`", inline(other)),
            };
            out.push(Row {
                key: join(prefix, key),
                type_name: self.type_name(&field),
                default,
                meaning,
            });
            // What an operator writes inside a section absent by default (`ca.existing.pkcs11`)
            // or in each entry of a list of sections (`ca.issuers`): the defaults cannot show
            // it, so its keys come from the schema alone.
            if flatten {
                let present = self.present(&field).clone();
                if matches!(value, Node::Null) && self.properties(&present).is_some() {
                    self.schema_rows(&present, &full, &join(prefix, key), out);
                } else if let Some(items) = present.get("items").map(|i| self.present(i).clone())
                    && self.properties(&items).is_some()
                {
                    self.schema_rows(&items, &full, &format!("{}[]", join(prefix, key)), out);
                }
            }
        }
    }

    /// Rows for every key of a section's schema, with no value to show: the default column
    /// says "required" for a key that must be written and "absent" for one that may be left
    /// out (its meaning says what leaving it out does).
    fn schema_rows(&mut self, schema: &Value, path: &str, prefix: &str, out: &mut Vec<Row>) {
        let Some(properties) = self.properties(schema).cloned() else {
            return;
        };
        let required: Vec<String> = self
            .present(schema)
            .get("required")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        for (key, field) in &properties {
            let full = join(path, key);
            let meaning = markdown_text(self.description(field));
            if meaning.is_empty() {
                self.problems
                    .push(format!("{full}: no doc comment in the model"));
            }
            let default = match field.get("default") {
                Some(value) if !value.is_null() => format!("`{value}`"),
                _ if required.contains(key) => "required".to_owned(),
                _ => "absent".to_owned(),
            };
            out.push(Row {
                key: join(prefix, key),
                type_name: self.type_name(field),
                default,
                meaning,
            });
            let present = self.present(field).clone();
            if self.properties(&present).is_some() {
                self.schema_rows(&present, &full, &join(prefix, key), out);
            }
        }
    }
}

fn one_of<'a>(names: impl Iterator<Item = &'a Value>) -> String {
    let names: Vec<String> = names
        .filter_map(Value::as_str)
        .map(|n| format!("`{n}`"))
        .collect();
    format!("one of {}", names.join(", "))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

struct Row {
    key: String,
    type_name: String,
    default: String,
    meaning: String,
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from("| Key | Type | Default | Meaning |\n|---|---|---|---|\n");
    for row in rows {
        writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            row.key,
            row.type_name,
            row.default.replace('|', "\\|"),
            row.meaning
        )
        .unwrap();
    }
    out.pop();
    out
}

/// A doc comment as one table cell: its lines and paragraphs joined, `|` escaped.
fn markdown_text(doc: &str) -> String {
    doc.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The first sentence of a doc comment, without Markdown links and without the section name
/// that struct comments start with (`` `server:` ``), for a YAML comment.
fn summary(doc: &str) -> String {
    let paragraph = doc.split("\n\n").next().unwrap_or("");
    let text = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = capitalized(&strip_links(strip_section_name(&text)));
    let mut end = text.len();
    let mut from = 0;
    while let Some(at) = text[from..].find(". ") {
        let stop = from + at;
        let before = &text[..stop];
        if !(before.ends_with("e.g") || before.ends_with("i.e") || before.ends_with("etc")) {
            end = stop + 1;
            break;
        }
        from = stop + 2;
    }
    text[..end].to_owned()
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn strip_section_name(text: &str) -> &str {
    match text.strip_prefix('`').and_then(|t| t.split_once("` ")) {
        Some((name, rest)) if name.ends_with(':') => rest,
        _ => text,
    }
}

/// `[text](target)` → `text`.
fn strip_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A scalar or a list of scalars as YAML writes it on one line.
fn inline(node: &Node) -> String {
    match node {
        Node::Null => "\"\"".to_owned(),
        Node::Bool(b) => b.to_string(),
        Node::Number(n) => n.clone(),
        Node::Text(s) => scalar(s),
        Node::List(items) => format!(
            "[{}]",
            items.iter().map(inline).collect::<Vec<_>>().join(", ")
        ),
        Node::Map(entries) if entries.is_empty() => "{}".to_owned(),
        Node::Map(_) => panic!("a mapping has no one-line form"),
    }
}

/// A string, quoted when YAML would read it as something else (or could, in a flow list).
fn scalar(s: &str) -> String {
    let special = s.is_empty()
        || s.trim() != s
        || s.contains([':', '#', ',', '[', ']', '{', '}', '"', '\''])
        || s.starts_with(['&', '*', '!', '|', '>', '%', '@', '`', '-', '?'])
        || matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "~" | "yes" | "no" | "on" | "off"
        )
        || s.parse::<f64>().is_ok();
    if special {
        serde_json::to_string(s).unwrap()
    } else {
        s.to_owned()
    }
}

/// `# ` lines of `text`, wrapped, at `indent`.
fn comment(out: &mut String, indent: usize, text: &str) {
    let prefix = format!("{}# ", " ".repeat(indent));
    let mut line = prefix.clone();
    for word in text.split_whitespace() {
        if line.len() > prefix.len() && line.len() + 1 + word.len() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = prefix.clone();
        }
        if line.len() > prefix.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if line.len() > prefix.len() {
        out.push_str(&line);
        out.push('\n');
    }
}

impl Model {
    /// The YAML of `node`, each key after a comment of its first sentence when `comments`.
    fn yaml(&self, schema: Option<&Value>, node: &Node, indent: usize, comments: bool) -> String {
        let mut out = String::new();
        let pad = " ".repeat(indent);
        for (key, value) in entries(node) {
            let field = schema
                .and_then(|s| self.properties(s))
                .and_then(|p| p.get(key));
            if indent == 0 && !out.is_empty() {
                out.push('\n');
            }
            if comments && let Some(field) = field {
                let text = summary(self.description(field));
                if !text.is_empty() {
                    comment(&mut out, indent, &text);
                }
            }
            match value {
                Node::Map(inner) if !inner.is_empty() => {
                    writeln!(out, "{pad}{key}:").unwrap();
                    if let Some(entry) = field.and_then(|f| self.map_entries(f)) {
                        for (i, (name, item)) in inner.iter().enumerate() {
                            writeln!(out, "{pad}  {name}:").unwrap();
                            let text = self.yaml(Some(entry), item, indent + 4, comments && i == 0);
                            out.push_str(&text);
                        }
                    } else {
                        out.push_str(&self.yaml(field, value, indent + 2, comments));
                    }
                }
                // An optional section, absent by default: shown, commented out, so that the
                // file still loads to the defaults.
                Node::Null if field.is_some_and(|f| self.properties(f).is_some()) => {
                    writeln!(out, "{pad}# {key}: (a section, absent unless given)").unwrap();
                }
                other => writeln!(out, "{pad}{key}: {}", inline(other)).unwrap(),
            }
        }
        out
    }
}

/// `docs/configuration.md`: the template with its tables and YAML blocks filled in.
fn markdown() -> String {
    let mut model = Model::new();
    let root = model.root.clone();
    let config = defaults(&Config::default());
    let sections: Vec<String> = entries(&config)
        .iter()
        .filter(|(key, _)| {
            model
                .field(&root, key)
                .is_some_and(|f| model.properties(f).is_some())
        })
        .map(|(key, _)| key.clone())
        .collect();
    let mut placed = Vec::new();
    let mut out = String::new();
    for line in TEMPLATE.lines() {
        let Some(marker) = line.strip_prefix("{{").and_then(|l| l.strip_suffix("}}")) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        placed.push(marker.to_owned());
        let mut rows = Vec::new();
        match marker.split_once(' ') {
            _ if marker == "table" => {
                model.rows(&root, &config, "", "", &mut rows, false);
                out.push_str(&table(&rows));
            }
            Some(("table", PROFILE_TABLE)) => {
                let issuance = model.field(&root, "issuance").unwrap().clone();
                let profiles = model.field(&issuance, "profiles").unwrap();
                let entry = model.map_entries(profiles).unwrap().clone();
                let profile = defaults(&ProfileConfig::default());
                model.rows(&entry, &profile, PROFILE_TABLE, "", &mut rows, true);
                out.push_str(&table(&rows));
            }
            Some(("table", section)) => {
                let Some(field) = model.field(&root, section).cloned() else {
                    model
                        .problems
                        .push(format!("{{{{{marker}}}}}: no such section"));
                    continue;
                };
                let node = &entries(&config)
                    .iter()
                    .find(|(k, _)| k == section)
                    .unwrap()
                    .1;
                model.rows(&field, node, section, "", &mut rows, true);
                out.push_str(&table(&rows));
            }
            _ if marker == "shipped-profiles" => {
                let issuance = &entries(&config)
                    .iter()
                    .find(|(k, _)| k == "issuance")
                    .unwrap()
                    .1;
                let shipped: Vec<(String, Node)> = entries(issuance)
                    .iter()
                    .filter(|(k, _)| k == "default-profile" || k == "profiles")
                    .cloned()
                    .collect();
                let block = Node::Map(vec![("issuance".to_owned(), Node::Map(shipped))]);
                let text = model.yaml(None, &block, 0, false);
                write!(out, "```yaml\n{text}```").unwrap();
            }
            _ if marker == "test-rate-limits" => {
                let block = Node::Map(vec![(
                    "rate-limiting".to_owned(),
                    defaults(&test_rate_limits()),
                )]);
                let text = model.yaml(None, &block, 0, false);
                write!(out, "```yaml\n{text}```").unwrap();
            }
            _ => {
                model
                    .problems
                    .push(format!("{{{{{marker}}}}}: unknown marker"));
                continue;
            }
        }
        out.push('\n');
    }
    for section in &sections {
        let marker = format!("table {section}");
        if !placed.contains(&marker) {
            model.problems.push(format!(
                "section {section} has no {{{{{marker}}}}} line in config/reference/template.md"
            ));
        }
    }
    assert!(model.problems.is_empty(), "{}", model.problems.join("\n"));
    out
}

/// `config/certeasy.yaml`: every key with its default, after its meaning's first sentence.
fn yaml() -> String {
    let model = Model::new();
    let config = defaults(&Config::default());
    let mut out = format!(
        "# Certeasy configuration: every key with its default value.\n\
         # Every key is optional; a missing key or section takes the value shown here.\n\
         # Reference: docs/configuration.md. Both are generated from the configuration model\n\
         # (crates/certeasy/src/config/): edit the model, then run\n\
         # {COMMAND}\n\n"
    );
    out.push_str(&model.yaml(Some(&model.root), &config, 0, true));
    out
}

/// The checked-in files, relative to the workspace, and what the model generates for them.
fn generated() -> [(&'static str, String); 2] {
    [
        ("docs/configuration.md", markdown()),
        ("config/certeasy.yaml", yaml()),
    ]
}

#[test]
fn reference_files_are_generated_from_the_model() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut stale = Vec::new();
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (name, text) in generated() {
        let path = workspace.join(name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == text {
            continue;
        }
        if update {
            std::fs::write(&path, &text).unwrap();
        } else {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from what the configuration model generates: run `{COMMAND}` and commit them",
        stale.join(" and ")
    );
}

/// `certeasy serve --config config/certeasy.yaml` is `certeasy serve` (also held for the
/// checked-in file by `tests::shipped_file_equals_defaults`).
#[test]
fn generated_yaml_loads_to_the_defaults() {
    let text = yaml();
    assert_eq!(from_str(&text, "certeasy.yaml").unwrap(), Config::default());
    let config = from_str(&text, "certeasy.yaml").unwrap();
    let profiles = config.issuance.profiles().unwrap();
    let names: Vec<&str> = profiles.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["short-lived", "tls-server", "tls-server-client"]);
}

/// The profile table's defaults, written into a profile, are what a profile gets for the keys it
/// leaves out, and the test limits' block is what `--rate-limits` applies.
#[test]
fn generated_blocks_read_back_to_their_values() {
    let model = Model::new();
    let profile = model.yaml(None, &defaults(&ProfileConfig::default()), 6, false);
    let text = format!("issuance:\n  default-profile: p\n  profiles:\n    p:\n{profile}");
    let parsed: Config = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(parsed.issuance.profiles["p"], ProfileConfig::default());

    let limits = Node::Map(vec![(
        "rate-limiting".to_owned(),
        defaults(&test_rate_limits()),
    )]);
    let parsed: Config = serde_saphyr::from_str(&model.yaml(None, &limits, 0, false)).unwrap();
    assert_eq!(parsed.rate_limiting, test_rate_limits());
}

#[test]
fn summaries_and_scalars() {
    assert_eq!(
        summary("`server:` the listeners. More\nabout them."),
        "The listeners."
    );
    assert_eq!(
        summary("Resolvers, e.g. [a list](#x) of them. Then"),
        "Resolvers, e.g. a list of them."
    );
    assert_eq!(scalar("0.0.0.0:14000"), "\"0.0.0.0:14000\"");
    assert_eq!(scalar("Certeasy Root CA"), "Certeasy Root CA");
    assert_eq!(scalar("true"), "\"true\"");
    assert_eq!(scalar("10"), "\"10\"");
    assert_eq!(scalar(""), "\"\"");
}
