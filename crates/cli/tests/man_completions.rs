//! `profdev man DIR` and `profdev completions SHELL`, end to end: the pages
//! the binary writes, rendered by groff; the options each command's
//! `--help` prints, found in its page; the completion scripts loaded by
//! bash, zsh and fish and asked for candidates.

mod common;

use common::{profdev, run, tempdir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The subcommands `profdev --help` lists.
fn commands() -> Vec<String> {
    let out = run(profdev().arg("--help"));
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let list = help
        .split("commands:\n")
        .nth(1)
        .expect("profdev --help lists its commands");
    let names: Vec<String> = list
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 12, "{help}");
    names
}

/// Write the manual into a fresh directory.
fn manual() -> (tempfile::TempDir, PathBuf) {
    let d = tempdir();
    let root = d.path().join("share/man");
    let out = run(profdev().arg("man").arg(&root));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (d, root)
}

fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    for section in ["man1", "man3", "man4", "man5"] {
        for e in std::fs::read_dir(root.join(section)).unwrap() {
            pages.push(e.unwrap().path());
        }
    }
    pages.sort();
    pages
}

/// A page's text as a reader sees its words: roff escapes for hyphens and
/// fonts undone.
fn words(roff: &str) -> String {
    let mut s = roff.replace("\\-", "-").replace("\\e", "\\");
    for f in ["\\fB", "\\fI", "\\fR", "\\fP"] {
        s = s.replace(f, "");
    }
    s
}

/// Does `text` hold `opt` as a whole option (`-f` not inside `-foo` or
/// `--f`)?
fn has_option(text: &str, opt: &str) -> bool {
    text.match_indices(opt).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + opt.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

/// The options in a `--help` text: `-x` and `--long-name` words.
fn help_options(help: &str) -> BTreeSet<String> {
    let mut opts = BTreeSet::new();
    for word in help.split(|c: char| c.is_whitespace() || ",()[]<>|=:;'\"".contains(c)) {
        let ok =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if let Some(long) = word.strip_prefix("--") {
            if ok(long) && long.starts_with(|c: char| c.is_ascii_alphabetic()) {
                opts.insert(word.to_string());
            }
        } else if let Some(short) = word.strip_prefix('-') {
            if short.len() == 1 && short.starts_with(|c: char| c.is_ascii_alphabetic()) {
                opts.insert(word.to_string());
            }
        }
    }
    opts
}

#[test]
fn every_command_has_a_page_in_man1() {
    let (_d, root) = manual();
    let man1 = root.join("man1");
    assert!(man1.join("profdev.1").is_file());
    for c in commands() {
        let page = man1.join(format!("profdev-{c}.1"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("no page for `profdev {c}` ({}): {e}", page.display()));
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION"] {
            assert!(text.contains(section), "profdev-{c}.1 has no {section}");
        }
        let profdev1 = std::fs::read_to_string(man1.join("profdev.1")).unwrap();
        assert!(
            words(&profdev1).contains(&format!("profdev-{c}(1)")),
            "profdev.1 does not list {c}"
        );
    }
    // The classic names, run through links, have pages of their own name
    // that lead to the command's page.
    for c in [
        "kprof", "prof", "kgmon", "prfld", "prfstat", "prfdc", "prfsnap", "prfpr",
    ] {
        let link = std::fs::read_to_string(man1.join(format!("{c}.1"))).unwrap();
        let target = link.strip_prefix(".so ").unwrap().trim();
        assert_eq!(target, format!("man1/profdev-{c}.1"));
        assert!(root.join(target).is_file());
    }
    for (section, name) in [
        ("man3", "profdev_profil.3"),
        ("man4", "kprof.4"),
        ("man4", "prof.4"),
        ("man4", "kgmon.4"),
        ("man4", "prf.4"),
        ("man5", "kpdata.5"),
        ("man5", "gmon.out.5"),
        ("man5", "prflog.5"),
    ] {
        assert!(
            root.join(section).join(name).is_file(),
            "no {section}/{name}"
        );
    }
}

/// Every page renders under `groff -man -ww` (all warnings) with no
/// message at all, and says something.
/// The coverage engine's plan cache (where it is, how to move or switch
/// it off, its bound) is in the pages of the commands that fill it.
#[test]
fn the_plan_cache_is_documented() {
    let (_d, root) = manual();
    for page in ["man1/profdev-cprof.1", "man1/profdev-gmon.1", "man4/prof.4"] {
        let text = words(&std::fs::read_to_string(root.join(page)).unwrap());
        for what in ["PROFDEV_CACHE_DIR", "/var/cache/profdev/coverage"] {
            assert!(text.contains(what), "{page} does not mention {what}");
        }
    }
}

#[test]
fn every_page_renders_without_a_warning() {
    if !profdev_testkit::tools("groff renders every man page", &["groff"]) {
        return;
    }
    let (_d, root) = manual();
    let mut rendered = 0;
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        if text.starts_with(".so ") {
            continue;
        }
        let out = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
            "groff -man -ww -z {}:\n{}",
            page.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-P-cbou", "-ww"])
            .arg(&page)
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            shown.contains("NAME") && shown.contains("DESCRIPTION"),
            "{shown}"
        );
        assert!(
            shown.split_whitespace().count() > 60,
            "{} is nearly empty",
            page.display()
        );
        rendered += 1;
    }
    assert!(rendered >= 22, "only {rendered} pages rendered");
}

