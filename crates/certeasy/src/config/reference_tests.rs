//! `docs/configuration.md` against the configuration model: every key of the shipped file
//! (`config/certeasy.yaml`, which `tests::shipped_file_equals_defaults` holds equal to
//! `Config::default()`) is documented with its default, and every documented key exists there
//! with that default. A key added to the model and the shipped file but not to the reference, a
//! changed default, or a documented key that was renamed fails here.
//!
//! `issuance.profiles` is a map whose entries differ, so it is held to the reference in two
//! parts: the keys of every shipped profile are those of the ``## `issuance.profiles.<name>` ``
//! table, whose defaults are what a profile gets for a key it leaves out; and the shipped map
//! itself equals the reference's YAML block of the shipped profiles.

use std::collections::BTreeMap;

use serde_json::Value;

use super::from_str;
use super::model::ProfileConfig;

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

/// The map of certificate profiles: its entries are documented once, under this placeholder.
const PROFILES: &str = "issuance.profiles.";
const PROFILE_PLACEHOLDER: &str = "<name>";

/// `issuance.profiles.tls-server.validity` → `issuance.profiles.<name>.validity`.
fn generic_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix(PROFILES)?;
    let (_, key) = rest.split_once('.')?;
    Some(format!("{PROFILES}{PROFILE_PLACEHOLDER}.{key}"))
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
        if let Some(generic) = generic_path(&path) {
            // The value differs per profile: `shipped_profiles_are_the_documented_ones` holds it.
            if !documented.contains_key(&generic) {
                problems.push(format!("{path}: {generic} not in docs/configuration.md"));
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
    let generic: Vec<String> = shipped.keys().filter_map(|p| generic_path(p)).collect();
    let unknown: Vec<String> = documented()
        .into_keys()
        .filter(|path| !shipped.contains_key(path) && !generic.contains(path))
        .collect();
    assert!(
        unknown.is_empty(),
        "documented but not a key of the configuration: {unknown:?}"
    );
    // The parser found the tables at all: one row per key of every section.
    assert!(documented().len() >= 60, "{:?}", documented().keys());
}

/// The documented per-profile defaults, written into a profile, give exactly what a profile
/// gets for the keys it leaves out.
#[test]
fn documented_profile_defaults_are_the_model_defaults() {
    let prefix = format!("{PROFILES}{PROFILE_PLACEHOLDER}.");
    let mut text = String::from("issuance:\n  default-profile: p\n  profiles:\n    p:\n");
    let mut keys = 0;
    for (path, cell) in documented() {
        if let Some(key) = path.strip_prefix(&prefix) {
            text.push_str(&format!("      {key}: {}\n", cell.trim_matches('`')));
            keys += 1;
        }
    }
    assert_eq!(keys, 7, "{text}");
    // The documented description is empty, which the semantic checks refuse: parse only.
    let parsed: super::Config = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        parsed.issuance.profiles["p"],
        ProfileConfig::default(),
        "{text}"
    );
    assert!(from_str(&text, "doc").is_err());
}

/// The reference's YAML block of the shipped profiles equals the shipped file's.
#[test]
fn shipped_profiles_are_the_documented_ones() {
    let start = REFERENCE
        .find("```yaml\nissuance:\n  default-profile:")
        .expect("docs/configuration.md lost the block of shipped profiles");
    let block = &REFERENCE[start + "```yaml\n".len()..];
    let block = &block[..block.find("```").unwrap()];
    let documented: Value = serde_saphyr::from_str(block).unwrap();
    let shipped: Value = serde_saphyr::from_str(SHIPPED).unwrap();
    for key in ["default-profile", "profiles"] {
        assert_eq!(
            documented["issuance"][key], shipped["issuance"][key],
            "issuance.{key}"
        );
    }
    // And the shipped file parses into the three profiles the directory will list.
    let config = from_str(SHIPPED, "config/certeasy.yaml").unwrap();
    let profiles = config.issuance.profiles().unwrap();
    let names: Vec<&str> = profiles.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["short-lived", "tls-server", "tls-server-client"]);
}
