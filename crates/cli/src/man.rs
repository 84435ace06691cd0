//! `profdev man DIR`: write profdev's manual under DIR, a man hierarchy
//! such as `/usr/local/share/man`.
//!
//! The pages are generated from what the program and its crates already
//! say, so that none can drift from the code:
//!
//! * **Section 1**, `profdev(1)` and one page per subcommand,
//!   `profdev-NAME(1)`: NAME from the command table, SYNOPSIS and OPTIONS
//!   from the command's description as a `clap::Command` (the one its
//!   `--help` is printed from), DESCRIPTION and the sections after it from
//!   the command module's doc. A command named after a classic tool also
//!   gets `NAME(1)` (`kprof.1`, `prfpr.1`...), a `.so` link to its page,
//!   since it runs under that name through a link.
//! * **Section 3**, `profdev_profil(3)`: the profil library, written in roff
//!   (`man/profdev_profil.3` in the source tree); a test holds it to the
//!   functions `profdev_profil.h` declares.
//! * **Section 4**, the devices `kprof`, `prof`, `kgmon`, `prf`: each
//!   device module's doc, which is its man page.
//! * **Section 5**, the files `kpdata`, `gmon.out` and the prf log
//!   (`prflog`): each format module's doc.
//!
//! Every file is written through `profdev_safefile` (a unique temporary in
//! the directory, renamed over the page; a symbolic link at the page's name
//! is replaced, never followed), mode 0644; the directories are created
//! 0755 if missing. Pages render without a warning under
//! `groff -man -ww -z` (a test checks each one).
//!
//! # Example
//!
//! ```text
//! # profdev man /usr/local/share/man && mandb -q
//! profdev man: wrote 38 pages under /usr/local/share/man
//! $ man 4 kprof
//! ```

