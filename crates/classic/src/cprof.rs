//! cprof's work between the counts and the listing: which counted modules
//! the `-m` list selects ([`counted_lines`]), each one's counts placed on
//! its source lines through its ELF file ([`lines_of`]), its `.prf`
//! records (`-r`, and [`read_records`] without a command), and the
//! listings with their source text ([`listings`]).

use anyhow::{bail, Context as _, Result};
use profdev_coverage::counts::{Branch, ModuleCoverage};
use profdev_coverage::lines::{instruction_counts, map_lines, LineTable, ModuleLines};
use profdev_coverage::listing::{self, Listing};
use profdev_coverage::prf::{self, Prf};
use profdev_symbolize::ElfObject;
use std::path::Path;

/// A module's name: its path's basename.
pub fn module_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |b| b.to_string_lossy().into_owned())
}

/// True if `path` is one of `wanted` (by basename, path or canonical path).
pub fn wanted(wanted: &[String], path: &Path) -> bool {
    let canon = std::fs::canonicalize(path).ok();
    wanted.iter().any(|w| {
        if w.contains('/') {
            Path::new(w) == path || (canon.is_some() && std::fs::canonicalize(w).ok() == canon)
        } else {
            *w == module_name(&path.to_string_lossy())
        }
    })
}

/// A module's counts on its lines, through its file's line table; `note`
/// gets what is said about a module without lines.
pub fn lines_of(
    path: &str,
    insns: &[(u64, u64)],
    branches: &[Branch],
    note: &mut dyn FnMut(String),
) -> ModuleLines {
    let name = module_name(path);
    match ElfObject::open(Path::new(path)) {
        Ok(obj) => {
            let obj = obj.with_separate_debug_info();
            if !obj.has_debug_info() {
                note(format!(
                    "cprof: {path} has no debug information: no lines to mark"
                ));
            }
            map_lines(&name, path, insns, branches, &obj)
        }
        Err(e) => {
            note(format!(
                "cprof: cannot read module {path}: {e}: no lines to mark"
            ));
            map_lines(&name, path, insns, branches, &NoLines)
        }
    }
}

/// A module whose file cannot be read: no lines, no functions.
struct NoLines;

impl LineTable for NoLines {
    fn rows(&self, _: u64, _: u64) -> Vec<profdev_symbolize::LineRow> {
        Vec::new()
    }
    fn functions(&self) -> Vec<(u64, String)> {
        Vec::new()
    }
}

/// The records of `-m MODULE` in the current directory, checked against
/// the module file their header names.
pub fn read_records(module: &str) -> Result<Prf> {
    let file = prf::file_name(Path::new(module));
    let record = prf::read(Path::new(&file))?
        .with_context(|| format!("no records for {module}: {file} is not in the current directory (cprof -r CMD makes it)"))?;
    let now = ElfObject::open(Path::new(&record.path))
        .with_context(|| format!("{file} records {}, which cannot be read", record.path))?;
    if now.build_id() != record.build_id.as_deref() {
        bail!(
            "{file} records build {} of {}, but that file is now build {}: its lines cannot be \
             placed (move {file} away to start anew)",
            record
                .build_id
                .as_deref()
                .map_or_else(|| "-".into(), prf::hex),
            record.path,
            now.build_id().map_or_else(|| "-".into(), prf::hex)
        );
    }
    Ok(record)
}

/// The most files named one per line before the rest are counted.
pub const MAX_NOTES: usize = 5;

/// One note per file of `files`, up to [`MAX_NOTES`], then one line
/// counting the rest (a Rust program's standard library alone names
/// hundreds of files that are not on the machine).
pub fn notes(files: &[String], note: impl Fn(&str) -> String) -> Vec<String> {
    let mut out: Vec<String> = files.iter().take(MAX_NOTES).map(|f| note(f)).collect();
    if files.len() > MAX_NOTES {
        out.push(format!(
            "cprof: and {} more source files not found",
            files.len() - MAX_NOTES
        ));
    }
    out
}

