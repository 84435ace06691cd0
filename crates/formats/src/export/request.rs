//! `profdev export`'s dispatch: the bytes of any format but perf-script
//! (which is streamed, [`super::perf_script::Script`]) from a recording and
//! what the command line asked, with what the caller needs to write them.

use super::{firefox, folded, gmon, kpdata, otlp, pprof, proc_profile, svg};
use super::{ExportError, Written};
use crate::recording::Recording;

/// The judge of a differential flame graph's frames ([`svg::render_diff`]).
pub type Judge = dyn Fn(&[svg::PathCounts]) -> Vec<svg::Shift>;

/// What an export asks of a writer besides the recording.
pub struct Request<'a> {
    /// The format, as `profdev export` names it (`folded`, `svg`, `pprof`,
    /// `firefox`, `gmon`, `kpdata`, `proc-profile`, `otlp`).
    pub format: &'a str,
    /// svg: the title (default `Flame Graph`, or `Icicle Graph` inverted).
    pub title: Option<String>,
    /// svg: an icicle graph.
    pub inverted: bool,
    /// svg: the BASE of a differential graph, and the judge of its frames'
    /// changes.
    pub diff: Option<(&'a Recording, &'a Judge)>,
    /// gmon: the executable's samples and the layout.
    pub gmon: gmon::Select,
    /// proc-profile: log2 of the bytes per counter.
    pub shift: u32,
    /// kpdata: log2 of the bytes per bucket.
    pub log_bucket: u32,
}

/// An export made in memory.
pub struct Made {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Whether they are binary (refused on a terminal).
    pub binary: bool,
    /// Whether they hold kernel addresses (a file of them is 0600).
    pub kernel_addrs: bool,
    /// What it holds, for the line that names the file written.
    pub what: Written,
}

/// The export of `rec` that `req` asks for.
///
/// # Errors
///
/// What the format's writer refuses (no kernel symbols, no executable,
/// an unknown format).
pub fn make(rec: &Recording, req: &Request) -> Result<Made, ExportError> {
    let made = |bytes, binary, kernel_addrs| Made {
        bytes,
        binary,
        kernel_addrs,
        what: Written::Other,
    };
    Ok(match req.format {
        "folded" => made(folded::write(rec).into_bytes(), false, false),
        "svg" => {
            let opt = svg::Options {
                title: req.title.clone().unwrap_or_else(|| {
                    if req.inverted {
                        "Icicle Graph"
                    } else {
                        "Flame Graph"
                    }
                    .into()
                }),
                inverted: req.inverted,
                ..svg::Options::default()
            };
            let graph = match req.diff {
                Some((base, judge)) => svg::render_diff(base, rec, &opt, judge),
                None => svg::render(rec, &opt),
            };
            Made {
                what: Written::Svg {
                    frames: graph.frames,
                    samples: graph.samples,
                },
                ..made(graph.svg.into_bytes(), false, false)
            }
        }
        "pprof" => made(pprof::write(rec), true, rec.has_kernel_frames()),
        "firefox" => made(firefox::write(rec), false, false),
        "gmon" => {
            let (bytes, exe) = gmon::write(rec, &req.gmon)?;
            Made {
                what: Written::Gmon { exe },
                ..made(bytes, true, false)
            }
        }
        "kpdata" => made(kpdata::write(rec, req.log_bucket)?, true, true),
        "proc-profile" => made(proc_profile::write(rec, req.shift)?, true, true),
        "otlp" => made(otlp::write(rec), true, rec.has_kernel_frames()),
        other => return Err(ExportError::Write(format!("no such format: {other}"))),
    })
}