use crate::mdroff::{self, escape};
use anyhow::{Context, Result};
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write profdev's man pages (sections 1, 3, 4 and 5) under DIR.
#[derive(Parser, Debug)]
#[command(name = "profdev man", version)]
pub(crate) struct Args {
    /// The root of a man hierarchy, such as /usr/local/share/man: the
    /// pages go to DIR/man1, DIR/man3, DIR/man4 and DIR/man5.
    #[arg(value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    dir: PathBuf,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev man", args) {
        Ok(args) => crate::cmdline::finish("profdev man", run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let pages = pages();
    let mut sections: Vec<u8> = pages.iter().map(|p| p.section).collect();
    sections.dedup();
    for section in sections {
        let dir = args.dir.join(format!("man{section}"));
        let dir = profdev_safefile::create_dir(&dir, crate::output::DIR_MODE)?;
        for page in pages.iter().filter(|p| p.section == section) {
            dir.write_file(page.file_name(), page.text.as_bytes(), 0o644)
                .with_context(|| format!("cannot write the page {}", page.file_name()))?;
        }
    }
    println!(
        "profdev man: wrote {} pages under {}",
        pages.len(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// One man page.
#[derive(Debug, Clone)]
pub struct Page {
    pub name: String,
    pub section: u8,
    /// The roff source.
    pub text: String,
}

impl Page {
    /// `NAME.SECTION`, its file name in `manSECTION/`.
    pub fn file_name(&self) -> String {
        format!("{}.{}", self.name, self.section)
    }

    /// Is this page only a `.so` link to another?
    pub fn link_target(&self) -> Option<&str> {
        self.text.strip_prefix(".so ").map(str::trim_end)
    }
}

/// A page made from a module doc.
struct DocPage {
    name: &'static str,
    section: u8,
    /// The NAME line's description.
    about: &'static str,
    /// The Rust source whose `//!` doc is the page.
    source: &'static str,
    /// Sections of the doc that describe the library rather than the file
    /// (an API sketch), left out of the page.
    omit: &'static [&'static str],
}

/// Sections 4 and 5: the devices and the file formats, from their modules'
/// docs. Adding a page is one entry here.
const DOC_PAGES: &[DocPage] = &[
    DocPage {
        name: "kprof",
        section: 4,
        about: "kernel profiling device (Inferno kprof(3)): kpctl and kpdata",
        source: include_str!("../../dev/src/kprof.rs"),
        omit: &[],
    },
    DocPage {
        name: "prof",
        section: 4,
        about: "per-module profiling device (Inferno prof(3)): prof/ctl and the module directories",
        source: include_str!("../../dev/src/prof/mod.rs"),
        omit: &[],
    },
    DocPage {
        name: "kgmon",
        section: 4,
        about: "kernel call-graph profiling device (NetBSD kgmon): gmon/ctl, state, gmonparam, gmon.out",
        source: include_str!("../../dev/src/kgmon.rs"),
        omit: &[],
    },
    DocPage {
        name: "prf",
        section: 4,
        about: "operating system profiler device (DG/UX prf(7), SVR4 profiler): prf and prfK",
        source: include_str!("../../dev/src/prf.rs"),
        omit: &[],
    },
    DocPage {
        name: "kpdata",
        section: 5,
        about: "the kprof histogram file (Inferno 4th edition)",
        source: include_str!("../../formats/src/kpdata.rs"),
        omit: &[],
    },
    DocPage {
        name: "gmon.out",
        section: 5,
        about: "the profile gprof reads: GNU tagged, 4.4BSD and old BSD layouts",
        source: include_str!("../../formats/src/gmon/mod.rs"),
        omit: &["Synopsis", "Example"],
    },
    DocPage {
        name: "prflog",
        section: 5,
        about: "the prf log that prfsnap and prfdc write and prfpr reads",
        source: include_str!("../../formats/src/prflog.rs"),
        omit: &[],
    },
];

/// Pages written in roff in the source tree (`man/`), for what has no
/// module doc to be generated from.
const ROFF_PAGES: &[(&str, u8, &str)] = &[
    ("profdev", 1, include_str!("../../../man/profdev.1")),
    (
        "profdev_profil",
        3,
        include_str!("../../../man/profdev_profil.3"),
    ),
];

/// The line of `man/profdev.1` that the list of commands replaces.
const COMMANDS_MARK: &str = ".\\\" @COMMANDS@";

fn source() -> String {
    format!("profdev {}", env!("CARGO_PKG_VERSION"))
}

/// The .TH line, then the `Aq` string (an apostrophe) that clap_mangen's
/// text uses.
fn title(name: &str, section: u8) -> String {
    format!(
        ".TH \"{}\" \"{section}\" \"\" \"{}\" \"profdev manual\"\n\
         .ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n",
        escape(&name.to_uppercase(), true),
        source()
    )
}

/// Every page of the manual.
pub fn pages() -> Vec<Page> {
    let mut pages = Vec::new();
    for (name, section, text) in ROFF_PAGES {
        let text = if *name == "profdev" {
            text.replace(COMMANDS_MARK, &commands_list())
        } else {
            text.to_string()
        };
        pages.push(Page {
            name: name.to_string(),
            section: *section,
            text,
        });
    }
    for c in crate::COMMANDS {
        pages.push(command_page(c));
        if c.classic {
            pages.push(Page {
                name: c.name.to_string(),
                section: 1,
                text: format!(".so man1/profdev-{}.1\n", c.name),
            });
        }
    }
    for d in DOC_PAGES {
        pages.push(doc_page(d));
    }
    let names: Vec<(String, u8)> = pages
        .iter()
        .filter(|p| p.link_target().is_none())
        .map(|p| (p.name.clone(), p.section))
        .collect();
    for page in &mut pages {
        if page.link_target().is_none() && !page.text.contains("\n.SH \"SEE ALSO\"") {
            add_see_also(page, &names);
        }
    }
    pages.sort_by(|a, b| (a.section, &a.name).cmp(&(b.section, &b.name)));
    pages
}

/// The commands of `profdev(1)`, as tagged paragraphs.
fn commands_list() -> String {
    let mut out = String::new();
    for c in crate::COMMANDS {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{} (\\fBprofdev\\-{}\\fR(1))\n",
            escape(c.name, true),
            escape(c.about, false),
            escape(c.name, true)
        ));
    }
    out.pop();
    out
}

/// A subcommand's description as clap sees it: named as it is invoked.
pub fn cli(c: &crate::Command) -> clap::Command {
    let cmd = (c.cli)();
    let name = format!("profdev {}", c.name);
    let mut cmd = cmd.name(&name).bin_name(&name);
    cmd.build();
    cmd
}

fn command_page(c: &crate::Command) -> Page {
    let cmd = cli(c);
    let name = format!("profdev-{}", c.name);
    let doc = mdroff::convert(&mdroff::module_doc(c.doc));
    let mut text = title(&name, 1);
    text.push_str(&format!(
        ".SH NAME\n{} \\- {}\n",
        escape(&name, true),
        escape(c.about, false)
    ));
    text.push_str(".SH SYNOPSIS\n");
    text.push_str(&synopsis(c, &cmd));
    text.push_str(".SH DESCRIPTION\n");
    let mut described = false;
    for (heading, body) in &doc.sections {
        if heading.is_empty() || heading.eq_ignore_ascii_case("description") {
            described |= !body.trim().is_empty();
            text.push_str(body);
        }
    }
    if !described {
        if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
            text.push_str(&format!(".PP\n{}\n", escape(&about.to_string(), false)));
        }
    }
    let mut options = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render_options_section(&mut options)
        .expect("writing to a Vec cannot fail");
    // Without the string definitions roff puts in front (the title has them).
    let options = String::from_utf8_lossy(&options);
    if let Some(i) = options.find(".SH OPTIONS") {
        text.push_str(&options[i..]);
    }
    push_sections(&mut text, &doc, &["", "description", "synopsis"]);
    Page {
        name,
        section: 1,
        text,
    }
}

