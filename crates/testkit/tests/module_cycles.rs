//! No two modules of a crate in this workspace import each other, directly or around a loop
//! (docs/ARCHITECTURE.md, "Invariants"). A type both sides need goes into a leaf module.
//!
//! The graph is read from the source text: a file's module imports another when a line of code
//! (not a comment) names `crate::<path>` or `super::<name>` and that path leads into the other
//! module's file. A module naming its own ancestors is not counted (a child may use what its
//! parent declares), nor is a parent naming its children (`mod` declarations and their paths).

// The helpers outside `#[test]` functions read the tree this test checks; a failure to read it
// is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;

/// Module path (`sql::lite`, `crate` for the root) to its file.
type Modules = BTreeMap<String, PathBuf>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn modules(src: &Path) -> Modules {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let name = if parts.is_empty() {
                "crate".to_owned()
            } else {
                parts.join("::")
            };
            (name, file)
        })
        .collect()
}

/// The identifier path that starts at `text` (`a::b::c` of `a::b::c::{...}`).
fn path_at(text: &str) -> Vec<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    text[..end].split("::").filter(|s| !s.is_empty()).collect()
}

/// The module a path (relative to the crate root) leads into: its longest prefix with a file.
fn resolve(modules: &Modules, path: &[&str]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].join("::"))
        .find(|candidate| modules.contains_key(candidate))
}

fn is_self_or_ancestor(module: &str, other: &str) -> bool {
    module == other || module.starts_with(&format!("{other}::"))
}

fn imports(modules: &Modules) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, file) in modules {
        let text = std::fs::read_to_string(file).unwrap();
        let own: Vec<&str> = if name == "crate" {
            Vec::new()
        } else {
            name.split("::").collect()
        };
        let mut deps = BTreeSet::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with("//") {
                continue;
            }
            let mut targets = Vec::new();
            for (at, _) in line.match_indices("crate::") {
                targets.push(path_at(&line[at + "crate::".len()..]));
            }
            for (at, _) in line.match_indices("super::") {
                if line[..at].ends_with("super::") {
                    continue;
                }
                // Each `super::` of `super::super::x` goes up one module.
                let mut base = own.clone();
                let mut rest = &line[at..];
                while let Some(after) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = after;
                }
                base.extend(path_at(rest));
                targets.push(base);
            }
            for path in targets {
                if let Some(target) = resolve(modules, &path)
                    && !is_self_or_ancestor(name, &target)
                    && !target.starts_with(&format!("{name}::"))
                {
                    deps.insert(target);
                }
            }
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

/// The modules that lie on a loop, each with the modules of that loop it imports.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    // A module is on a loop when it can reach itself; small graphs, so a search per module.
    let mut found = Vec::new();
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = graph[start].iter().collect();
        while let Some(module) = stack.pop() {
            if module == start {
                let on_loop: Vec<&String> = graph[start]
                    .iter()
                    .filter(|next| reaches(graph, next, start))
                    .collect();
                found.push(format!("{start} -> {on_loop:?}"));
                break;
            }
            if seen.insert(module) {
                stack.extend(graph.get(module).into_iter().flatten());
            }
        }
    }
    found
}

fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &String, to: &String) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(module) = stack.pop() {
        if module == to {
            return true;
        }
        if seen.insert(module) {
            stack.extend(graph.get(module).into_iter().flatten());
        }
    }
    false
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        let modules = modules(&src);
        for cycle in cycles(&imports(&modules)) {
            problems.push(format!("{}: {cycle}", src.display()));
        }
    }
    assert!(
        checked >= 10,
        "expected the workspace's crates under {}",
        crates.display()
    );
    assert!(
        problems.is_empty(),
        "import cycles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_sees_a_cycle_between_siblings() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\nmod d;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::Thing;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct Thing;\nfn f() { crate::a::g() }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "// crate::a::g in a comment only\nuse super::a;\n",
    )
    .unwrap();
    std::fs::create_dir(src.join("d")).unwrap();
    std::fs::write(src.join("d/mod.rs"), "mod e;\nuse self::e::Y;\n").unwrap();
    std::fs::write(src.join("d/e.rs"), "use super::super::c;\nuse super::Z;\n").unwrap();
    let graph = imports(&modules(src));
    assert_eq!(graph["c"], BTreeSet::from(["a".to_owned()]));
    // `super::super` from `d::e` is the root's `c`; `super` alone is its parent, not counted.
    assert_eq!(graph["d::e"], BTreeSet::from(["c".to_owned()]));
    let found = cycles(&graph);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|c| c.starts_with("a -> ")));
    assert!(found.iter().any(|c| c.starts_with("b -> ")));
}
