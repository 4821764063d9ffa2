//! No import cycle among the modules of any crate of the workspace or of the app (issues 24
//! and 36: "a bottom floor that is really the bottom", "no import loops anywhere").
//!
//! It reads each crate's source files and draws, for every folder of modules (the crate root
//! and each `foo/` with a `mod.rs`), which child module names which other: a path rooted at
//! `crate::`, `super::` or `self::` (in a `use` or in an expression) that leads from child `a`
//! into child `b` is an edge `a -> b`. A name that the folder's `mod.rs` (or `lib.rs`) imports
//! or re-exports counts as the child it comes from (`crate::Error` is `error`). The folder's
//! `mod.rs` itself is the folder's face and not a child: its own `use` of its children is no
//! edge. Comments, strings and `#[cfg(test)]` code alike are read as code once comments and
//! literals are blanked; a method called on a value of another module's type is no edge (it needs
//! no import). Any strongly connected set of two or more children fails the test, naming the
//! edges and the files that make them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One source file: its module path (`["pool", "clone"]` for `src/pool/clone.rs`), whether it
/// is a folder's face (`lib.rs`, `mod.rs`), its name for messages, and its text.
struct Source {
    module: Vec<String>,
    face: bool,
    name: String,
    text: String,
}

/// Reads every `.rs` file under `dir`, `prefix` being its module path.
fn load(dir: &Path, prefix: &[String], out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 file name")
            .to_owned();
        if path.is_dir() {
            let mut module = prefix.to_vec();
            module.push(stem);
            load(&path, &module, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let face = stem == "lib" || stem == "mod" || stem == "main";
            let mut module = prefix.to_vec();
            if !face {
                module.push(stem);
            }
            out.push(Source {
                module,
                face,
                name: path.display().to_string(),
                text: std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("read {}: {e}", path.display())),
            });
        }
    }
}

/// The tokens of `text` that matter for paths: identifiers, `::`, and single punctuation
/// characters. Comments, string, byte-string, raw-string and char literals are dropped.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == 'r' || c == 'b')
            && (i == 0 || !ident(chars[i - 1]))
            && raw_string_start(&chars[i..]).is_some()
        {
            let (skip, hashes) = raw_string_start(&chars[i..]).expect("checked");
            i += skip;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            match (next, chars.get(i + 2)) {
                (Some('\\'), _) => {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                }
                (Some(_), Some('\'')) => i += 3,
                _ => i += 1,
            }
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// If `chars` starts a raw (byte) string literal (`r"`, `r#"`, `br"`), how many characters its
/// opening takes and how many `#` close it.
fn raw_string_start(chars: &[char]) -> Option<(usize, usize)> {
    let mut i = usize::from(chars.first() == Some(&'b'));
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + hashes) == Some(&'"')).then_some((i + hashes + 1, hashes))
}

/// One path a file names: where it leads (absolute module path and item), and, for a `use`,
/// the name it brings in.
struct Named {
    path: Vec<String>,
    alias: Option<String>,
}