/// SYNOPSIS: the classic usage when the command keeps one (`prof
/// [-bflnvei] ...`), else every option and operand of its description;
/// and for a classic command, the same under its own name, as run through
/// a link.
fn synopsis(c: &crate::Command, cmd: &clap::Command) -> String {
    let rest = match cmd.get_overridden_usage() {
        Some(usage) => {
            let usage = usage.to_string();
            let rest = usage.split_once(' ').map_or("", |(_, r)| r);
            escape(rest, true)
        }
        None => usage_words(cmd).join(" "),
    };
    let mut out = format!("\\fBprofdev {}\\fR {rest}\n", escape(c.name, true));
    if c.classic {
        out.push_str(&format!(".br\n\\fB{}\\fR {rest}\n", escape(c.name, true)));
    }
    out
}

/// Each option (but help and version) and operand of `cmd` as roff:
/// `[\fB-F\fR \fIHZ\fR]`, `\fICMD\fR...`.
fn usage_words(cmd: &clap::Command) -> Vec<String> {
    let mut words = Vec::new();
    let value = |a: &clap::Arg| {
        a.get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| a.get_id().to_string().to_uppercase())
    };
    for a in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        if matches!(a.get_id().as_str(), "help" | "version") {
            continue;
        }
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), _) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => continue,
        };
        let mut w = format!("\\fB{}\\fR", escape(&flag, true));
        if a.get_action().takes_values() {
            w.push_str(&format!(" \\fI{}\\fR", escape(&value(a), true)));
        }
        let repeat = matches!(
            a.get_action(),
            clap::ArgAction::Append | clap::ArgAction::Count
        );
        let w = if a.is_required_set() {
            w
        } else {
            format!("[{w}]")
        };
        words.push(if repeat { format!("{w}...") } else { w });
    }
    for a in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
        let mut w = format!("\\fI{}\\fR", escape(&value(a), true));
        if many {
            w.push_str("...");
        }
        if a.is_last_set() || a.is_trailing_var_arg_set() {
            w = format!("\\-\\- {w}");
        }
        words.push(if a.is_required_set() {
            w
        } else {
            format!("[{w}]")
        });
    }
    words
}

/// The doc's sections but those named in `skip`, in order.
fn push_sections(text: &mut String, doc: &mdroff::Doc, skip: &[&str]) {
    for (heading, body) in &doc.sections {
        if skip.iter().any(|s| heading.eq_ignore_ascii_case(s)) || body.trim().is_empty() {
            continue;
        }
        text.push_str(&format!(
            ".SH \"{}\"\n",
            escape(&heading.to_uppercase(), false).replace('"', "")
        ));
        text.push_str(body);
    }
}

fn doc_page(d: &DocPage) -> Page {
    let doc = mdroff::convert(&mdroff::module_doc(d.source));
    let mut text = title(d.name, d.section);
    text.push_str(&format!(
        ".SH NAME\n{} \\- {}\n",
        escape(d.name, true),
        escape(d.about, false)
    ));
    if let Some(syn) = doc
        .section("synopsis")
        .filter(|_| !d.omit.contains(&"Synopsis"))
    {
        text.push_str(".SH SYNOPSIS\n");
        text.push_str(syn);
    }
    text.push_str(".SH DESCRIPTION\n");
    for (heading, body) in &doc.sections {
        if heading.is_empty() || heading.eq_ignore_ascii_case("description") {
            text.push_str(body);
        }
    }
    let mut skip = vec!["", "description", "synopsis"];
    skip.extend(d.omit);
    push_sections(&mut text, &doc, &skip);
    Page {
        name: d.name.to_string(),
        section: d.section,
        text,
    }
}

