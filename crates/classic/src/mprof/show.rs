//! What `profdev mprof` shows of a run, laid out whole: the tables, then
//! `--leaks`, `--temporary` and `--peak`'s sections, and the bytes of the
//! files `--pprof`, `--folded` and `--dhat` ask for ([`render`]).

use super::{heap_stacks, output, stack_files, Extras};
use crate::args::mprof::Args;
use anyhow::Result;
use profdev_formats::dhat::DhatRun;
use profdev_mprof::{merge_stacks, Module, Report, Stack};
use profdev_report::mprof::format_peak;
use std::ffi::OsString;

/// What a run's reports carry beside their modules.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// The stacks, merged ([`merge_stacks`]).
    pub stacks: Vec<Stack>,
    /// DHAT's run figures ([`super::dhat_run`]).
    pub dhat: Option<DhatRun>,
    /// With `--peak`: the global high water of the processes that ended
    /// normally, added up (None: none did).
    pub peak: Option<u64>,
}

impl Run {
    /// From the reports of the run of `cmd` (its command line).
    pub fn of(reports: &[Report], cmd: String) -> Run {
        let peaks: Vec<u64> = reports.iter().filter_map(|r| r.peak).collect();
        Run {
            stacks: merge_stacks(reports),
            dhat: super::dhat_run(reports, cmd),
            peak: (!peaks.is_empty()).then(|| peaks.iter().sum()),
        }
    }
}

/// What [`render`] lays out: the text to show, and the files to write,
/// each (file, bytes).
pub type Rendered = (String, Vec<(OsString, Vec<u8>)>);

/// Append `section` to `text`, a blank line between them.
fn push_section(text: &mut String, section: &str) {
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    text.push_str(section);
}

/// The text to show (tables, leaks, temporary blocks, the peak) and the
/// files to write, each (file, bytes). `note` gets each sentence for
/// standard error.
pub fn render(
    modules: &[Module],
    args: &Args,
    run: &Run,
    note: &mut dyn FnMut(String),
) -> Result<Rendered> {
    let extras = Extras {
        leaks: args.leaks,
        pprof: args.pprof.is_some(),
        dhat: args.dhat.is_some(),
        sample_bytes: args.sample_bytes,
        temporary: args.temporary,
        peak_sites: args.peak && run.stacks.is_empty(),
    };
    let o = output(modules, &args.options, extras, &args.modules, note)?;
    let mut text = o.tables;
    text.push_str(o.leaks.as_deref().unwrap_or_default());
    if let Some(t) = &o.temporary {
        push_section(&mut text, t);
    }
    if args.peak {
        match run.peak {
            None => note(
                "mprof: warning: no process ended normally, and --peak's picture comes with a \
                 normal end only"
                    .into(),
            ),
            Some(peak) if run.stacks.is_empty() => push_section(
                &mut text,
                &format_peak(peak, "site\tfunction", &o.peak_sites),
            ),
            Some(peak) => {
                let rows: Vec<(u64, u64, String)> = run
                    .stacks
                    .iter()
                    .zip(heap_stacks(&run.stacks))
                    .map(|(st, h)| {
                        let names: Vec<&str> =
                            h.frames.iter().rev().map(|f| f.function.as_str()).collect();
                        (st.at_peak.0, st.at_peak.1, names.join(";"))
                    })
                    .collect();
                push_section(&mut text, &format_peak(peak, "stack", &rows));
            }
        }
    }
    if let (Some(file), None) = (&args.dhat, &run.dhat) {
        note(format!(
            "mprof: warning: no process ended normally, and DHAT's figures come with a \
             normal end only: {} was not written",
            file.to_string_lossy()
        ));
    }
    let mut files = Vec::new();
    if args.pprof.is_some() || args.folded.is_some() {
        let (pprof, folded) = stack_files(&run.stacks, &o.pprof, args, note);
        files.extend(args.pprof.clone().map(|f| (f, pprof)));
        files.extend(args.folded.clone().map(|f| (f, folded.into_bytes())));
    }
    if let (Some(file), Some(d)) = (&args.dhat, &run.dhat) {
        let json = profdev_formats::dhat::encode(d, &o.dhat);
        files.push((file.clone(), json.into_bytes()));
    }
    Ok((text, files))
}