/// The options `profdev CMD --help` lists (its lines that start with an
/// option) are those the OPTIONS section of CMD's page lists, and the
/// page's text names every option the help's prose mentions.
#[test]
fn help_and_page_list_the_same_options() {
    let (_d, root) = manual();
    for c in commands() {
        let out = run(profdev().args([c.as_str(), "--help"]));
        assert!(out.status.success(), "profdev {c} --help failed");
        let help = String::from_utf8(out.stdout).unwrap();
        let page =
            words(&std::fs::read_to_string(root.join(format!("man1/profdev-{c}.1"))).unwrap());
        let listed = |text: &str| -> BTreeSet<String> {
            text.lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with('-'))
                .flat_map(|l| help_options(l.split("  ").next().unwrap()))
                .collect()
        };
        let options = page
            .split(".SH OPTIONS\n")
            .nth(1)
            .map(|s| s.split("\n.SH").next().unwrap())
            .unwrap_or_else(|| panic!("profdev-{c}.1 has no OPTIONS section"));
        let in_help = listed(&help);
        assert!(!in_help.is_empty(), "{help}");
        assert_eq!(
            in_help,
            listed(options),
            "`profdev {c} --help` and the OPTIONS of profdev-{c}.1 differ:\n{help}\n{options}"
        );
        for opt in help_options(&help) {
            assert!(
                has_option(&page, &opt),
                "`profdev {c} --help` mentions {opt}, its page does not:\n{help}"
            );
        }
    }
}

