//! The pages of the manual: assembled from the command table, the roff
//! pages of the source tree and the module docs (see the crate doc).

use crate::mdroff::{self, escape};

/// One man page.
#[derive(Debug, Clone)]
pub struct Page {
    /// Its name (`profdev-gmon`, `kprof`).
    pub name: String,
    /// Its section (1, 3, 4, 5).
    pub section: u8,
    /// The roff source.
    pub text: String,
}

/// A subcommand as its page sees it: one row of the binary's command
/// table.
pub struct Command<'a> {
    /// Its name (`gmon`).
    pub name: &'a str,
    /// One line of help: the NAME line.
    pub about: &'a str,
    /// Its command line, named as it is invoked (`profdev gmon`) and
    /// built: SYNOPSIS and OPTIONS.
    pub cli: clap::Command,
    /// Its module's source: the `//!` doc is DESCRIPTION and the sections
    /// after it.
    pub doc: &'a str,
    /// Named after a classic tool: also run through a link of that name,
    /// so its page gets a `.so` link of that name.
    pub classic: bool,
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
pub struct DocPage {
    /// The page's name.
    pub name: &'static str,
    /// Its section (4, 5).
    pub section: u8,
    /// The NAME line's description.
    pub about: &'static str,
    /// The Rust source whose `//!` doc is the page.
    pub source: &'static str,
    /// Sections of the doc that describe the library rather than the file
    /// (an API sketch), left out of the page.
    pub omit: &'static [&'static str],
}

/// Sections 4 and 5: the devices and the file formats, from their modules'
/// docs. Adding a page is one entry here.
pub const DOC_PAGES: &[DocPage] = &[
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
/// module doc to be generated from: `(name, section, roff)`.
pub const ROFF_PAGES: &[(&str, u8, &str)] = &[
    ("profdev", 1, include_str!("../../../man/profdev.1")),
    (
        "profdev_profil",
        3,
        include_str!("../../../man/profdev_profil.3"),
    ),
];

/// The line of `man/profdev.1` that the list of commands replaces.
const COMMANDS_MARK: &str = ".\\\" @COMMANDS@";

/// The .TH line (`source` is `profdev VERSION`), then the `Aq` string (an
/// apostrophe) that clap_mangen's text uses.
fn title(name: &str, section: u8, source: &str) -> String {
    format!(
        ".TH \"{}\" \"{section}\" \"\" \"{}\" \"profdev manual\"\n\
         .ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n",
        escape(&name.to_uppercase(), true),
        source
    )
}

/// Every page of the manual: the commands', and those of [`ROFF_PAGES`]
/// and [`DOC_PAGES`]; `version` is profdev's.
pub fn pages(commands: &[Command], version: &str) -> Vec<Page> {
    let source = format!("profdev {version}");
    let mut pages = Vec::new();
    for (name, section, text) in ROFF_PAGES {
        let text = if *name == "profdev" {
            text.replace(COMMANDS_MARK, &commands_list(commands))
        } else {
            text.to_string()
        };
        pages.push(Page {
            name: name.to_string(),
            section: *section,
            text,
        });
    }
    for c in commands {
        pages.push(command_page(c, &source));
        if c.classic {
            pages.push(Page {
                name: c.name.to_string(),
                section: 1,
                text: format!(".so man1/profdev-{}.1\n", c.name),
            });
        }
    }
    for d in DOC_PAGES {
        pages.push(doc_page(d, &source));
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
fn commands_list(commands: &[Command]) -> String {
    let mut out = String::new();
    for c in commands {
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

/// A command's page, `profdev-NAME(1)`.
fn command_page(c: &Command, source: &str) -> Page {
    let cmd = &c.cli;
    let name = format!("profdev-{}", c.name);
    let doc = mdroff::convert(&mdroff::module_doc(c.doc));
    let mut text = title(&name, 1, source);
    text.push_str(&format!(
        ".SH NAME\n{} \\- {}\n",
        escape(&name, true),
        escape(c.about, false)
    ));
    text.push_str(".SH SYNOPSIS\n");
    text.push_str(&synopsis(c, cmd));
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
fn synopsis(c: &Command, cmd: &clap::Command) -> String {
    let rest = match cmd.get_overridden_usage() {
        Some(usage) => {
            // A classic usage and, on a second line, what profdev adds
            // (`       profdev adds: [-H] ...`): one synopsis.
            let usage = usage
                .to_string()
                .lines()
                .map(|l| l.trim().trim_start_matches("profdev adds: "))
                .collect::<Vec<_>>()
                .join(" ");
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

/// A device's or a format's page, from its module doc.
fn doc_page(d: &DocPage, source: &str) -> Page {
    let doc = mdroff::convert(&mdroff::module_doc(d.source));
    let mut text = title(d.name, d.section, source);
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
    fn a_command_page_has_synopsis_options_sections_and_links() {
        let mut cli = clap::Command::new("profdev demo")
            .bin_name("profdev demo")
            .arg(
                clap::Arg::new("hz")
                    .short('F')
                    .value_name("HZ")
                    .help("Samples per second."),
            )
            .arg(
                clap::Arg::new("CMD")
                    .required(true)
                    .num_args(1..)
                    .trailing_var_arg(true),
            );
        cli.build();
        let doc = "//! `profdev demo`: a demo.\n//!\n//! It samples and writes kpdata, \
                   as the kprof device does.\n//!\n//! # Bugs\n//!\n//! None known.\n\nuse x;\n";
        let commands = [Command {
            name: "demo",
            about: "a demo command",
            cli,
            doc,
            classic: true,
        }];
        let pages = pages(&commands, "9.9");
        let page = pages.iter().find(|p| p.name == "profdev-demo").unwrap();
        assert!(
            page.text.starts_with(
                ".TH \"PROFDEV\\-DEMO\" \"1\" \"\" \"profdev 9.9\" \"profdev manual\"\n"
            ),
            "{}",
            page.text
        );
        assert!(
            page.text.contains(
                ".SH SYNOPSIS\n\\fBprofdev demo\\fR [\\fB\\-F\\fR \\fIHZ\\fR] \\-\\- \\fICMD\\fR...\n\
                 .br\n\\fBdemo\\fR [\\fB\\-F\\fR"
            ),
            "{}",
            page.text
        );
        assert!(page
            .text
            .contains(".SH DESCRIPTION\n.PP\nIt samples and writes kpdata,"));
        assert!(page.text.contains(".SH OPTIONS\n"), "{}", page.text);
        assert!(page.text.contains(".SH \"BUGS\"\n.PP\nNone known.\n"));
        // SEE ALSO: profdev(1) and what the doc mentions.
        assert!(
            page.text.ends_with(
                ".SH \"SEE ALSO\"\n\\fBprofdev\\fR(1),\n\\fBkprof\\fR(4),\n\\fBkpdata\\fR(5)\n"
            ),
            "{}",
            page.text
        );
        // The classic name is a link; profdev(1) lists the command.
        let link = pages.iter().find(|p| p.name == "demo").unwrap();
        assert_eq!(link.link_target(), Some("man1/profdev-demo.1"));
        assert_eq!(link.file_name(), "demo.1");
        let root = pages.iter().find(|p| p.name == "profdev").unwrap();
        assert!(root
            .text
            .contains(".TP\n\\fBdemo\\fR\na demo command (\\fBprofdev\\-demo\\fR(1))"));
        // Every device and format page is there, sorted by section.
        for d in DOC_PAGES {
            assert!(pages
                .iter()
                .any(|p| p.name == d.name && p.section == d.section));
        }
        assert!(pages.windows(2).all(|w| w[0].section <= w[1].section));
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
