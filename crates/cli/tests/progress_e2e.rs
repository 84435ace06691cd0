//! The health of private runs: on a terminal (a pty from script(1)),
//! `profdev gmon` and `profdev sample` show a live line with their counts
//! while CMD runs, and totals at the end that agree with their summaries;
//! off a terminal, only the totals.
//!
//! Loss is provoked deterministically: `profdev gmon --mmap-pages 1`
//! copies 16 KiB of user stack with every sample, which no one-page (4 KiB)
//! ring can hold, so the kernel drops every sample and says so in the LOST
//! record it writes ahead of the next record that fits (here, the task
//! records of the `/bin/true` the workload runs in a loop).
//!
//! Needs root (or CAP_PERFMON) and script(1); skips saying why without
//! them, and fails instead when PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;
use common::*;
use profdev_testkit::Terminal;
use std::path::Path;
use std::time::Duration;

/// A workload that loops (busy, then `/bin/true`) until `stop` exists.
fn workload(stop: &Path) -> String {
    format!(
        "sh -c 'while [ ! -e {} ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; /bin/true; done'",
        stop.display()
    )
}

/// `profdev ARGS` run by script(1) on a pseudo-terminal.
fn on_terminal(args: &str) -> Terminal {
    Terminal::spawn(&format!("{} {args}", env!("CARGO_BIN_EXE_profdev")))
}

/// Wait (bounded) for the run on the terminal to end; everything it wrote.
fn finish(run: Terminal) -> String {
    run.finish(Duration::from_secs(120)).1
}

/// The lines of a terminal's output, with the line-clearing escapes gone.
fn lines(text: &str) -> Vec<String> {
    text.split(['\r', '\n'])
        .map(|l| l.replace("\x1b[K", ""))
        .filter(|l| !l.is_empty())
        .collect()
}

/// The number before `word` in `line` (`12 lost` → 12).
fn count(line: &str, word: &str) -> Option<u64> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    let i = words.iter().position(|w| *w == word)?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

/// Live lines of `name`: `NAME: 1.2s, …` (not the totals).
fn live(text: &str, name: &str) -> Vec<String> {
    let prefix = format!("{name}: ");
    lines(text)
        .into_iter()
        .filter(|l| {
            // `NAME: 1.2s, `: seconds with one decimal.
            let Some(rest) = l.strip_prefix(&prefix) else {
                return false;
            };
            let Some((secs, _)) = rest.split_once("s, ") else {
                return false;
            };
            secs.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && b.len() == 1
                    && (a.to_string() + b).bytes().all(|c| c.is_ascii_digit())
            })
        })
        .collect()
}

fn one_line<'a>(all: &'a [String], prefix: &str) -> &'a str {
    let found: Vec<&String> = all.iter().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "{prefix}: {all:#?}");
    found[0]
}

fn can_run(what: &str) -> bool {
    privileged(what, can_sample_system()) && profdev_testkit::tools(what, &["script"])
}

#[test]
fn gmon_with_a_one_page_ring_counts_its_losses_live() {
    let what = "gmon_with_a_one_page_ring_counts_its_losses_live";
    if !can_run(what) {
        return;
    }
    let tmp = tempdir();
    let stop = tmp.path().join("stop");
    let out = tmp.path().join("gmon.out");
    let run = on_terminal(&format!(
        "gmon --mmap-pages 1 -o {} -- {}",
        out.display(),
        workload(&stop)
    ));
    // Lost records are counted while CMD runs, and shown.
    let mut seen = 0;
    wait_until(
        "a live line counting lost records",
        Duration::from_secs(120),
        || {
            seen = live(&run.text(), "profdev gmon")
                .iter()
                .filter_map(|l| count(l, "lost"))
                .max()
                .unwrap_or(0);
            seen > 0
        },
    );
    std::fs::write(&stop, b"").unwrap();
    let text = finish(run);
    let all = lines(&text);
    let totals = one_line(&all, "profdev gmon: totals: ");
    let summary = one_line(&all, "profdev gmon: wrote ");
    let lost = count(totals, "lost").unwrap();
    assert!(lost >= seen, "{totals} after a live {seen} lost");
    assert_eq!(Some(lost), count(summary, "lost"), "{totals}\n{summary}");
    assert_eq!(
        count(totals, "samples"),
        count(summary, "user"),
        "{totals}\n{summary}"
    );
    assert_eq!(count(totals, "throttled"), count(summary, "throttled"));
}

#[test]
fn sample_at_10_khz_shows_its_samples_rise_and_totals_agree() {
    let what = "sample_at_10_khz_shows_its_samples_rise_and_totals_agree";
    if !can_run(what) {
        return;
    }
    let tmp = tempdir();
    let stop = tmp.path().join("stop");
    let run = on_terminal(&format!(
        "sample -F 10000 -o {} -- {}",
        tmp.path().join("out").display(),
        workload(&stop)
    ));
    let mut counts: Vec<u64> = Vec::new();
    wait_until(
        "three live lines with rising samples",
        Duration::from_secs(120),
        || {
            counts = live(&run.text(), "profdev sample")
                .iter()
                .filter_map(|l| count(l, "samples"))
                .collect();
            counts.windows(2).filter(|w| w[1] > w[0]).count() >= 2
        },
    );
    assert!(counts.windows(2).all(|w| w[1] >= w[0]), "{counts:?}");
    std::fs::write(&stop, b"").unwrap();
    let text = finish(run);
    let all = lines(&text);
    let totals = one_line(&all, "profdev sample: totals: ");
    assert!(totals.contains("(asked 10000)"), "{totals}");
    let samples = count(totals, "samples").unwrap();
    assert!(samples >= *counts.last().unwrap());
    // The totals are the one summary of the counts (issue 25: sample
    // printed two near-duplicates); the last line says what was written.
    assert!(
        !all.iter()
            .any(|l| l.starts_with("profdev sample: ") && l.contains(" samples in ")),
        "{all:#?}"
    );
    assert!(
        all.iter()
            .any(|l| l.starts_with("profdev sample: ") && l.contains("; wrote ")),
        "{all:#?}"
    );
}

#[test]
fn off_a_terminal_only_the_totals() {
    let what = "off_a_terminal_only_the_totals";
    if !privileged(what, can_sample_system()) {
        return;
    }
    let tmp = tempdir();
    let out = run(profdev()
        .args(["gmon", "--mmap-pages", "1", "-o"])
        .arg(tmp.path().join("gmon.out"))
        .args(["--", "sh", "-c", "true"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert_eq!(err.matches("profdev gmon: totals: ").count(), 1, "{err}");

    // A ring that is not a power of two: one sentence, exit 2.
    let out = run(profdev().args(["gmon", "--mmap-pages", "3", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "profdev gmon: invalid value '3' for '--mmap-pages <N>': --mmap-pages 3: the ring must \
             be a power of two of pages, from 1 to 65536 (as perf's -m)\n"
        ),
        "{err}"
    );
}