fn script(shell: &str, dir: &Path) -> PathBuf {
    let out = run(profdev().args(["completions", shell]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join(format!("profdev.{shell}"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

/// Run a bash script that sources the completions and prints COMPREPLY
/// for the words given, one candidate per line.
fn bash_complete(script: &Path, function: &str, words: &[&str]) -> BTreeSet<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let (cur, prev) = (words[cword], if cword > 0 { words[cword - 1] } else { "" });
    let body = format!(
        "source '{}' || exit 9\nCOMP_WORDS=({})\nCOMP_CWORD={cword}\nCOMP_LINE='{}'\n\
         {function} '{}' '{cur}' '{prev}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        quoted.join(" "),
        words.join(" "),
        words[0],
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &body])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_commands_options_and_classic_names() {
    if !profdev_testkit::tools("bash completion", &["bash"]) {
        return;
    }
    let d = tempdir();
    let script = script("bash", d.path());
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Loaded, it is what completes profdev and the classic names.
    let body = format!(
        "source '{}' && complete -p profdev && complete -p kprof prfpr",
        script.display()
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &body])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shown.contains("-F _profdev profdev"), "{shown}");
    assert!(
        shown.contains(" kprof") && shown.contains(" prfpr"),
        "{shown}"
    );

    // `profdev pr<TAB>`: exactly the commands that start with "pr".
    let want: BTreeSet<String> = commands()
        .into_iter()
        .filter(|c| c.starts_with("pr"))
        .collect();
    assert_eq!(bash_complete(&script, "_profdev", &["profdev", "pr"]), want);
    // An option of one subcommand, and not another's.
    let got = bash_complete(&script, "_profdev", &["profdev", "sample", "--"]);
    assert!(
        got.contains("--log-bucket") && got.contains("--bpf"),
        "{got:?}"
    );
    assert!(
        !got.contains("--format"),
        "gmon's option offered for sample: {got:?}"
    );
    let got = bash_complete(&script, "_profdev", &["profdev", "gmon", "--f"]);
    assert_eq!(got, BTreeSet::from(["--format".to_string()]));
    // A classic name run through a link: its own options and operands.
    let got = bash_complete(&script, "_profdev_classic", &["prfdc", "-"]);
    for o in ["-f", "-u", "-n"] {
        assert!(got.contains(o), "prfdc -<TAB> lacks {o}: {got:?}");
    }
    let got = bash_complete(&script, "_profdev_classic", &["prfstat", "o"]);
    assert_eq!(got, BTreeSet::from(["on".to_string(), "off".to_string()]));
}

#[test]
fn zsh_loads_the_completions_for_profdev_and_the_classic_names() {
    if !profdev_testkit::tools("zsh completion", &["zsh"]) {
        return;
    }
    let d = tempdir();
    let script = script("zsh", d.path());
    let out = Command::new("zsh").arg("-n").arg(&script).output().unwrap();
    assert!(
        out.status.success(),
        "zsh -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Sourced after compinit, it registers itself for every name.
    let body = format!(
        "autoload -Uz compinit && compinit -u -d '{}/zcompdump' && source '{}' && \
         print -r -- $_comps[profdev] $_comps[kprof] $_comps[prfpr]",
        d.path().display(),
        script.display()
    );
    let out = Command::new("zsh")
        .args(["-f", "-c", &body])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "_profdev _profdev_classic _profdev_classic\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Installed in $fpath as _profdev, its #compdef line names them all.
    let fpath = d.path().join("fpath");
    std::fs::create_dir(&fpath).unwrap();
    std::fs::copy(&script, fpath.join("_profdev")).unwrap();
    let body = format!(
        "fpath=('{}' $fpath) && autoload -Uz compinit && compinit -u -d '{}/zcompdump2' && \
         print -r -- $_comps[profdev] $_comps[prfdc]",
        fpath.display(),
        d.path().display()
    );
    let out = Command::new("zsh")
        .args(["-f", "-c", &body])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "_profdev _profdev\n");
}

#[test]
fn fish_completes_commands_options_and_classic_names() {
    if !profdev_testkit::tools("fish completion", &["fish"]) {
        return;
    }
    let d = tempdir();
    let script = script("fish", d.path());
    let out = Command::new("fish")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fish -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let complete = |line: &str| -> BTreeSet<String> {
        let body = format!("source '{}'; complete -C '{line}'", script.display());
        let out = Command::new("fish")
            .args(["--no-config", "-c", &body])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split('\t').next())
            .map(str::to_string)
            .collect()
    };
    let want: BTreeSet<String> = commands()
        .into_iter()
        .filter(|c| c.starts_with("pr"))
        .collect();
    assert_eq!(complete("profdev pr"), want);
    assert!(complete("profdev sample --").contains("--log-bucket"));
    let got = complete("prfdc -");
    assert!(
        got.contains("-u") && got.contains("-n") && got.contains("-f"),
        "{got:?}"
    );
}

#[test]
fn man_refuses_what_it_cannot_write() {
    let d = tempdir();
    let file = d.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let out = run(profdev().arg("man").arg(&file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("profdev man: ") && err.lines().count() == 1,
        "{err}"
    );
    // A link planted at a page's name is replaced, never written through.
    let root = d.path().join("man");
    std::fs::create_dir_all(root.join("man4")).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, root.join("man4/kprof.4")).unwrap();
    assert!(run(profdev().arg("man").arg(&root)).status.success());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let page = root.join("man4/kprof.4");
    assert!(!page.symlink_metadata().unwrap().file_type().is_symlink());
    let unknown = run(profdev().args(["completions", "tcsh"]));
    assert_eq!(unknown.status.code(), Some(2));
}
