//! Markdown, as the module docs are written, to man(7) roff, so that a
//! device's or a command's module doc is its man page without a second
//! copy to keep in step.
//!
//! The doc's first paragraph is its title (the page's NAME comes from
//! it or from the command table); text before the first heading is the
//! description; each `#` heading starts a section (`.SH`, in capitals) and
//! each `##` a subsection (`.SS`). Rust code blocks (rustdoc's default
//! language: doctests and API sketches) are left out; `text`, `sh` and `c`
//! blocks are shown as they are. Tables become tagged paragraphs (no tbl
//! preprocessor is needed). Everything outside ASCII is written as a
//! `\[uXXXX]` escape, so the page renders the same whatever the reader's
//! locale and `groff -ww` has nothing to warn about.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A module doc in roff: its title and its sections in order.
#[derive(Debug, Default)]
pub struct Doc {
    /// The first paragraph, as roff text (one line per source line).
    pub title: String,
    /// `(heading, roff body)`; the text before the first heading has the
    /// heading "".
    pub sections: Vec<(String, String)>,
}

impl Doc {
    /// The body of the section whose heading is `name` (any case).
    pub fn section(&self, name: &str) -> Option<&str> {
        self.sections
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(name))
            .map(|(_, b)| b.as_str())
    }
}

/// The `//!` lines at the top of a Rust source file, without the marker.
pub fn module_doc(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let Some(rest) = line.strip_prefix("//!") else {
            if out.is_empty() && line.trim().is_empty() {
                continue;
            }
            break;
        };
        out.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        out.push('\n');
    }
    out
}

/// Escape text for roff: backslashes, and every non-ASCII character as a
/// named Unicode escape. With `code`, hyphens become `\-` (a minus that
/// copies as `-` from the rendered page).
pub fn escape(text: &str, code: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' if code => out.push_str("\\-"),
            c if c.is_ascii() => out.push(c),
            c => out.push_str(&format!("\\[u{:04X}]", c as u32)),
        }
    }
    out
}

/// Is a fenced block's info string rustdoc's Rust (a doctest or sketch)?
fn is_rust(info: &str) -> bool {
    info.trim().is_empty()
        || info.split(',').any(|t| {
            matches!(
                t.trim(),
                "rust" | "no_run" | "ignore" | "should_panic" | "compile_fail"
            ) || t.trim().starts_with("edition")
        })
}

struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    row: Vec<String>,
}

struct Writer {
    /// Output buffers: the bottom one is the section body; headings and
    /// table cells render into buffers pushed above it.
    bufs: Vec<String>,
    fonts: Vec<char>,
    /// Per open list: the next number of an ordered list.
    lists: Vec<Option<u64>>,
    /// Paragraphs seen in the innermost open list item.
    item_paragraphs: Vec<usize>,
    table: Option<Table>,
    skip_code: bool,
    in_code: bool,
    in_heading: bool,
    doc: Doc,
    seen_title: bool,
    in_title: bool,
}

impl Writer {
    fn buf(&mut self) -> &mut String {
        self.bufs.last_mut().expect("a buffer is always open")
    }

    /// Start a line with a request (`.PP`, `.IP ...`).
    fn request(&mut self, req: &str) {
        let b = self.buf();
        if !b.is_empty() && !b.ends_with('\n') {
            b.push('\n');
        }
        b.push_str(req);
        b.push('\n');
    }

    /// Append running text, protecting a line that would start with a
    /// control character.
    fn text(&mut self, text: &str) {
        let escaped = escape(text, self.in_code || self.fonts.contains(&'C'));
        let b = self.buf();
        for (i, line) in escaped.split('\n').enumerate() {
            if i > 0 {
                b.push('\n');
            }
            let at_start = b.is_empty() || b.ends_with('\n');
            let line = if at_start { line.trim_start() } else { line };
            if at_start && (line.starts_with('.') || line.starts_with('\'')) {
                b.push_str("\\&");
            }
            b.push_str(line);
        }
    }