/// The lines of the counted `modules` that `words` selects (empty: all),
/// recorded into `MODULE.prf` in the current directory if `record`; each
/// module's uncounted blocks noted. Err: the classic `no profile
/// information` when none is left, naming the modules of `asked` (the -m
/// list) that are no ELF files.
pub fn counted_lines(
    mut modules: Vec<ModuleCoverage>,
    words: &[String],
    asked: &[String],
    record: bool,
    note: &mut dyn FnMut(String),
) -> Result<Vec<ModuleLines>> {
    if !words.is_empty() {
        modules.retain(|m| wanted(words, &m.path));
    }
    if modules.is_empty() {
        return Err(crate::prof::no_profile(
            "cprof",
            "no profile information (no module asked for ran)",
            asked,
        ));
    }
    for m in &modules {
        if m.uncounted > 0 {
            note(format!(
                "cprof: {}: {} blocks could not be counted",
                m.path.display(),
                m.uncounted
            ));
        }
    }
    if record {
        for m in &modules {
            prf::record(Path::new("."), m)?;
        }
    }
    Ok(modules
        .iter()
        .map(|m| {
            let mut branches = m.branches.clone();
            branches.sort_by_key(|b| b.addr);
            lines_of(
                &m.path.to_string_lossy(),
                &instruction_counts(m),
                &branches,
                note,
            )
        })
        .collect())
}

/// Each module's lines with their source text; the files not found noted
/// (unless `quiet`: `-r` lists nothing).
pub fn listings(
    lines: Vec<ModuleLines>,
    quiet: bool,
    note: &mut dyn FnMut(String),
) -> Vec<Listing> {
    lines
        .into_iter()
        .map(|lines| {
            let (sources, missing) = listing::read_sources(&lines);
            if !quiet {
                for line in notes(&missing, |f| {
                    format!("cprof: source file {f} not found: line numbers only")
                }) {
                    note(line);
                }
            }
            Listing { lines, sources }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_missing_files_are_counted_not_listed() {
        let files: Vec<String> = (0..8).map(|i| format!("/f{i}.rs")).collect();
        let n = notes(&files, |f| format!("missing {f}"));
        assert_eq!(n.len(), MAX_NOTES + 1);
        assert_eq!(n[0], "missing /f0.rs");
        assert_eq!(n[MAX_NOTES], "cprof: and 3 more source files not found");
        assert_eq!(notes(&files[..2], |f| f.to_string()), ["/f0.rs", "/f1.rs"]);
    }

    #[test]
    fn modules_are_wanted_by_basename_or_path() {
        let exe = std::env::current_exe().unwrap();
        let base = module_name(&exe.to_string_lossy());
        assert!(wanted(std::slice::from_ref(&base), &exe));
        assert!(wanted(&[exe.display().to_string()], &exe));
        assert!(!wanted(&["libc.so.6".into()], &exe));
        assert!(!wanted(&[format!("/no/such/{base}")], &exe));
        assert_eq!(module_name("/a/b/libc.so.6"), "libc.so.6");
        assert_eq!(module_name("/"), "/");
    }

    #[test]
    fn a_module_that_cannot_be_read_has_no_lines() {
        let mut said = Vec::new();
        let m = lines_of("/no/such/module", &[(1, 2)], &[], &mut |n| said.push(n));
        assert!(m.files.is_empty());
        assert_eq!(said.len(), 1);
        assert!(said[0].starts_with("cprof: cannot read module /no/such/module: "));
        assert!(said[0].ends_with(": no lines to mark"));
    }

    #[test]
    fn nothing_selected_is_no_profile() {
        let e = counted_lines(Vec::new(), &[], &[], false, &mut |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no profile information (no module asked for ran)"
        );
    }

    #[test]
    fn records_of_a_module_never_recorded() {
        let e = read_records("libnosuch-module.so").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "no records for libnosuch-module.so: libnosuch-module.so.prf is not in the current \
             directory (cprof -r CMD makes it)"
        );
    }
}
