//! ARCHITECTURE.md against the workspace, and the layering rules.
//!
//! `cargo metadata --no-deps --offline` gives every workspace member and
//! the profdev crates its `Cargo.toml` names; each member's `lib.rs` (or
//! `main.rs`) says whether it forbids `unsafe`. The tests fail when:
//!
//! * the page's crate table ("The crates as layers") misses a member,
//!   lists one that is gone, or gives a dependency list other than the
//!   `Cargo.toml`'s; or a row depends on a crate below it;
//! * the page's `unsafe` list ("Where unsafe lives") differs from the
//!   crates' `#![forbid(unsafe_code)]` attributes, or a C file under
//!   `crates/*/c/` is not named on the page;
//! * a crate depends on a profdev crate its row in [`MAY_USE`] does not
//!   allow, or has no row there.
//!
//! Crates are named by their directory under `crates/` (`cli` is the
//! `profdev` package).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The layering rules: each crate and the profdev crates its
/// `[dependencies]` (and `[build-dependencies]`) may name. A crate that is
/// not listed fails the test; so does a dependency its row does not name.
/// Dev-dependencies are free, except that nothing depends on `cli` and
/// `testkit` is only ever a dev-dependency.
const MAY_USE: &[(&str, &[&str])] = &[
    // Bottom: pure data, and the crates that know one system interface.
    ("core", &[]),
    ("safefile", &[]),
    ("asuser", &[]),
    ("testkit", &[]),
    // Build-time only: compiles the C runtimes for build.rs.
    ("cbuild", &[]),
    // Pure formats; the sources of samples and symbols.
    ("formats", &["core"]),
    ("symbolize", &["core"]),
    // symbolize owns the one /proc/PID/maps reader (symbolize::maps):
    // sample synthesizes running tasks' mappings with it, inject finds the
    // C library with it, mprof's sweep looks for its library with it.
    ("sample", &["core", "symbolize"]),
    ("inject", &["symbolize"]),
    ("report", &["core", "formats"]),
    // Libraries that run inside profiled processes, with their readers.
    ("mprof", &["safefile", "cbuild", "symbolize"]),
    ("profil", &["formats", "safefile"]),
    (
        "coverage",
        &[
            "core",
            "symbolize",
            "sample",
            "safefile",
            "formats",
            "cbuild",
        ],
    ),
    // The device layer: never sample, fuse or cli, nor the engines that
    // reach into processes (coverage, inject, mprof): those are handed to
    // it as traits by `attach`.
    (
        "dev",
        &[
            "core",
            "formats",
            "report",
            "symbolize",
            "safefile",
            "asuser",
        ],
    ),
    // The prof device's attach engines.
    (
        "attach",
        &["dev", "coverage", "inject", "mprof", "safefile", "asuser"],
    ),
    ("fuse", &["core", "dev", "safefile"]),
    // gmon's and kgmon's profiles, and the symbols files gprof reads.
    (
        "gprof",
        &["core", "formats", "symbolize", "coverage", "safefile"],
    ),
    // The manual and the completions: formatting over clap, no profdev
    // crate.
    ("man", &[]),
    // profdev record's recorder.
    (
        "record",
        &["core", "formats", "sample", "symbolize", "safefile"],
    ),
    // profdev agent: the recorder cut per interval, labels, senders (its
    // spool on disk and health file will go through safefile); --heap's
    // attach (attach, mprof) and symbols (classic, as mprof --pprof's).
    (
        "agent",
        &[
            "core",
            "formats",
            "sample",
            "symbolize",
            "record",
            "safefile",
            "attach",
            "mprof",
            "classic",
        ],
    ),
    // The classic commands' work between command line and output: over
    // the device layer and the engines (runs, attaches), below the binary.
    (
        "classic",
        &[
            "core",
            "formats",
            "symbolize",
            "sample",
            "report",
            "dev",
            "mprof",
            "coverage",
            "attach",
        ],
    ),
    // The binary: anything but profil (linked into programs) and testkit.
    (
        "cli",
        &[
            "core",
            "formats",
            "symbolize",
            "sample",
            "dev",
            "report",
            "fuse",
            "safefile",
            "mprof",
            "coverage",
            "asuser",
            "inject",
            "attach",
            "gprof",
            "man",
            "record",
            "classic",
            "agent",
        ],
    ),
];

