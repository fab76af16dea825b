//! No two modules of a crate in this workspace import each other, directly or around a loop
//! (docs/ARCHITECTURE.md, "Invariants"). A type both sides need goes into a leaf module.
//!
//! The graph is read from the syntax tree of each file (`syn`), not from its text, so brace
//! groups (`use crate::{a, b::{c, d}}`), renames and globs count like single imports, and comments
//! and strings do not count at all. A file's module imports another when a `use` tree, a path in
//! the code, or a `crate::`/`super::`/`self::` path inside a macro's tokens leads into the other
//! module's file. A module naming its own ancestors is not counted (a child may use what its
//! parent declares, and the crate root is everyone's ancestor), nor is a parent naming its
//! children (`mod` declarations and their paths). `super` and `self` inside an inline module
//! (`mod tests { use super::x; }`) start from that inline module.

// The helpers outside `#[test]` functions read the tree this test checks; a failure to read it
// is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;

use proc_macro2::TokenStream;
use proc_macro2::TokenTree;
use syn::visit::Visit;

/// Module path (`sql::lite`, `crate` for the root) to its file.
type Modules = BTreeMap<String, PathBuf>;

/// Module to the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

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

/// Collects, for one file, every path that starts at `crate`, `super` or `self`, made absolute
/// (segments from the crate root).
struct PathCollector {
    /// The module the code being visited is in: the file's module, then any inline modules.
    scope: Vec<String>,
    found: Vec<Vec<String>>,
}

impl PathCollector {
    fn new(module: &str) -> Self {
        let scope = if module == "crate" {
            Vec::new()
        } else {
            module.split("::").map(str::to_owned).collect()
        };
        Self {
            scope,
            found: Vec::new(),
        }
    }

    /// The absolute form of `segments` when it starts at `crate`, `super` or `self`
    /// (`self::super::x` included); `None` for any other path (an external crate, a local item, a
    /// child module in scope).
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut base = match segments.first()?.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => self.scope.clone(),
            _ => return None,
        };
        let mut rest = segments;
        while let Some((first, after)) = rest.split_first() {
            match first.as_str() {
                "crate" | "self" => {}
                "super" => {
                    base.pop();
                }
                _ => break,
            }
            rest = after;
        }
        base.extend_from_slice(rest);
        Some(base)
    }

    fn record(&mut self, segments: &[String]) {
        if let Some(path) = self.absolute(segments) {
            self.found.push(path);
        }
    }

    /// Every leaf of a `use` tree, with the prefix that leads to it: `use crate::{a, b::{c, d}}`
    /// gives `crate::a`, `crate::b::c` and `crate::b::d`.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.use_leaf(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.use_leaf(prefix, &rename.ident),
            syn::UseTree::Glob(_) => self.record(prefix),
            syn::UseTree::Group(group) => {
                for item in &group.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut path = prefix.to_vec();
        // `use crate::a::{self}` names `crate::a` itself.
        if ident != "self" || path.is_empty() {
            path.push(ident.to_string());
        }
        self.record(&path);
    }

    /// Paths inside a macro's tokens (`format!("{}", crate::a::f())`): each run of identifiers
    /// joined by `::` that starts at `crate`, `super` or `self`.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        // Colons seen since the last identifier of the run: `::` is two `:` puncts.
        let mut colons = 0;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) => {
                    let ident = ident.to_string();
                    if !run.is_empty() && colons == 2 {
                        run.push(ident);
                    } else {
                        self.end_run(&mut run);
                        run.push(ident);
                    }
                    colons = 0;
                }
                TokenTree::Punct(punct) if punct.as_char() == ':' && colons < 2 => colons += 1,
                TokenTree::Group(group) => {
                    self.end_run(&mut run);
                    colons = 0;
                    self.macro_tokens(group.stream());
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => {
                    self.end_run(&mut run);
                    colons = 0;
                }
            }
        }
        self.end_run(&mut run);
    }

    fn end_run(&mut self, run: &mut Vec<String>) {
        if run.len() > 1 {
            self.record(run);
        }
        run.clear();
    }
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if path.leading_colon.is_none() {
            self.record(&segments);
        }
        syn::visit::visit_path(self, path);
    }

    /// `pub(in crate::a)` says who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // Only inline modules have content here; `mod a;` is a file of its own.
        if item.content.is_some() {
            self.scope.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.scope.pop();
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        self.macro_tokens(mac.tokens.clone());
    }
}

