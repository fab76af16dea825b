//! `docs/configuration.md` against the configuration model: every key of the shipped file
//! (`config/certeasy.yaml`, which `tests::shipped_file_equals_defaults` holds equal to
//! `Config::default()`) is documented with its default, and every documented key exists there
//! with that default. A key added to the model and the shipped file but not to the reference, a
//! changed default, or a documented key that was renamed fails here.

use std::collections::BTreeMap;

use serde_json::Value;

const SHIPPED: &str = include_str!("../../../../config/certeasy.yaml");
const REFERENCE: &str = include_str!("../../../../docs/configuration.md");

/// The first cells of the reference's key tables: dotted key path to the default as written.
/// Tables belong to the section of the last `##` heading: `## Top level` for top-level keys,
/// ``## `name` `` for a section; other `##` headings (prose) have no key tables.
fn documented() -> BTreeMap<String, String> {
    let mut section: Option<String> = None;
    let mut keys = BTreeMap::new();
    for line in REFERENCE.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = if heading == "Top level" {
                Some(String::new())
            } else {
                heading
                    .strip_prefix('`')
                    .and_then(|h| h.strip_suffix('`'))
                    .map(str::to_owned)
            };
            continue;
        }
        let Some(section) = &section else {
            continue;
        };
        // `| `key` | default | meaning |`: the key and the default hold no `|`.
        let cells: Vec<&str> = line.splitn(4, '|').map(str::trim).collect();
        if cells.len() < 4 || !cells[0].is_empty() || !cells[1].starts_with('`') {
            continue;
        }
        let key = cells[1].trim_matches('`');
        let path = if section.is_empty() {
            key.to_owned()
        } else {
            format!("{section}.{key}")
        };
        assert!(
            keys.insert(path.clone(), cells[2].to_owned()).is_none(),
            "{path} is documented twice"
        );
    }
    keys
}

/// Every leaf of the shipped file by dotted path (lists are leaves).
fn shipped() -> BTreeMap<String, Value> {
    fn walk(prefix: &str, value: Value, out: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let path = if prefix.is_empty() {
                        key
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            leaf => {
                out.insert(prefix.to_owned(), leaf);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", serde_saphyr::from_str(SHIPPED).unwrap(), &mut out);
    out
}

/// A value as compared: nothing, `""` and `[]` are all "empty" (the reference writes `empty`,
/// `""` or `[]` for them, the shipped file a bare key, `""` or `[]`).
fn normalized(value: Value) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::String(s) if s.is_empty() || s == "empty" => Value::Null,
        Value::Array(a) if a.is_empty() => Value::Null,
        other => other,
    }
}

/// The reference's default cell read as YAML, as the configuration file would be.
fn documented_value(cell: &str) -> Value {
    let text = cell.trim_matches('`');
    normalized(
        serde_saphyr::from_str(text)
            .unwrap_or_else(|e| panic!("documented default {cell:?} is not a YAML value: {e}")),
    )
}

/// Keys the reference documents in prose once for every limit of `rate-limiting`, not per row.
fn in_prose(path: &str) -> Option<(&'static str, Value)> {
    let rest = path.strip_prefix("rate-limiting.")?;
    if rest.ends_with(".enabled") {
        Some((
            "Every limit has `enabled` (default `true`)",
            Value::Bool(true),
        ))
    } else if rest.ends_with(".mode") {
        Some((
            "`mode` (`enforce`, the default",
            Value::String("enforce".to_owned()),
        ))
    } else {
        None
    }
}

#[test]
fn every_shipped_key_is_documented_with_its_default() {
    let documented = documented();
    let mut problems = Vec::new();
    for (path, value) in shipped() {
        let value = normalized(value);
        if let Some((sentence, expected)) = in_prose(&path) {
            if !REFERENCE.contains(sentence) {
                problems.push(format!(
                    "{path}: the reference lost the sentence {sentence:?}"
                ));
            }
            if value != expected {
                problems.push(format!(
                    "{path}: shipped {value}, the prose says {expected}"
                ));
            }
            continue;
        }
        match documented.get(&path) {
            None => problems.push(format!("{path}: not in docs/configuration.md")),
            Some(cell) if documented_value(cell) != value => problems.push(format!(
                "{path}: docs/configuration.md says {cell}, the default is {value}"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_documented_key_exists() {
    let shipped = shipped();
    let unknown: Vec<String> = documented()
        .into_keys()
        .filter(|path| !shipped.contains_key(path))
        .collect();
    assert!(
        unknown.is_empty(),
        "documented but not a key of the configuration: {unknown:?}"
    );
    // The parser found the tables at all: one row per key of every section.
    assert!(documented().len() >= 60, "{:?}", documented().keys());
}