/// One workspace member, as `cargo metadata` and its root source say.
struct Member {
    /// Its directory under `crates/`.
    short: String,
    /// Profdev crates (short names) of `[dependencies]` and
    /// `[build-dependencies]`.
    deps: BTreeSet<String>,
    /// Profdev crates of `[dev-dependencies]`, itself left out.
    dev_deps: BTreeSet<String>,
    /// Whether its `lib.rs` (or `main.rs`) forbids unsafe code.
    forbids_unsafe: bool,
}

/// The workspace root and its members by short name.
fn workspace() -> (PathBuf, BTreeMap<String, Member>) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let root = PathBuf::from(meta["workspace_root"].as_str().expect("workspace_root"));
    let packages = meta["packages"].as_array().expect("packages");

    // Package name -> short name, for every member.
    let short_of = |manifest_path: &str| -> String {
        let dir = Path::new(manifest_path).parent().expect("crate directory");
        let rel = dir
            .strip_prefix(&root)
            .expect("member inside the workspace");
        let mut parts = rel.iter();
        assert_eq!(
            parts.next().and_then(|p| p.to_str()),
            Some("crates"),
            "member {} is not under crates/",
            rel.display()
        );
        parts
            .next()
            .and_then(|p| p.to_str())
            .expect("crates/NAME")
            .to_string()
    };
    let names: BTreeMap<String, String> = packages
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                short_of(p["manifest_path"].as_str().expect("manifest_path")),
            )
        })
        .collect();

    let mut members = BTreeMap::new();
    for p in packages {
        let short = names[p["name"].as_str().unwrap()].clone();
        let mut deps = BTreeSet::new();
        let mut dev_deps = BTreeSet::new();
        for d in p["dependencies"].as_array().expect("dependencies") {
            let Some(dep) = names.get(d["name"].as_str().expect("dependency name")) else {
                continue;
            };
            if *dep == short {
                continue; // formats names itself to turn a feature on in tests
            }
            match d["kind"].as_str() {
                Some("dev") => dev_deps.insert(dep.clone()),
                _ => deps.insert(dep.clone()),
            };
        }
        let dev_deps = &dev_deps - &deps;
        let targets = p["targets"].as_array().expect("targets");
        let is = |t: &serde_json::Value, kind: &str| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k.as_str().is_some_and(|k| k == kind)))
        };
        let crate_root = targets
            .iter()
            .find(|t| is(t, "lib") || is(t, "rlib"))
            .or_else(|| targets.iter().find(|t| is(t, "bin")))
            .expect("a lib or bin target");
        let src = crate_root["src_path"].as_str().expect("src_path");
        let text = std::fs::read_to_string(src).expect("crate root readable");
        let forbids_unsafe = text.lines().any(|l| {
            let l = l.trim();
            l == "#![forbid(unsafe_code)]" || l == "#![cfg_attr(not(test), forbid(unsafe_code))]"
        });
        members.insert(
            short.clone(),
            Member {
                short,
                deps,
                dev_deps,
                forbids_unsafe,
            },
        );
    }
    (root, members)
}

/// ARCHITECTURE.md's text.
fn page(root: &Path) -> String {
    std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md readable")
}

/// The lines of the section under `## heading`, up to the next `## `.
fn section<'a>(page: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = page.lines().skip_while(|l| l.trim() != heading);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no section {heading:?}"
    );
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

/// A comma-separated list of crate names; `—` is the empty list.
fn names(cell: &str) -> BTreeSet<String> {
    let cell = cell.trim().trim_end_matches('.');
    if cell == "—" || cell.is_empty() {
        return BTreeSet::new();
    }
    cell.split(',')
        .map(|n| n.trim().trim_matches('`').to_string())
        .collect()
}