/// Reads the path tree starting at `toks[*at]` (`a::b::{c, d::e as f}`), relative to `base`
/// and rooted by its first segment, adding each leaf to `out`.
fn path_tree(toks: &[String], at: &mut usize, base: &[String], out: &mut Vec<Named>) {
    let mut path = base.to_vec();
    loop {
        match toks.get(*at).map(String::as_str) {
            Some("{") => {
                *at += 1;
                while toks.get(*at).is_some_and(|t| t != "}") {
                    path_tree(toks, at, &path, out);
                    if toks.get(*at).is_some_and(|t| t == ",") {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            Some("super") => {
                path.pop();
            }
            Some("self") => {}
            Some("crate") => path.clear(),
            Some("*") => {
                *at += 1;
                return;
            }
            Some(seg) if seg.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                path.push(seg.to_owned())
            }
            _ => return,
        }
        *at += 1;
        if toks.get(*at).is_some_and(|t| t == "::") && toks.get(*at + 1).is_some_and(|t| t != "<") {
            *at += 1;
        } else {
            break;
        }
    }
    let alias = if toks.get(*at).is_some_and(|t| t == "as") {
        *at += 1;
        let name = toks.get(*at).cloned();
        *at += 1;
        name
    } else {
        path.last().cloned()
    };
    out.push(Named { path, alias });
}

/// Every path `source` names through `crate::`, `super::` or `self::`, and every `use` it
/// makes, each made absolute (inline `mod x { … }` blocks taken into account). The second list
/// holds the `use`s of the file's own top level, with the names they bring in.
fn named(source: &Source) -> (Vec<Named>, Vec<Named>) {
    let toks = tokens(&source.text);
    let mut module = source.module.clone();
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let (mut all, mut top_uses) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < toks.len() {
        let tok = toks[i].as_str();
        let after = toks.get(i + 1).map(String::as_str);
        match tok {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                    module.pop();
                }
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                module.push(toks[i + 1].clone());
                inline.push(depth);
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let mut at = i + 1;
                if toks.get(at).is_some_and(|t| t == "::") {
                    i += 1;
                    continue;
                }
                let mut uses = Vec::new();
                path_tree(&toks, &mut at, &module, &mut uses);
                if inline.is_empty() {
                    top_uses.extend(uses.iter().map(|n| Named {
                        path: n.path.clone(),
                        alias: n.alias.clone(),
                    }));
                }
                all.extend(uses);
                i = at;
                continue;
            }
            "crate" | "super" | "self"
                if after == Some("::") && (i == 0 || toks[i - 1] != "$" && toks[i - 1] != "::") =>
            {
                let mut at = i;
                path_tree(&toks, &mut at, &module, &mut all);
                i = at;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    (all, top_uses)
}

/// The import cycles among the children of every folder of modules in `sources`, each as a
/// sentence naming the folder, its modules and the edges with the files that make them. Empty
/// when there is none.
fn cycles(sources: &[Source]) -> Vec<String> {
    let folders: BTreeSet<Vec<String>> = sources
        .iter()
        .filter(|s| s.face)
        .map(|s| s.module.clone())
        .collect();
    let parsed: Vec<(&Source, Vec<Named>, Vec<Named>)> = sources
        .iter()
        .map(|s| {
            let (all, top) = named(s);
            (s, all, top)
        })
        .collect();
    let mut found = Vec::new();
    for folder in &folders {
        let level = folder.len();
        let children: BTreeSet<&str> = sources
            .iter()
            .filter(|s| s.module.len() > level && s.module.starts_with(folder))
            .map(|s| s.module[level].as_str())
            .collect();
        // Names the folder's face brings in or re-exports, and where they lead.
        let face_names: BTreeMap<&str, &[String]> = parsed
            .iter()
            .filter(|(s, _, _)| s.face && &s.module == folder)
            .flat_map(|(_, _, top)| top)
            .filter_map(|n| Some((n.alias.as_deref()?, n.path.as_slice())))
            .collect();
        let child_of = |path: &[String]| -> Option<String> {
            if path.len() <= level || !path.starts_with(folder) {
                return None;
            }
            let head = path[level].as_str();
            if children.contains(head) {
                return Some(head.to_owned());
            }
            let target = face_names.get(head)?;
            (target.len() > level && target.starts_with(folder))
                .then(|| target[level].clone())
                .filter(|c| children.contains(c.as_str()))
        };
        let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (source, all, _) in &parsed {
            if source.module.len() <= level || !source.module.starts_with(folder) {
                continue;
            }
            let from = source.module[level].clone();
            for named in all {
                if let Some(to) = child_of(&named.path).filter(|to| *to != from) {
                    edges
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_default()
                        .insert(source.name.clone());
                }
            }
        }
        for component in strongly_connected(&edges) {
            let mut why = Vec::new();
            for from in &component {
                for (to, files) in &edges[from] {
                    if component.contains(to) {
                        let files: Vec<&str> = files.iter().map(String::as_str).collect();
                        why.push(format!("{from} -> {to} ({})", files.join(", ")));
                    }
                }
            }
            let place = if folder.is_empty() {
                "the crate root".to_owned()
            } else {
                format!("{}/", folder.join("/"))
            };
            found.push(format!(
                "modules of {place} import each other in a cycle:\n  {}",
                why.join("\n  ")
            ));
        }
    }
    found
}

/// The sets of two or more nodes of `edges` that reach each other (Tarjan's algorithm).
fn strongly_connected(
    edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let n = walk.index.len();
        walk.index.insert(node, n);
        walk.low.insert(node, n);
        walk.stack.push(node);
        if let Some(out) = walk.edges.get(node) {
            for next in out.keys() {
                let next = next.as_str();
                if !walk.index.contains_key(next) {
                    visit(walk, next);
                    let low = walk.low[node].min(walk.low[next]);
                    walk.low.insert(node, low);
                } else if walk.stack.contains(&next) {
                    let low = walk.low[node].min(walk.index[next]);
                    walk.low.insert(node, low);
                }
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut component = BTreeSet::new();
            while let Some(top) = walk.stack.pop() {
                component.insert(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// A source tree given as `(file under src/, text)` pairs, for the checker's own tests.
fn tree(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(file, text)| {
            let mut module: Vec<String> = file
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            let face = matches!(
                module.last().map(String::as_str),
                Some("lib" | "mod" | "main")
            );
            if face {
                module.pop();
            }
            Source {
                module,
                face,
                name: (*file).to_owned(),
                text: (*text).to_owned(),
            }
        })
        .collect()
}

/// Every crate's source folder, from the workspace root: the core, the broker, the CLI, the
/// sandbox, the app, and this crate's own support library.
const CRATES: [&str; 6] = [
    "crates/vdi-core/src",
    "crates/broker/src",
    "crates/corral-vdi/src",
    "crates/sandbox/src",
    "src-tauri/src",
    "tests/support",
];

#[test]
fn no_module_of_any_crate_imports_one_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let mut found = Vec::new();
    for dir in CRATES {
        let mut sources = Vec::new();
        load(&root.join(dir), &[], &mut sources);
        assert!(sources.len() > 3, "the sources of {dir} were not found");
        found.extend(cycles(&sources).into_iter().map(|c| format!("{dir}: {c}")));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_cycle_through_a_chain_a_group_or_a_re_export_is_found() {
    let chain = tree(&[
        (
            "lib.rs",
            "pub mod a; pub mod b; pub mod c; pub use c::Thing;",
        ),
        ("a.rs", "use crate::{b::B, labels};"),
        ("b.rs", "fn f() { crate::Thing::new(); }"),
        ("c.rs", "// crate::b in a comment\nuse crate::a::A;"),
    ]);
    let found = cycles(&chain);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a -> b (a.rs)"), "{}", found[0]);
    assert!(found[0].contains("b -> c (b.rs)"), "{}", found[0]);
    assert!(found[0].contains("c -> a (c.rs)"), "{}", found[0]);

    let siblings = tree(&[
        ("lib.rs", "pub mod pool;"),
        (
            "pool/mod.rs",
            "mod clone; mod free; pub(crate) use free::check;",
        ),
        ("pool/clone.rs", "use super::check;"),
        (
            "pool/free.rs",
            "mod tests { use super::super::clone::x; }\nconst S: &str = \"super::clone\";",
        ),
    ]);
    let found = cycles(&siblings);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("modules of pool/"), "{}", found[0]);
}

#[test]
fn layers_that_only_point_down_pass() {
    let layered = tree(&[
        (
            "lib.rs",
            "pub mod error; pub mod pool; pub use error::Error;",
        ),
        (
            "error.rs",
            "pub struct Error; /* crate::pool */ const P: &str = \"crate::pool\";",
        ),
        (
            "pool/mod.rs",
            "mod clone; mod free; use crate::Error; use clone::X;",
        ),
        (
            "pool/clone.rs",
            "use super::free::Y; use crate::error::Error;",
        ),
        (
            "pool/free.rs",
            "use super::super::Error; fn f<'a>(c: char) -> bool { c == '{' }",
        ),
    ]);
    assert_eq!(cycles(&layered), Vec::<String>::new());
}