/// Does `text` mention `name` as a word of its own (not inside
/// `profdev\-prof`, `kprof` or `prfld`)?
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let name = escape(name, true);
    text.match_indices(&name).any(|(i, _)| {
        let (before, after) = (&text[..i], &text[i + name.len()..]);
        let font = ["\\fB", "\\fI", "\\fR", "\\fP"]
            .iter()
            .any(|f| before.ends_with(f));
        (font || !before.ends_with(word) && !before.ends_with("\\-"))
            && !after.starts_with(word)
            && !after.starts_with("\\-")
    })
}

/// SEE ALSO: profdev(1), and every other page this one mentions.
fn add_see_also(page: &mut Page, names: &[(String, u8)]) {
    let mut refs: Vec<String> = Vec::new();
    if page.name != "profdev" {
        refs.push("\\fBprofdev\\fR(1)".into());
    }
    // Not the .TH line, which names the manual.
    let body = page.text.split_once('\n').map_or("", |(_, b)| b);
    for (name, section) in names {
        if *name == page.name || name == "profdev" {
            continue;
        }
        // A command page is mentioned as `profdev NAME`.
        let mentioned = page.name == "profdev"
            || match name.strip_prefix("profdev-") {
                Some(cmd) => mentions(body, &format!("profdev {cmd}")),
                None => mentions(body, name),
            };
        if mentioned {
            refs.push(format!("\\fB{}\\fR({section})", escape(name, true)));
        }
    }
    if refs.is_empty() {
        return;
    }
    if !page.text.ends_with('\n') {
        page.text.push('\n');
    }
    page.text.push_str(".SH \"SEE ALSO\"\n");
    page.text.push_str(&refs.join(",\n"));
    page.text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_page_with_a_description_and_its_options() {
        let pages = pages();
        for c in crate::COMMANDS {
            let name = format!("profdev-{}", c.name);
            let page = pages
                .iter()
                .find(|p| p.name == name && p.section == 1)
                .unwrap_or_else(|| panic!("no page for {}", c.name));
            let desc = page
                .text
                .split(".SH DESCRIPTION\n")
                .nth(1)
                .unwrap_or_else(|| panic!("{name} has no DESCRIPTION"));
            let desc = desc.split("\n.SH").next().unwrap();
            assert!(
                desc.split_whitespace().count() >= 15,
                "{name}'s DESCRIPTION is too thin: write the module doc of its command:\n{desc}"
            );
            for arg in cli(c).get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(s) = arg.get_short() {
                    assert!(page.text.contains(&format!("\\-{s}")), "{name}: -{s}");
                }
                if let Some(l) = arg.get_long() {
                    let l = escape(l, true);
                    assert!(page.text.contains(&format!("\\-\\-{l}")), "{name}: --{l}");
                }
            }
        }
    }

    #[test]
    fn the_profil_page_names_every_function_of_the_header() {
        let header = include_str!("../../profil/include/profdev_profil.h");
        let page = ROFF_PAGES
            .iter()
            .find(|p| p.0 == "profdev_profil")
            .unwrap()
            .2;
        let mut functions = 0;
        let declarations = header.lines().filter(|l| {
            ["int ", "void ", "unsigned "]
                .iter()
                .any(|t| l.starts_with(t))
                && l.contains('(')
        });
        for decl in declarations {
            let name = decl
                .split('(')
                .next()
                .and_then(|s| s.split_whitespace().last())
                .unwrap_or_default();
            functions += 1;
            assert!(
                page.contains(&format!("\\fB{name}\\fR")),
                "man/profdev_profil.3 does not name {name} in bold, which profdev_profil.h declares"
            );
        }
        assert!(
            functions >= 11,
            "found only {functions} functions in the header"
        );
    }

    #[test]
    fn mentions_are_whole_names() {
        assert!(mentions("see \\fBkprof\\fR(4)", "kprof"));
        assert!(mentions("the prf device.", "prf"));
        assert!(!mentions("profdev\\-prof", "prof"));
        assert!(!mentions("prfld", "prf"));
        assert!(mentions("read gmon.out with gprof", "gmon.out"));
    }
}