/// Shows a set as the page writes it.
fn show(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "—".to_string()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// One row of the page's crate table.
struct Row {
    crate_name: String,
    deps: BTreeSet<String>,
    dev_deps: BTreeSet<String>,
}

/// The crate table of "The crates as layers", in the page's order.
fn crate_table(page: &str) -> Vec<Row> {
    let rows: Vec<Row> = section(page, "## The crates as layers")
        .into_iter()
        .filter(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split('|').collect();
            assert!(
                cells.len() >= 4,
                "ARCHITECTURE.md: a crate table row needs 4 cells \
                 (crate | depends on | tests also use | role): {l}"
            );
            Row {
                crate_name: cells[0].trim().trim_matches('`').to_string(),
                deps: names(cells[1]),
                dev_deps: names(cells[2]),
            }
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "ARCHITECTURE.md: the crate table is empty"
    );
    rows
}

#[test]
fn crate_table_matches_the_cargo_tomls() {
    let (root, members) = workspace();
    let rows = crate_table(&page(&root));
    let mut errors = Vec::new();
    let mut above = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for row in &rows {
        let name = &row.crate_name;
        if !seen.insert(name.clone()) {
            errors.push(format!("row {name}: listed twice"));
        }
        match members.get(name) {
            None => errors.push(format!(
                "row {name}: no such workspace member (crates/{name}); remove the row"
            )),
            Some(m) => {
                if row.deps != m.deps {
                    errors.push(format!(
                        "row {name}: \"depends on\" says {}, crates/{name}/Cargo.toml says {}",
                        show(&row.deps),
                        show(&m.deps)
                    ));
                }
                if row.dev_deps != m.dev_deps {
                    errors.push(format!(
                        "row {name}: \"tests also use\" says {}, crates/{name}/Cargo.toml's \
                         [dev-dependencies] add {}",
                        show(&row.dev_deps),
                        show(&m.dev_deps)
                    ));
                }
            }
        }
        let below: BTreeSet<String> = row.deps.difference(&above).cloned().collect();
        if !below.is_empty() {
            errors.push(format!(
                "row {name}: depends on {}, not in a row above it (each crate depends only on \
                 crates above it)",
                show(&below)
            ));
        }
        above.insert(name.clone());
    }
    for (name, m) in &members {
        if !seen.contains(name) {
            errors.push(format!(
                "crate {name} (crates/{name}) has no row in ARCHITECTURE.md's crate table: add \
                 | {name} | {} | {} | role |",
                show(&m.deps),
                show(&m.dev_deps)
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "ARCHITECTURE.md's crate table (\"The crates as layers\") differs from the workspace:\n  {}",
        errors.join("\n  ")
    );
}

#[test]
fn unsafe_list_matches_the_forbid_attributes() {
    let (root, members) = workspace();
    let text = page(&root);
    let lines = section(&text, "## Where unsafe lives");
    // `* **NAME**: ...` names a crate with unsafe code.
    let with_unsafe: BTreeSet<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("* **"))
        .filter_map(|l| l.split_once("**"))
        .map(|(name, _)| name.to_string())
        .collect();
    // `**No unsafe** (...): a, b, c.` (the list may wrap).
    let start = lines
        .iter()
        .position(|l| l.starts_with("**No unsafe**"))
        .expect("ARCHITECTURE.md: \"Where unsafe lives\" has no line starting **No unsafe**");
    let paragraph = lines[start..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let (_, list) = paragraph
        .rsplit_once("): ")
        .expect("**No unsafe** (...): the crates, comma separated");
    let without_unsafe = names(list);

    let mut errors = Vec::new();
    for (name, m) in &members {
        match (
            m.forbids_unsafe,
            with_unsafe.contains(name),
            without_unsafe.contains(name),
        ) {
            (true, false, true) | (false, true, false) => {}
            (true, _, _) => errors.push(format!(
                "crate {}: forbids unsafe code in its crate root; the page should list it under \
                 **No unsafe** only",
                m.short
            )),
            (false, _, _) => errors.push(format!(
                "crate {}: has no #![forbid(unsafe_code)]; the page should give it a bullet \
                 `* **{}**: where and why` and leave it out of **No unsafe**",
                m.short, m.short
            )),
        }
    }
    for name in with_unsafe.union(&without_unsafe) {
        if !members.contains_key(name) {
            errors.push(format!(
                "{name}: named in \"Where unsafe lives\", not a workspace member"
            ));
        }
    }
    // The C runtimes run in profiled processes: each is named.
    for dir in std::fs::read_dir(root.join("crates")).expect("crates/ readable") {
        let c = dir.expect("crates/ entry").path().join("c");
        let Ok(files) = std::fs::read_dir(&c) else {
            continue;
        };
        for f in files {
            let path = f.expect("c/ entry").path();
            if path.extension().is_some_and(|e| e == "c") {
                let rel = path.strip_prefix(&root).unwrap().display().to_string();
                if !text.contains(&rel) {
                    errors.push(format!("{rel}: C code that ARCHITECTURE.md does not name"));
                }
            }
        }
    }
    assert!(
        errors.is_empty(),
        "ARCHITECTURE.md's \"Where unsafe lives\" differs from the workspace:\n  {}",
        errors.join("\n  ")
    );
}

#[test]
fn layering_rules_hold() {
    let (_, members) = workspace();
    let rules: BTreeMap<&str, BTreeSet<&str>> = MAY_USE
        .iter()
        .map(|(c, may)| (*c, may.iter().copied().collect()))
        .collect();
    let mut errors = Vec::new();
    for (c, _) in MAY_USE {
        if !members.contains_key(*c) {
            errors.push(format!(
                "MAY_USE row {c}: no such workspace member; remove the row"
            ));
        }
    }
    for (name, m) in &members {
        if m.deps.contains("cli") || m.dev_deps.contains("cli") {
            errors.push(format!("crate {name}: depends on cli; nothing may"));
        }
        if m.deps.contains("testkit") {
            errors.push(format!(
                "crate {name}: depends on testkit outside [dev-dependencies]"
            ));
        }
        let Some(may) = rules.get(name.as_str()) else {
            errors.push(format!(
                "crate {name}: no row in MAY_USE (crates/cli/tests/architecture.rs); today it \
                 depends on {}",
                show(&m.deps)
            ));
            continue;
        };
        let forbidden: BTreeSet<String> = m
            .deps
            .iter()
            .filter(|d| !may.contains(d.as_str()))
            .cloned()
            .collect();
        if !forbidden.is_empty() {
            errors.push(format!(
                "crate {name}: depends on {}, which its MAY_USE row ({}) does not allow",
                show(&forbidden),
                may.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "the layering rules (MAY_USE in crates/cli/tests/architecture.rs) are broken:\n  {}",
        errors.join("\n  ")
    );
}

/// Every member takes the workspace's lints (`[lints] workspace = true`),
/// so the denials there — undocumented unsafe blocks, functions over the
/// length `clippy.toml` sets — reach a crate added tomorrow too.
#[test]
fn every_member_takes_the_workspace_lints() {
    let (root, members) = workspace();
    let mut missing = Vec::new();
    for short in members.keys() {
        let path = root.join("crates").join(short).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).expect("Cargo.toml readable");
        let mut in_lints = false;
        let mut takes = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_lints = line == "[lints]";
            } else if in_lints && line.replace(' ', "") == "workspace=true" {
                takes = true;
            }
        }
        if !takes {
            missing.push(format!(
                "crates/{short}/Cargo.toml: add `[lints]` with `workspace = true`"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Lines of `text` outside inline test modules (`#[cfg(test)]` followed by
/// `mod NAME {`, up to the `}` at that line's indentation).
fn lines_outside_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut n = 0;
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).copied().unwrap_or("");
        let opens_mod = {
            let t = next.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or(t.strip_prefix("pub "))
                .unwrap_or(t);
            t.starts_with("mod ") && t.ends_with('{')
        };
        if lines[i].trim() == "#[cfg(test)]" && opens_mod {
            let close = format!("{}}}", &next[..next.len() - next.trim_start().len()]);
            i += 2;
            while i < lines.len() && lines[i] != close {
                i += 1;
            }
            i += 1;
            continue;
        }
        n += 1;
        i += 1;
    }
    n
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a source directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The binary stays thin — parse, call a library, print — and no source
/// file grows past 1000 lines (issue 24): `crates/cli/src` holds at most
/// 6,500 lines outside inline test modules.
#[test]
fn the_cli_stays_thin_and_files_stay_short() {
    let (root, members) = workspace();
    let mut long = Vec::new();
    for short in members.keys() {
        let mut files = Vec::new();
        let src = root.join("crates").join(short).join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
        for f in files {
            let n = std::fs::read_to_string(&f)
                .expect("readable")
                .lines()
                .count();
            if n > 1000 {
                long.push(format!(
                    "{} has {n} lines: split it into modules",
                    f.display()
                ));
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
    let mut files = Vec::new();
    rust_files(&root.join("crates/cli/src"), &mut files);
    let total: usize = files
        .iter()
        .map(|f| lines_outside_tests(&std::fs::read_to_string(f).expect("readable")))
        .sum();
    assert!(
        total <= 6500,
        "crates/cli/src holds {total} lines outside test modules (at most 6,500): move the \
         work into a library crate and keep parse, call, print here"
    );
}

#[test]
fn lines_outside_tests_skips_inline_test_modules() {
    let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn b() {}\n";
    assert_eq!(lines_outside_tests(text), 2);
    let nested = "mod m {\n    #[cfg(test)]\n    mod tests {\n    }\n}\n";
    assert_eq!(lines_outside_tests(nested), 2);
}