    fn push_font(&mut self, f: char) {
        self.fonts.push(f);
        if !self.in_heading {
            let code = if f == 'C' { 'B' } else { f };
            self.buf().push_str(&format!("\\f{code}"));
        }
    }

    fn pop_font(&mut self) {
        self.fonts.pop();
        if !self.in_heading {
            let f = match self.fonts.last() {
                None => 'R',
                Some('C') => 'B',
                Some(&f) => f,
            };
            self.buf().push_str(&format!("\\f{f}"));
        }
    }

    fn start_section(&mut self, heading: String) {
        let body = std::mem::take(&mut self.bufs[0]);
        if let Some(last) = self.doc.sections.last_mut() {
            last.1 = body;
        }
        self.doc.sections.push((heading, String::new()));
    }

    fn event(&mut self, e: Event) {
        if self.skip_code {
            if let Event::End(TagEnd::CodeBlock) = e {
                self.skip_code = false;
            }
            return;
        }
        match e {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.text(&t),
            Event::Code(t) => {
                self.push_font('C');
                self.text(&t);
                self.pop_font();
            }
            Event::SoftBreak => self.buf().push('\n'),
            Event::HardBreak => self.request(".br"),
            Event::Rule => self.request(".PP"),
            _ => {}
        }
    }

    fn start(&mut self, tag: Tag) {
        match tag {
            Tag::Paragraph => {
                if !self.seen_title && self.doc.sections.len() == 1 {
                    self.seen_title = true;
                    self.in_title = true;
                    self.bufs.push(String::new());
                } else if let Some(n) = self.item_paragraphs.last_mut() {
                    *n += 1;
                    if *n > 1 {
                        self.request(".IP");
                    }
                } else {
                    self.request(".PP");
                }
            }
            Tag::Heading { .. } => {
                self.seen_title = true;
                self.in_heading = true;
                self.bufs.push(String::new());
            }
            Tag::CodeBlock(kind) => {
                let info = match &kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => "text".into(),
                };
                if is_rust(&info) {
                    self.skip_code = true;
                    return;
                }
                self.seen_title = true;
                if self.item_paragraphs.is_empty() {
                    self.request(".PP");
                    self.request(".RS 4");
                } else {
                    self.request(".IP");
                }
                self.request(".nf");
                self.in_code = true;
            }
            Tag::List(first) => {
                if !self.lists.is_empty() {
                    self.request(".RS");
                }
                self.lists.push(first);
            }
            Tag::Item => {
                let tag = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!(".IP {}. 4", *n - 1)
                    }
                    _ => ".IP \\(bu 2".to_string(),
                };
                self.request(&tag);
                self.item_paragraphs.push(0);
            }
            Tag::BlockQuote(_) => self.request(".RS"),
            Tag::Emphasis => self.push_font('I'),
            Tag::Strong => self.push_font('B'),
            Tag::Table(_) => {
                self.table = Some(Table {
                    header: Vec::new(),
                    rows: Vec::new(),
                    row: Vec::new(),
                })
            }
            Tag::TableCell => self.bufs.push(String::new()),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                if self.in_title {
                    self.in_title = false;
                    self.doc.title = self.bufs.pop().unwrap_or_default();
                } else {
                    self.buf().push('\n');
                }
            }
            TagEnd::Heading(level) => {
                self.in_heading = false;
                let text = self.bufs.pop().unwrap_or_default();
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if level == HeadingLevel::H1 {
                    self.start_section(text);
                } else {
                    self.request(&format!(".SS \"{}\"", text.replace('"', "")));
                }
            }
            TagEnd::CodeBlock => {
                self.in_code = false;
                self.request(".fi");
                if self.item_paragraphs.is_empty() {
                    self.request(".RE");
                }
            }
            TagEnd::List(_) => {
                self.lists.pop();
                if !self.lists.is_empty() {
                    self.request(".RE");
                }
            }
            TagEnd::Item => {
                self.item_paragraphs.pop();
            }
            TagEnd::BlockQuote(_) => self.request(".RE"),
            TagEnd::Emphasis | TagEnd::Strong => self.pop_font(),
            TagEnd::TableCell => {
                let cell = self.bufs.pop().unwrap_or_default();
                if let Some(t) = &mut self.table {
                    t.row.push(cell.trim().replace('\n', " "));
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    t.header = std::mem::take(&mut t.row);
                }
            }
            TagEnd::TableRow => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.table(t);
                }
            }
            _ => {}
        }
    }

    /// A table as tagged paragraphs: the tag is the first cell (with more
    /// than two columns, every cell but the last, each after its header),
    /// the paragraph the last cell.
    fn table(&mut self, t: Table) {
        self.request(".PP");
        for row in &t.rows {
            let Some((last, first)) = row.split_last() else {
                continue;
            };
            let tag = if first.len() == 1 {
                first[0].clone()
            } else {
                first
                    .iter()
                    .zip(t.header.iter())
                    .filter(|(cell, _)| !cell.is_empty())
                    .map(|(cell, head)| format!("{head} {cell}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.request(".TP");
            let b = self.buf();
            b.push_str(if tag.is_empty() { "\\&" } else { &tag });
            b.push('\n');
            b.push_str(if last.is_empty() { "\\&" } else { last });
            b.push('\n');
        }
        self.request(".PP");
    }
}

/// Convert a markdown document to roff sections.
pub fn convert(markdown: &str) -> Doc {
    let mut callback = |_: pulldown_cmark::BrokenLink<'_>| Some(("".into(), "".into()));
    let parser = Parser::new_with_broken_link_callback(
        markdown,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH,
        Some(&mut callback),
    );
    let mut w = Writer {
        bufs: vec![String::new()],
        fonts: Vec::new(),
        lists: Vec::new(),
        item_paragraphs: Vec::new(),
        table: None,
        skip_code: false,
        in_code: false,
        in_heading: false,
        doc: Doc {
            title: String::new(),
            sections: vec![(String::new(), String::new())],
        },
        seen_title: false,
        in_title: false,
    };
    for e in parser {
        w.event(e);
    }
    let body = std::mem::take(&mut w.bufs[0]);
    if let Some(last) = w.doc.sections.last_mut() {
        last.1 = body;
    }
    w.doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_sections_code_and_tables() {
        let doc = convert(
            "kprof \u{2014} a device.\n\nIntro `kpctl`\ntext.\n\n# Synopsis\n\n```text\n.dot -x\n```\n\n\
             ```\nlet hidden = 1;\n```\n\n# Bugs\n\n| a | b |\n|---|---|\n| `x` | y |\n\n* one\n* two\n",
        );
        assert_eq!(doc.title, "kprof \\[u2014] a device.");
        assert_eq!(doc.sections[0].0, "");
        assert_eq!(doc.sections[0].1, ".PP\nIntro \\fBkpctl\\fR\ntext.\n");
        let syn = doc.section("synopsis").unwrap();
        assert_eq!(syn, ".PP\n.RS 4\n.nf\n\\&.dot \\-x\n.fi\n.RE\n");
        let bugs = doc.section("Bugs").unwrap();
        assert!(bugs.contains(".TP\n\\fBx\\fR\ny\n"), "{bugs}");
        assert!(bugs.contains(".IP \\(bu 2\none\n"), "{bugs}");
        assert!(!bugs.contains("hidden") && !syn.contains("hidden"));
    }

    #[test]
    fn module_doc_is_the_leading_bang_comments() {
        assert_eq!(
            module_doc("\n//! a\n//!\n//!  b\nuse x;\n//! c\n"),
            "a\n\n b\n"
        );
    }
}