/// The module a path (segments from the crate root) leads into: its longest prefix with a file.
fn resolve(modules: &Modules, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].join("::"))
        .find(|candidate| modules.contains_key(candidate))
}

/// Whether `other` is `module` itself or one of its ancestors (the root is everyone's).
fn is_self_or_ancestor(module: &str, other: &str) -> bool {
    other == "crate" || module == other || module.starts_with(&format!("{other}::"))
}

fn is_descendant(module: &str, other: &str) -> bool {
    module == "crate" || other.starts_with(&format!("{module}::"))
}

fn imports(modules: &Modules) -> Graph {
    let mut graph = BTreeMap::new();
    for (name, file) in modules {
        let text = std::fs::read_to_string(file).unwrap();
        let syntax = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let mut collector = PathCollector::new(name);
        collector.visit_file(&syntax);
        let deps = collector
            .found
            .iter()
            .filter_map(|path| resolve(modules, path))
            .filter(|target| !is_self_or_ancestor(name, target) && !is_descendant(name, target))
            .collect();
        graph.insert(name.clone(), deps);
    }
    graph
}

/// The modules that lie on a loop, each with the modules of that loop it imports.
fn cycles(graph: &Graph) -> Vec<String> {
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

fn reaches(graph: &Graph, from: &String, to: &String) -> bool {
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

/// Writes `files` (path under `src`, contents) into a fresh directory and reads its graph.
fn fixture(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let graph = imports(&modules(dir.path()));
    (dir, graph)
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
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
    let (_dir, graph) = fixture(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("a.rs", "use crate::b::Thing;\n"),
        ("b.rs", "pub struct Thing;\nfn f() { crate::a::g() }\n"),
        ("c.rs", "// crate::a::g in a comment only\nuse super::a;\n"),
        ("d/mod.rs", "mod e;\nuse self::e::Y;\n"),
        ("d/e.rs", "use super::super::c;\nuse super::Z;\n"),
    ]);
    assert_eq!(graph["c"], set(&["a"]));
    // `super::super` from `d::e` is the root's `c`; `super` alone is its parent, not counted.
    assert_eq!(graph["d::e"], set(&["c"]));
    // A parent naming its child is not counted.
    assert_eq!(graph["d"], set(&[]));
    let found = cycles(&graph);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|c| c.starts_with("a -> ")));
    assert!(found.iter().any(|c| c.starts_with("b -> ")));
}

/// The shape `validation` had: the entry module imports the checks in one brace group and each
/// check imports the entry module's shared context back. A text scan of `crate::` missed it.
#[test]
fn the_check_sees_a_cycle_through_a_brace_group() {
    let (_dir, graph) = fixture(&[
        ("lib.rs", "mod checks;\nmod entry;\nmod other;\n"),
        (
            "entry.rs",
            "use crate::{checks, other::{self}};\npub(crate) struct Inner;\n",
        ),
        ("checks.rs", "use crate::entry::Inner;\n"),
        ("other.rs", "pub fn f() {}\n"),
    ]);
    assert_eq!(graph["entry"], set(&["checks", "other"]));
    assert_eq!(graph["checks"], set(&["entry"]));
    let found = cycles(&graph);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|c| c == "entry -> [\"checks\"]"),
        "{found:?}"
    );
}

#[test]
fn every_form_of_import_counts_and_comments_and_strings_do_not() {
    let (_dir, graph) = fixture(&[
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\nmod g;\nmod h;\nmod x;\n",
        ),
        ("a.rs", "pub fn f() {}\n"),
        ("b.rs", "pub struct B;\n"),
        ("c.rs", "pub struct C;\n"),
        ("d.rs", "pub fn d() {}\n"),
        ("e.rs", "pub struct E;\n"),
        ("f.rs", "pub struct F;\n"),
        ("g.rs", "pub fn g() {}\n"),
        ("h.rs", "pub fn h() {}\n"),
        (
            "x.rs",
            r#"
use crate::{a::f as renamed, b::{B, self as bee}};
use crate::c::*;
pub(in crate::h) fn restricted() {}
/// `crate::h::h` in a doc comment
fn body() -> crate::e::E {
    let _ = "crate::h::h() in a string";
    println!("{}", crate::d::d());
    crate::e::E
}
mod inner {
    use super::super::f::F;
    fn x() { self::super::super::g::g() }
}
"#,
        ),
    ]);
    assert_eq!(graph["x"], set(&["a", "b", "c", "d", "e", "f", "g"]));
    assert!(cycles(&graph).is_empty());
}
