//! A module's source files as the line listings of prof(1) and mprof(1)
//! show them: each file's lines beside their values (samples for prof,
//! current and high-water bytes for mprof), with the source text when it
//! was found.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One source file of a module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceFile<V> {
    /// Its path, as the debug information names it.
    pub path: String,
    /// Its lines (each with its newline), if the file was found: the
    /// caller's I/O fills it in.
    pub text: Option<Vec<String>>,
    /// The value of each line number that has one.
    pub values: BTreeMap<u32, V>,
}

/// The files of `lines` (values per (file, line)), in path order.
pub fn files<V: Copy>(lines: &BTreeMap<(String, u32), V>) -> Vec<SourceFile<V>> {
    let mut files: BTreeMap<&str, SourceFile<V>> = BTreeMap::new();
    for ((file, line), &v) in lines {
        files
            .entry(file)
            .or_insert_with(|| SourceFile {
                path: file.clone(),
                text: None,
                values: BTreeMap::new(),
            })
            .values
            .insert(*line, v);
    }
    files.into_values().collect()
}

/// How [`write_lines`] lays the rows out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    /// `-n`: prefix each row with its source file and a colon (no file
    /// headings then).
    pub file_prefix: bool,
    /// `-v`: every line of a found file, values or not.
    pub zeros: bool,
}

/// The rows `LINE\tCELLS\tTEXT` of `files` (the text when found), headed
/// by `FILE:` when there are several files and no prefix; a line whose
/// value `shown` refuses is left out unless `layout.zeros`.
pub fn write_lines<V: Copy + Default>(
    out: &mut String,
    files: &[SourceFile<V>],
    layout: Layout,
    shown: impl Fn(V) -> bool,
    cells: impl Fn(V) -> String,
) {
    let headed = files.len() > 1 && !layout.file_prefix;
    for f in files {
        if headed {
            let _ = writeln!(out, "{}:", f.path);
        }
        let prefix = if layout.file_prefix {
            format!("{}:", f.path)
        } else {
            String::new()
        };
        let numbers: Vec<u32> = match (&f.text, layout.zeros) {
            (Some(text), true) => {
                let last = f.values.keys().next_back().copied().unwrap_or(0);
                (1..=(text.len() as u32).max(last)).collect()
            }
            _ => f.values.keys().copied().collect(),
        };
        for line in numbers {
            let v = f.values.get(&line).copied().unwrap_or_default();
            if !layout.zeros && !shown(v) {
                continue;
            }
            let cells = cells(v);
            let text = f
                .text
                .as_ref()
                .and_then(|t| t.get(line.checked_sub(1)? as usize));
            match text {
                Some(t) if t.ends_with('\n') => {
                    let _ = write!(out, "{prefix}{line}\t{cells}\t{t}");
                }
                Some(t) => {
                    let _ = writeln!(out, "{prefix}{line}\t{cells}\t{t}");
                }
                None => {
                    let _ = writeln!(out, "{prefix}{line}\t{cells}");
                }
            }
        }
    }
}
